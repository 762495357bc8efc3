// The sampler (sampler.h): decisions for root spans, made from the trace id
// alone so that every rank decides a step alike.
#include "lens/sampler.h"

#include <gtest/gtest.h>

namespace lens {
namespace {

TEST(Sampler, RatioDecisionIsDeterministicAndNearTheRatio) {
  Sampler s;
  s.kind = Sampler::Kind::kTraceIdRatio;
  s.ratio = 0.3;
  int kept = 0;
  for (int i = 0; i < 20000; ++i) {
    TraceId t = IdGenerator::new_trace_id();
    const bool a = s.should_sample_root(t);
    EXPECT_EQ(a, s.should_sample_root(t));
    kept += a;
  }
  EXPECT_NEAR(kept / 20000.0, 0.3, 0.02);
  s.ratio = 0;
  EXPECT_FALSE(s.should_sample_root(IdGenerator::new_trace_id()));
  s.ratio = 1;
  EXPECT_TRUE(s.should_sample_root(IdGenerator::new_trace_id()));
}

TEST(Sampler, AlwaysOnAndOffIgnoreTheTraceId) {
  Sampler on;
  on.kind = Sampler::Kind::kAlwaysOn;
  Sampler off;
  off.kind = Sampler::Kind::kAlwaysOff;
  for (int i = 0; i < 100; ++i) {
    const TraceId t = IdGenerator::new_trace_id();
    EXPECT_TRUE(on.should_sample_root(t));
    EXPECT_FALSE(off.should_sample_root(t));
  }
}

TEST(Sampler, RatioReadsTheLowEightBytesAsABigEndianInteger) {
  Sampler s;
  s.kind = Sampler::Kind::kTraceIdRatio;
  s.ratio = 0.5;
  std::array<std::uint8_t, TraceId::kSize> bytes{};
  bytes[0] = 0xff;  // the high half does not count
  bytes[8] = 0x7f;  // just below 2^63: kept
  bytes[15] = 0x01;
  EXPECT_TRUE(s.should_sample_root(TraceId(bytes)));
  bytes[8] = 0x80;  // 2^63 and above: dropped
  EXPECT_FALSE(s.should_sample_root(TraceId(bytes)));
}

TEST(Sampler, DescribeNamesKindAndParentBasedForm) {
  Sampler s;
  EXPECT_EQ(s.describe(), "parentbased_always_on");
  s.parent_based = false;
  s.kind = Sampler::Kind::kAlwaysOff;
  EXPECT_EQ(s.describe(), "always_off");
  s.kind = Sampler::Kind::kTraceIdRatio;
  s.ratio = 0.25;
  EXPECT_EQ(s.describe().rfind("traceidratio{0.25", 0), 0u) << s.describe();
}

}  // namespace
}  // namespace lens
