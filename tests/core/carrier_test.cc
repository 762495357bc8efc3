#include "lens/carrier.h"

#include <gtest/gtest.h>

#include <random>

#include "lens/broadcast_trace_context.h"
#include "lens/pipeline_stats.h"

namespace lens {
namespace {

StepCarrier sample_carrier() {
  StepCarrier c;
  c.context.trace_id = IdGenerator::new_trace_id();
  c.context.span_id = IdGenerator::new_span_id();
  c.context.trace_flags = TraceFlags::kSampled;
  c.context.tracestate = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
  c.step = 12345678901ULL;
  return c;
}

TEST(Carrier, RoundTrips) {
  const StepCarrier c = sample_carrier();
  CarrierFrame f = encode_carrier(c);
  DecodedCarrier d = decode_carrier(f);
  ASSERT_EQ(d.status, FrameStatus::kOk);
  ASSERT_TRUE(d.carrier);
  EXPECT_EQ(d.carrier->context.trace_id, c.context.trace_id);
  EXPECT_EQ(d.carrier->context.span_id, c.context.span_id);
  EXPECT_EQ(d.carrier->context.trace_flags, c.context.trace_flags);
  EXPECT_EQ(d.carrier->context.tracestate, c.context.tracestate);
  EXPECT_TRUE(d.carrier->context.remote);
  EXPECT_EQ(d.carrier->step, c.step);
}

TEST(Carrier, ARepeatedTracestateKeyArrivesWithItsFirstMember) {
  StepCarrier c = sample_carrier();
  c.context.tracestate = "foo=1,congo=2,foo=2";
  auto d = decode_carrier(encode_carrier(c));
  ASSERT_TRUE(d.carrier);
  EXPECT_EQ(d.carrier->context.tracestate, "foo=1,congo=2");
}

TEST(Carrier, UnsampledFlagTravels) {
  StepCarrier c = sample_carrier();
  c.context.trace_flags = 0;
  auto d = decode_carrier(encode_carrier(c));
  ASSERT_TRUE(d.carrier);
  EXPECT_FALSE(d.carrier->context.sampled());
}

TEST(Carrier, NoContextFrame) {
  EXPECT_EQ(decode_carrier(encode_carrier(std::nullopt)).status, FrameStatus::kNoContext);
  StepCarrier invalid;
  EXPECT_EQ(decode_carrier(encode_carrier(invalid)).status, FrameStatus::kNoContext);
}

TEST(Carrier, LongTracestateIsShortenedFromTheRight) {
  StepCarrier c = sample_carrier();
  c.context.tracestate.clear();
  for (int i = 0; i < 30; ++i)
    c.context.tracestate +=
        (i ? "," : "") + std::string("key") + std::to_string(i) + "=" + std::string(10, 'v');
  ASSERT_GT(c.context.tracestate.size(), kCarrierMaxTracestateBytes);
  auto d = decode_carrier(encode_carrier(c));
  ASSERT_TRUE(d.carrier);
  EXPECT_LE(d.carrier->context.tracestate.size(), kCarrierMaxTracestateBytes);
  EXPECT_EQ(d.carrier->context.tracestate.rfind("key0=", 0), 0u);
  EXPECT_EQ(c.context.tracestate.rfind(d.carrier->context.tracestate, 0), 0u);
}

// Recomputes the checksum after a deliberate edit, so the test reaches the
// field check behind it.
void reseal(CarrierFrame& f) {
  const std::size_t tracestate =
      std::min<std::size_t>(f[14] | (f[15] << 8), kCarrierMaxTracestateBytes);
  const std::size_t end = (64 + tracestate + 7) / 8 * 8;
  std::uint64_t h = 0x6c656e732d667232ULL;
  for (std::size_t at = 0; at < end; at += 8) {
    std::uint64_t w = 0;
    for (std::size_t b = 0; b < 8; ++b) {
      const bool checksum_field = at + b >= 48 && at + b < 52;
      w |= std::uint64_t{checksum_field ? std::uint8_t{0} : f[at + b]} << (8 * b);
    }
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
  }
  const auto sum = static_cast<std::uint32_t>(h ^ (h >> 32));
  for (int i = 0; i < 4; ++i) f[48 + i] = static_cast<std::uint8_t>(sum >> (8 * i));
}

TEST(Carrier, MalformedFramesGiveNoContext) {
  const CarrierFrame good = encode_carrier(sample_carrier());
  EXPECT_EQ(decode_carrier(std::span(good.data(), good.size() - 1)).status,
            FrameStatus::kWrongSize);
  EXPECT_EQ(decode_carrier(std::span<const std::uint8_t>()).status, FrameStatus::kWrongSize);
  std::vector<std::uint8_t> longer(good.begin(), good.end());
  longer.push_back(0);
  EXPECT_EQ(decode_carrier(longer).status, FrameStatus::kWrongSize);

  CarrierFrame f = good;
  f[0] = 'X';
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kBadMagic);
  f = good;
  f[4] = kCarrierFrameVersion + 1;
  reseal(f);
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kBadVersion);
  f = good;
  f[6] = 0x41;
  reseal(f);
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kBadSizeField);
  f = good;
  f[20] ^= 0x01;  // a flipped trace id bit without a new checksum
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kBadChecksum);
  f = good;
  f[14] = static_cast<std::uint8_t>(kCarrierMaxTracestateBytes + 1);
  f[15] = 0;  // tracestate length one past the maximum
  reseal(f);
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kBadTracestateLength);
  f = good;
  f[kCarrierFrameBytes - 1] = 1;  // padding after the tracestate
  reseal(f);
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kReservedNotZero);
  f = good;
  std::fill(f.begin() + 16, f.begin() + 32, 0);
  reseal(f);
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kInvalidIds);
  f = good;
  f[60] = 1;
  reseal(f);
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kReservedNotZero);
  f = good;
  f[8] |= 0x80;
  reseal(f);
  EXPECT_EQ(decode_carrier(f).status, FrameStatus::kReservedNotZero);
}

TEST(Carrier, EverySingleBitFlipIsRejected) {
  StepCarrier c = sample_carrier();
  c.context.tracestate = "vendor=abc,other=xyz";
  const CarrierFrame good = encode_carrier(c);
  ASSERT_EQ(decode_carrier(good).status, FrameStatus::kOk);
  int rejected = 0;
  for (std::size_t bit = 0; bit < 8 * kCarrierFrameBytes; ++bit) {
    CarrierFrame f = good;
    f[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    const FrameStatus status = decode_carrier(f).status;
    EXPECT_NE(status, FrameStatus::kOk) << "bit " << bit;
    rejected += status != FrameStatus::kOk;
  }
  EXPECT_EQ(rejected, 8 * static_cast<int>(kCarrierFrameBytes));
}

TEST(Carrier, InvalidTracestateBytesAreDiscardedWhole) {
  CarrierFrame f = encode_carrier(sample_carrier());
  const char evil[] = "ok=1,BAD=\x01,fine=2";
  f[14] = sizeof(evil) - 1;
  f[15] = 0;
  std::fill(f.begin() + 64, f.end(), 0);
  std::copy(evil, evil + sizeof(evil) - 1, f.begin() + 64);
  reseal(f);
  auto d = decode_carrier(f);
  ASSERT_EQ(d.status, FrameStatus::kOk);  // the ids still arrive; the tracestate does not
  EXPECT_EQ(d.carrier->context.tracestate, "");
}

TEST(Carrier, RandomBytesNeverDecodeAndNeverCrash) {
  std::mt19937_64 rng(1);
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> bytes(rng() % 400);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    if (i % 2 == 0 && bytes.size() >= 4) {  // give half of them our magic
      bytes[0] = 'L';
      bytes[1] = 'N';
      bytes[2] = 'S';
      bytes[3] = '1';
    }
    ok += decode_carrier(bytes).status == FrameStatus::kOk;
  }
  EXPECT_EQ(ok, 0);
}

TEST(Carrier, AcceptFrameCountsMalformedAndMismatchedSteps) {
  reset_pipeline_stats();
  CarrierFrame bad{};
  EXPECT_FALSE(accept_carrier_frame(bad, std::nullopt));
  EXPECT_EQ(pipeline_stats().frames_malformed, 1u);
  EXPECT_FALSE(accept_carrier_frame(encode_carrier(std::nullopt), std::nullopt));
  EXPECT_EQ(pipeline_stats().frames_without_context, 1u);
  StepCarrier c = sample_carrier();
  c.step = 5;
  auto got = accept_carrier_frame(encode_carrier(c), 6);
  ASSERT_TRUE(got);  // still used: the trace ids must stay shared
  EXPECT_EQ(pipeline_stats().step_mismatches, 1u);
}

}  // namespace
}  // namespace lens
