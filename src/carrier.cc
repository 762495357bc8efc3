#include "lens/carrier.h"

#include <bit>
#include <cstring>
#include <string>

#include "lens/trace_context.h"

namespace lens {
namespace {

constexpr std::uint8_t kMagic[4] = {'L', 'N', 'S', '1'};
constexpr std::size_t kVersionAt = 4, kSizeAt = 6, kFlagsAt = 8, kTraceFlagsAt = 12,
                      kReserved1At = 13, kTracestateLenAt = 14, kTraceIdAt = 16, kSpanIdAt = 32,
                      kStepAt = 40, kChecksumAt = 48, kReserved2At = 52, kReserved2Bytes = 12,
                      kTracestateAt = 64;
constexpr std::uint32_t kFlagHasContext = 1u;

void put_u16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}
void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// True when bytes [from, to) of the frame are all zero; `to` is a multiple of 8.
bool all_zero(const std::uint8_t* frame, std::size_t from, std::size_t to) {
  std::uint64_t any = 0;
  for (; from % 8 != 0 && from < to; ++from) any |= frame[from];
  for (; from < to; from += 8) any |= get_u64(frame + from);
  return any == 0;
}

// A 64-bit multiply-xorshift over the frame's little-endian 8-byte words,
// from the header through the tracestate's used bytes rounded up to a whole
// word (the padding there is zero in a valid frame, and decoding checks it
// separately), with the checksum field read as zero; folded to 32 bits. Every
// round is a bijection of the state for a given word, so any change confined
// to one word always changes the result. Eight rounds for a frame without
// tracestate: about a tenth of what a byte-wise hash costs.
std::uint32_t frame_checksum(const std::uint8_t* frame, std::size_t tracestate_len) {
  constexpr std::uint64_t kChecksumFieldMask = ~std::uint64_t{0xffffffff};
  const std::size_t words = (kTracestateAt + tracestate_len + 7) / 8;
  std::uint64_t h = 0x6c656e732d667232ULL;
  for (std::size_t w = 0; w < words; ++w) {
    std::uint64_t word = get_u64(frame + 8 * w);
    if (8 * w == kChecksumAt) word &= kChecksumFieldMask;
    h = (h ^ word) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
  }
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

// Drops members from the right until the tracestate fits.
std::string_view fit_tracestate(std::string_view tracestate) {
  while (tracestate.size() > kCarrierMaxTracestateBytes) {
    auto comma = tracestate.rfind(',');
    tracestate = comma == std::string_view::npos ? std::string_view() : tracestate.substr(0, comma);
  }
  return tracestate;
}

}  // namespace

CarrierFrame encode_carrier(const std::optional<StepCarrier>& carrier) {
  CarrierFrame f{};
  std::memcpy(f.data(), kMagic, 4);
  put_u16(f.data() + kVersionAt, kCarrierFrameVersion);
  put_u16(f.data() + kSizeAt, static_cast<std::uint16_t>(kCarrierFrameBytes));
  if (carrier && carrier->context.valid()) {
    const SpanContext& ctx = carrier->context;
    put_u32(f.data() + kFlagsAt, kFlagHasContext);
    f[kTraceFlagsAt] = ctx.trace_flags;
    const std::string_view tracestate = fit_tracestate(ctx.tracestate);
    put_u16(f.data() + kTracestateLenAt, static_cast<std::uint16_t>(tracestate.size()));
    std::memcpy(f.data() + kTraceIdAt, ctx.trace_id.bytes().data(), TraceId::kSize);
    std::memcpy(f.data() + kSpanIdAt, ctx.span_id.bytes().data(), SpanId::kSize);
    put_u64(f.data() + kStepAt, carrier->step);
    std::memcpy(f.data() + kTracestateAt, tracestate.data(), tracestate.size());
  }
  put_u32(f.data() + kChecksumAt, frame_checksum(f.data(), get_u16(f.data() + kTracestateLenAt)));
  return f;
}

std::string_view frame_status_name(FrameStatus status) {
  switch (status) {
    case FrameStatus::kOk:
      return "ok";
    case FrameStatus::kNoContext:
      return "no context";
    case FrameStatus::kWrongSize:
      return "wrong frame size";
    case FrameStatus::kBadMagic:
      return "bad magic";
    case FrameStatus::kBadVersion:
      return "unsupported version";
    case FrameStatus::kBadSizeField:
      return "bad size field";
    case FrameStatus::kBadChecksum:
      return "bad checksum";
    case FrameStatus::kBadTracestateLength:
      return "bad tracestate length";
    case FrameStatus::kInvalidIds:
      return "invalid trace or span id";
    case FrameStatus::kReservedNotZero:
      return "reserved bytes not zero";
  }
  return "unknown";
}

DecodedCarrier decode_carrier(std::span<const std::uint8_t> frame) {
  auto fail = [](FrameStatus s) { return DecodedCarrier{s, std::nullopt}; };
  if (frame.size() != kCarrierFrameBytes) return fail(FrameStatus::kWrongSize);
  const std::uint8_t* f = frame.data();
  if (std::memcmp(f, kMagic, 4) != 0) return fail(FrameStatus::kBadMagic);
  if (get_u16(f + kVersionAt) != kCarrierFrameVersion) return fail(FrameStatus::kBadVersion);
  if (get_u16(f + kSizeAt) != kCarrierFrameBytes) return fail(FrameStatus::kBadSizeField);
  const std::uint16_t tracestate_len = get_u16(f + kTracestateLenAt);
  if (tracestate_len > kCarrierMaxTracestateBytes) return fail(FrameStatus::kBadTracestateLength);
  if (get_u32(f + kChecksumAt) != frame_checksum(f, tracestate_len))
    return fail(FrameStatus::kBadChecksum);
  if (!all_zero(f, kTracestateAt + tracestate_len, kCarrierFrameBytes))
    return fail(FrameStatus::kReservedNotZero);
  if (f[kReserved1At] != 0) return fail(FrameStatus::kReservedNotZero);
  if (!all_zero(f, kReserved2At, kReserved2At + kReserved2Bytes))
    return fail(FrameStatus::kReservedNotZero);
  const std::uint32_t flags = get_u32(f + kFlagsAt);
  if ((flags & ~kFlagHasContext) != 0) return fail(FrameStatus::kReservedNotZero);
  if ((flags & kFlagHasContext) == 0) return fail(FrameStatus::kNoContext);

  StepCarrier c;
  std::array<std::uint8_t, TraceId::kSize> trace{};
  std::array<std::uint8_t, SpanId::kSize> span{};
  std::memcpy(trace.data(), f + kTraceIdAt, trace.size());
  std::memcpy(span.data(), f + kSpanIdAt, span.size());
  c.context.trace_id = TraceId(trace);
  c.context.span_id = SpanId(span);
  if (!c.context.valid()) return fail(FrameStatus::kInvalidIds);
  c.context.trace_flags = f[kTraceFlagsAt];
  c.context.remote = true;
  // Re-validate: the bytes came from another process.
  c.context.tracestate = sanitize_tracestate(
      std::string_view(reinterpret_cast<const char*>(f + kTracestateAt), tracestate_len));
  c.step = get_u64(f + kStepAt);
  return DecodedCarrier{FrameStatus::kOk, std::move(c)};
}

}  // namespace lens
