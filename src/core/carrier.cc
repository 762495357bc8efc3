#include "lens/carrier.h"

#include <bit>
#include <cstring>
#include <string>

#include "byte_order.h"
#include "lens/trace_context.h"

namespace lens {
namespace {

constexpr std::uint8_t kMagic[4] = {'L', 'N', 'S', '1'};
constexpr std::size_t kVersionAt = 4, kSizeAt = 6, kFlagsAt = 8, kTraceFlagsAt = 12,
                      kReserved1At = 13, kTracestateLenAt = 14, kTraceIdAt = 16, kSpanIdAt = 32,
                      kStepAt = 40, kChecksumAt = 48, kReserved2At = 52, kReserved2Bytes = 12,
                      kTracestateAt = 64;
constexpr std::uint32_t kFlagHasContext = 1u;

// True when bytes [from, to) of the frame are all zero; `to` is a multiple of 8.
bool all_zero(const std::uint8_t* frame, std::size_t from, std::size_t to) {
  std::uint64_t any = 0;
  for (; from % 8 != 0 && from < to; ++from) any |= frame[from];
  for (; from < to; from += 8) any |= detail::get_le64(frame + from);
  return any == 0;
}

// A 64-bit multiply-xorshift over the frame's little-endian 8-byte words,
// from the header through the tracestate's used bytes rounded up to a whole
// word (the padding there is zero in a valid frame, and decoding checks it
// separately), with the checksum field read as zero; folded to 32 bits. Every
// round is a bijection of the state for a given word, so any change confined
// to one word always changes the 64-bit state; the fold to 32 bits can map
// two states to one value, so a corrupted frame passes with a probability
// of about 2^-32 (the tests flip every single bit of a frame and see each
// caught). Eight rounds for a frame without tracestate: about a tenth of
// what a byte-wise hash costs.
std::uint32_t frame_checksum(const std::uint8_t* frame, std::size_t tracestate_len) {
  constexpr std::uint64_t kChecksumFieldMask = ~std::uint64_t{0xffffffff};
  const std::size_t words = (kTracestateAt + tracestate_len + 7) / 8;
  std::uint64_t h = 0x6c656e732d667232ULL;
  for (std::size_t w = 0; w < words; ++w) {
    std::uint64_t word = detail::get_le64(frame + 8 * w);
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
  detail::put_le16(f.data() + kVersionAt, kCarrierFrameVersion);
  detail::put_le16(f.data() + kSizeAt, static_cast<std::uint16_t>(kCarrierFrameBytes));
  if (carrier && carrier->context.valid()) {
    const SpanContext& ctx = carrier->context;
    detail::put_le32(f.data() + kFlagsAt, kFlagHasContext);
    f[kTraceFlagsAt] = ctx.trace_flags;
    const std::string_view tracestate = fit_tracestate(ctx.tracestate);
    detail::put_le16(f.data() + kTracestateLenAt, static_cast<std::uint16_t>(tracestate.size()));
    std::memcpy(f.data() + kTraceIdAt, ctx.trace_id.bytes().data(), TraceId::kSize);
    std::memcpy(f.data() + kSpanIdAt, ctx.span_id.bytes().data(), SpanId::kSize);
    detail::put_le64(f.data() + kStepAt, carrier->step);
    std::memcpy(f.data() + kTracestateAt, tracestate.data(), tracestate.size());
  }
  detail::put_le32(f.data() + kChecksumAt,
                   frame_checksum(f.data(), detail::get_le16(f.data() + kTracestateLenAt)));
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
  if (detail::get_le16(f + kVersionAt) != kCarrierFrameVersion)
    return fail(FrameStatus::kBadVersion);
  if (detail::get_le16(f + kSizeAt) != kCarrierFrameBytes) return fail(FrameStatus::kBadSizeField);
  const std::uint16_t tracestate_len = detail::get_le16(f + kTracestateLenAt);
  if (tracestate_len > kCarrierMaxTracestateBytes) return fail(FrameStatus::kBadTracestateLength);
  if (detail::get_le32(f + kChecksumAt) != frame_checksum(f, tracestate_len))
    return fail(FrameStatus::kBadChecksum);
  if (!all_zero(f, kTracestateAt + tracestate_len, kCarrierFrameBytes))
    return fail(FrameStatus::kReservedNotZero);
  if (f[kReserved1At] != 0) return fail(FrameStatus::kReservedNotZero);
  if (!all_zero(f, kReserved2At, kReserved2At + kReserved2Bytes))
    return fail(FrameStatus::kReservedNotZero);
  const std::uint32_t flags = detail::get_le32(f + kFlagsAt);
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
  c.step = detail::get_le64(f + kStepAt);
  return DecodedCarrier{FrameStatus::kOk, std::move(c)};
}

}  // namespace lens
