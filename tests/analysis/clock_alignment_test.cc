// ClockAlignment and the causality pass over hand-made samples and spans:
// interpolation, extrapolation by drift, hostile samples refused, extreme
// times held in range, receives moved after their sends.
#include "clock_alignment.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace lens::tools {
namespace {

SpanRow sample(int rank, std::int64_t local_ns, std::int64_t offset_ns,
               std::int64_t uncertainty_ns = 20'000, const char* drift_ppm = nullptr) {
  SpanRow s;
  s.name = kClockSyncSpanName;
  s.rank = rank;
  s.attributes["dl.rank"] = std::to_string(rank);
  s.attributes["lens.clock.local_time_ns"] = std::to_string(local_ns);
  s.attributes["lens.clock.offset_ns"] = std::to_string(offset_ns);
  s.attributes["lens.clock.uncertainty_ns"] = std::to_string(uncertainty_ns);
  if (drift_ppm) s.attributes["lens.clock.drift_ppm"] = drift_ppm;
  return s;
}

constexpr std::int64_t kSecond = 1'000'000'000;

TEST(ClockAlignment, InterpolatesBetweenSamplesAndFollowsTheDriftOutside) {
  ClockAlignment a;
  EXPECT_TRUE(a.add(sample(1, 100 * kSecond, 5'000'000)));
  EXPECT_TRUE(a.add(sample(1, 200 * kSecond, 3'000'000, 20'000, "-20")));
  EXPECT_FALSE(a.add(SpanRow{}));  // not a sample
  EXPECT_EQ(a.offset_at(1, 150 * kSecond), 4'000'000);
  // Outside: the latest drift, -20 ppm (20 µs per second).
  EXPECT_EQ(a.offset_at(1, 210 * kSecond), 3'000'000 - 200'000);
  EXPECT_EQ(a.offset_at(1, 90 * kSecond), 5'000'000 + 200'000);
  EXPECT_EQ(a.offset_at(0, 150 * kSecond), 0) << "a rank without samples stays";
  SpanRow s;
  s.rank = 1;
  s.start_ns = 150 * kSecond;
  s.end_ns = 150 * kSecond + 1000;
  a.align(s);
  EXPECT_EQ(s.start_ns, 150 * kSecond + 4'000'000);
  EXPECT_EQ(s.end_ns - s.start_ns, 1000);
  EXPECT_EQ(a.ranks(), std::vector<int>{1});
  EXPECT_EQ(a.max_uncertainty_ns(), 20'000);
}

TEST(ClockAlignment, RefusesSamplesNoClockCouldGive) {
  ClockAlignment a;
  const std::int64_t hour = 3600 * kSecond;
  EXPECT_FALSE(a.add(sample(1, kSecond, hour + 1)));
  EXPECT_FALSE(a.add(sample(1, kSecond, -hour - 1)));
  EXPECT_FALSE(a.add(sample(1, -5, 0)));
  EXPECT_FALSE(a.add(sample(1, kSecond, 0, -1)));
  EXPECT_FALSE(a.add(sample(1, kSecond, 0, hour + 1)));
  EXPECT_FALSE(a.add(sample(1, kSecond, 0, 1, "12000")));  // 1.2 %
  EXPECT_FALSE(a.add(sample(1, kSecond, 0, 1, "nan")));
  EXPECT_FALSE(a.add(sample(1, kSecond, 0, 1, "7ppm")));
  EXPECT_FALSE(a.add(sample(-1, kSecond, 0)));
  SpanRow missing = sample(2, kSecond, 0);
  missing.attributes.erase("lens.clock.offset_ns");
  EXPECT_FALSE(a.add(missing));
  EXPECT_TRUE(a.empty());
}

TEST(ClockAlignment, ExtremeTimesStayInRange) {
  ClockAlignment a;
  ASSERT_TRUE(a.add(sample(1, 0, 3'600'000'000'000, 0, "10000")));
  SpanRow s;
  s.rank = 1;
  s.start_ns = std::numeric_limits<std::int64_t>::max() - 5;
  s.end_ns = std::numeric_limits<std::int64_t>::max();
  a.align(s);
  EXPECT_EQ(s.end_ns, std::numeric_limits<std::int64_t>::max());
  EXPECT_LE(s.start_ns, s.end_ns);
  ASSERT_TRUE(a.add(sample(2, 0, -3'600'000'000'000)));
  SpanRow early;
  early.rank = 2;
  early.start_ns = 10;
  early.end_ns = 20;
  a.align(early);
  EXPECT_EQ(early.start_ns, 0);
  EXPECT_EQ(early.end_ns, 0);
}

SpanRow span(int rank, const char* name, std::int64_t start, std::int64_t end) {
  SpanRow s;
  s.rank = rank;
  s.name = name;
  s.start_ns = start;
  s.end_ns = end;
  return s;
}

// Two stages of one replica in one step: stage 0 sends twice, stage 1
// receives twice (its first receive wrapped in a linked span).
Run two_stage_step(std::int64_t first_recv_end) {
  Run run;
  for (int stage = 0; stage < 2; ++stage) {
    RankFile f;
    f.rank = stage;
    SpanRow step = span(stage, "megatron.train_step", 0, 1000);
    step.attributes["dl.step"] = "3";
    step.attributes["dl.pipeline_parallel.rank"] = std::to_string(stage);
    f.spans.push_back(step);
    run.files.push_back(f);
  }
  auto& s0 = run.files[0].spans;
  s0.push_back(span(0, "megatron.p2p.send_forward", 100, 110));
  s0.push_back(span(0, "megatron.p2p.send_forward_recv_backward", 300, 400));
  auto& s1 = run.files[1].spans;
  s1.push_back(span(1, "megatron.pp.recv_forward.linked", first_recv_end - 60, first_recv_end + 1));
  s1.push_back(span(1, "megatron.p2p.recv_forward", first_recv_end - 50, first_recv_end));
  s1.push_back(span(1, "megatron.p2p.send_backward_recv_forward", 350, 420));
  return run;
}

TEST(CausalityPass, MovesAReceiveThatEndsBeforeItsSendBeganAndCountsIt) {
  tools::Run ok = two_stage_step(150);
  const CausalityMoves fine = enforce_transfer_order(ok);
  // Two forward transfers, and one backward (stage 1's combined span sends
  // the gradient that stage 0's combined span receives).
  EXPECT_EQ(fine.transfers, 3u);
  EXPECT_EQ(fine.moved, 0u);

  tools::Run early = two_stage_step(80);  // ends 20 ns before the send began
  tools::Run counted = early;
  const CausalityMoves seen = enforce_transfer_order(counted, false);
  EXPECT_EQ(seen.moved, 2u);  // the receive and the linked span around it
  EXPECT_EQ(counted.files[1].spans[2].end_ns, 80) << "counting moves nothing";
  const CausalityMoves moved = enforce_transfer_order(early);
  EXPECT_EQ(moved.moved, 2u);
  EXPECT_EQ(moved.max_shift_ns, 21);
  const SpanRow& recv = early.files[1].spans[2];
  EXPECT_EQ(recv.name, "megatron.p2p.recv_forward");
  EXPECT_EQ(recv.end_ns, 101);
  EXPECT_EQ(recv.end_ns - recv.start_ns, 50) << "moved, not stretched";
}

TEST(CausalityPass, ExtremeTimesDoNotOverflow) {
  tools::Run run = two_stage_step(80);
  run.files[0].spans[1].start_ns = std::numeric_limits<std::int64_t>::max();
  run.files[0].spans[1].end_ns = std::numeric_limits<std::int64_t>::max();
  const CausalityMoves m = enforce_transfer_order(run);
  EXPECT_GE(m.moved, 1u);
  EXPECT_LE(run.files[1].spans[2].start_ns, run.files[1].spans[2].end_ns);
}

TEST(ClockReport, SaysWhichClockAndWhatMoved) {
  ClockAlignment a;
  a.add(sample(1, kSecond, 5));
  ClockReport r = ClockReport::of(a);
  r.moves.transfers = 10;
  r.moves.moved = 1;
  r.moves.max_shift_ns = 2500;
  EXPECT_EQ(r.describe(),
            "clock: aligned to rank 0 by 1 samples of 1 ranks (uncertainty up to 20.0 us); "
            "causality: 1 of 10 receives moved after their send (by up to 2.5 us)");
  ClockReport raw;
  raw.raw_asked = true;
  raw.moves.transfers = 4;
  raw.moves.moved = 2;
  EXPECT_EQ(raw.describe(),
            "clock: raw, each rank's own (--raw-clock); causality: 2 of 4 receives end before "
            "their send began");
}

}  // namespace
}  // namespace lens::tools
