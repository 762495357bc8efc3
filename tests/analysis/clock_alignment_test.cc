// ClockAlignment and the causality pass over hand-made samples and spans:
// the weighted fit (a line, a constant, or interpolation when no line fits),
// loose samples weighed down, samples kept per process, the reference rank
// checked, hostile samples refused, extreme times held in range, receives
// moved after their sends within the samples' bound and clock errors
// beyond it reported, not hidden.
#include "clock_alignment.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace lens::analysis {
namespace {

SpanRow sample(int rank, std::int64_t local_ns, std::int64_t offset_ns,
               std::int64_t uncertainty_ns = 20'000, const char* drift_ppm = nullptr,
               std::uint64_t process = 0) {
  SpanRow s;
  s.name = semconv::kClockSyncSpan;
  s.rank = rank;
  s.process = process;
  s.attributes.set("dl.rank", std::to_string(rank));
  s.attributes.set("lens.clock.local_time_ns", std::to_string(local_ns));
  s.attributes.set("lens.clock.offset_ns", std::to_string(offset_ns));
  s.attributes.set("lens.clock.uncertainty_ns", std::to_string(uncertainty_ns));
  if (drift_ppm) s.attributes.set("lens.clock.drift_ppm", drift_ppm);
  return s;
}

constexpr std::int64_t kSecond = 1'000'000'000;

TEST(ClockAlignment, AFittedDriftIsFollowedBetweenAndOutsideTheSamples) {
  ClockAlignment a;
  EXPECT_TRUE(a.add(sample(1, 100 * kSecond, 5'000'000)));
  EXPECT_TRUE(a.add(sample(1, 200 * kSecond, 3'000'000, 20'000, "-20")));
  EXPECT_FALSE(a.add(SpanRow{}));  // not a sample
  // -20 ppm, far beyond the slope's error (28 µs over 100 s): a line.
  EXPECT_EQ(a.model(1, 0), ClockModel::kLine);
  EXPECT_EQ(a.offset_at(1, 0, 150 * kSecond), 4'000'000);
  EXPECT_EQ(a.offset_at(1, 0, 210 * kSecond), 3'000'000 - 200'000);
  EXPECT_EQ(a.offset_at(1, 0, 90 * kSecond), 5'000'000 + 200'000);
  EXPECT_EQ(a.offset_at(0, 0, 150 * kSecond), 0) << "a rank without samples stays";
  EXPECT_EQ(a.uncertainty_at(0, 0, 150 * kSecond), -1);
  EXPECT_EQ(a.uncertainty_at(1, 0, 150 * kSecond), 20'000);
  SpanRow s;
  s.rank = 1;
  s.start_ns = 150 * kSecond;
  s.end_ns = 150 * kSecond + 1000;
  EXPECT_TRUE(a.align(s));
  EXPECT_EQ(s.start_ns, 150 * kSecond + 4'000'000);
  EXPECT_EQ(s.end_ns - s.start_ns, 1000);
  SpanRow unsampled = s;
  unsampled.rank = 2;
  EXPECT_FALSE(a.align(unsampled)) << "no samples: left as it is, and said";
  EXPECT_EQ(unsampled.start_ns, s.start_ns);
  EXPECT_EQ(a.ranks(), std::vector<int>{1});
  EXPECT_EQ(a.max_uncertainty_ns(), 20'000);
}

TEST(ClockAlignment, ALooseSampleDoesNotInventADrift) {
  // The Jaeger reading: 3.01 ms +-40 µs at the start, 2.48 ms +-548 µs a
  // minute later. A straight line through both would invent -8.8 ppm; the
  // slope is within twice its error, so the offset is their weighted mean,
  // held by the tight sample.
  ClockAlignment a;
  ASSERT_TRUE(a.add(sample(1, 100 * kSecond, 3'010'000, 40'000)));
  ASSERT_TRUE(a.add(sample(1, 160 * kSecond, 2'480'000, 548'000)));
  EXPECT_EQ(a.model(1, 0), ClockModel::kConstant);
  const double w1 = 1.0 / (40e3 * 40e3), w2 = 1.0 / (548e3 * 548e3);
  const auto mean = static_cast<std::int64_t>((3'010'000 * w1 + 2'480'000 * w2) / (w1 + w2));
  EXPECT_NEAR(a.offset_at(1, 0, 100 * kSecond), mean, 1);
  EXPECT_NEAR(a.offset_at(1, 0, 160 * kSecond), mean, 1);
  EXPECT_LT(std::abs(a.offset_at(1, 0, 160 * kSecond) - 3'010'000), 3'000);
  EXPECT_EQ(a.loose_samples(), 1u) << "548 µs against a best of 40";
  // The stated uncertainty is the tight sample's and how far the mean is
  // from it.
  EXPECT_NEAR(a.uncertainty_at(1, 0, 160 * kSecond), 40'000 + (3'010'000 - mean), 1);
}

TEST(ClockAlignment, AClockNoLineFitsIsInterpolatedBetweenItsTightSamples) {
  // The offset steps by 2 ms between the second and third sample (each
  // 10 µs sure): no line stays within every bound.
  ClockAlignment a;
  ASSERT_TRUE(a.add(sample(1, 100 * kSecond, 1'000'000, 10'000)));
  ASSERT_TRUE(a.add(sample(1, 200 * kSecond, 1'000'000, 10'000)));
  ASSERT_TRUE(a.add(sample(1, 300 * kSecond, 3'000'000, 10'000)));
  ASSERT_TRUE(a.add(sample(1, 400 * kSecond, 3'000'000, 10'000)));
  ASSERT_TRUE(a.add(sample(1, 250 * kSecond, 9'000'000, 900'000)));  // loose: no knot
  EXPECT_EQ(a.model(1, 0), ClockModel::kPiecewise);
  EXPECT_EQ(a.offset_at(1, 0, 150 * kSecond), 1'000'000);
  EXPECT_EQ(a.offset_at(1, 0, 250 * kSecond), 2'000'000);
  EXPECT_EQ(a.offset_at(1, 0, 500 * kSecond), 3'000'000);
  EXPECT_EQ(a.uncertainty_at(1, 0, 250 * kSecond), 10'000);
}

TEST(ClockAlignment, SamplesAreKeptPerProcess) {
  // Rank 1 restarted on another host: its first process's samples say
  // +5 ms, its second's -2 ms; neither is interpolated into the other.
  ClockAlignment a;
  ASSERT_TRUE(a.add(sample(1, 100 * kSecond, 5'000'000, 20'000, nullptr, 11)));
  ASSERT_TRUE(a.add(sample(1, 200 * kSecond, 5'000'000, 20'000, nullptr, 11)));
  ASSERT_TRUE(a.add(sample(1, 300 * kSecond, -2'000'000, 20'000, nullptr, 22)));
  EXPECT_EQ(a.offset_at(1, 11, 250 * kSecond), 5'000'000);
  EXPECT_EQ(a.offset_at(1, 22, 250 * kSecond), -2'000'000);
  EXPECT_FALSE(a.has(1, 33));
  EXPECT_EQ(a.ranks(), std::vector<int>{1});
  EXPECT_EQ(a.samples(), 3u);
}

TEST(ClockAlignment, TheReferenceRankIsCheckedAndOthersAreNotUsed) {
  ClockAlignment a;
  SpanRow self = sample(2, 100 * kSecond, 0, 0);
  self.attributes.set("lens.clock.reference_rank", "2");
  ASSERT_TRUE(a.add(self));
  SpanRow one = sample(1, 100 * kSecond, 4'000'000);
  one.attributes.set("lens.clock.reference_rank", "2");
  ASSERT_TRUE(a.add(one));
  // A sample measured against another rank (a file from another run, or a
  // reader mixing jobs) is not used, and said.
  SpanRow stray = sample(3, 100 * kSecond, 7'000'000);
  stray.attributes.set("lens.clock.reference_rank", "0");
  ASSERT_TRUE(a.add(stray));
  EXPECT_EQ(a.reference_rank(), 2);
  EXPECT_FALSE(a.has(3, 0));
  EXPECT_EQ(a.offset_at(1, 0, 100 * kSecond), 4'000'000);
  // The reference against itself is exact: a claimed offset is refused.
  SpanRow wrong = sample(2, 200 * kSecond, 30'000, 0);
  wrong.attributes.set("lens.clock.reference_rank", "2");
  EXPECT_FALSE(a.add(wrong));
  const auto problems = a.problems();
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0],
            "1 samples measure against rank 0, not the run's reference rank 2: not used");
  EXPECT_EQ(problems[1],
            "1 samples of the reference rank against itself claim an offset: not used");
  const ClockReport r = ClockReport::of(a);
  EXPECT_EQ(r.reference_rank, 2);
  EXPECT_EQ(r.sample_problems, problems);
}

TEST(ClockAlignment, SamplesWhoseExchangesCrossedAClockStepAreCountedNotUsed) {
  ClockAlignment a;
  SpanRow some = sample(1, 100 * kSecond, 4'000'000);
  some.attributes.set("lens.clock.exchanges", "8");
  some.attributes.set("lens.clock.discarded", "3");
  ASSERT_TRUE(a.add(some));
  SpanRow none;
  none.name = semconv::kClockSyncSpan;
  none.rank = 2;
  none.attributes.set("dl.rank", "2");
  none.attributes.set("lens.clock.exchanges", "8");
  none.attributes.set("lens.clock.discarded", "8");
  EXPECT_FALSE(a.add(none));
  SpanRow negative = sample(3, 100 * kSecond, 1'000);
  negative.attributes.set("lens.clock.round_trip_ns", "-40");
  EXPECT_FALSE(a.add(negative));
  EXPECT_EQ(a.discarded_exchanges(), 11);
  EXPECT_EQ(a.empty_samples(), 1u);
  EXPECT_EQ(a.ranks(), std::vector<int>{1});
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
  // An hour's offset growing 1 %: far from the samples the line runs out
  // of range and is held there.
  ASSERT_TRUE(a.add(sample(1, 0, 3'600'000'000'000 - 10'000'000, 0, "10000")));
  ASSERT_TRUE(a.add(sample(1, kSecond, 3'600'000'000'000, 0)));
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

constexpr std::int64_t kUs = 1000;

// Two stages of one replica in one step (times in µs from 0): stage 0
// sends twice, stage 1 receives twice (its first receive wrapped in a
// linked span); every span a child of its rank's step span.
Run two_stage_step(std::int64_t first_recv_end_ns) {
  Run run;
  for (int stage = 0; stage < 2; ++stage) {
    RankFile f;
    f.rank = stage;
    SpanRow step = span(stage, "megatron.train_step", 0, 1000 * kUs);
    step.span_id = "step" + std::to_string(stage);
    step.attributes.set("dl.step", "3");
    step.attributes.set("dl.pipeline_parallel.rank", std::to_string(stage));
    f.spans.push_back(step);
    run.files.push_back(f);
  }
  const std::int64_t e = first_recv_end_ns;
  auto& s0 = run.files[0].spans;
  s0.push_back(span(0, "megatron.p2p.send_forward", 100 * kUs, 110 * kUs));
  s0.push_back(span(0, "megatron.p2p.send_forward_recv_backward", 300 * kUs, 400 * kUs));
  auto& s1 = run.files[1].spans;
  s1.push_back(span(1, "megatron.pp.recv_forward.linked", e - 60 * kUs, e + 1));
  s1.push_back(span(1, "megatron.p2p.recv_forward", e - 50 * kUs, e));
  s1.push_back(span(1, "megatron.p2p.send_backward_recv_forward", 350 * kUs, 420 * kUs));
  for (auto& f : run.files)
    for (std::size_t i = 1; i < f.spans.size(); ++i) {
      f.spans[i].span_id = "r" + std::to_string(f.rank) + "s" + std::to_string(i);
      f.spans[i].parent_span_id = "step" + std::to_string(f.rank);
    }
  return run;
}

// Rank 0 is the reference; rank 1 is known within 20 µs.
ClockAlignment twenty_us() {
  ClockAlignment a;
  a.add(sample(0, kSecond, 0, 0));
  a.add(sample(1, kSecond, 0, 20 * kUs));
  return a;
}

TEST(CausalityPass, MovesAReceiveThatEndsBeforeItsSendBeganWithinTheRanksUncertainty) {
  const ClockAlignment clock = twenty_us();
  analysis::Run ok = two_stage_step(150 * kUs);
  const CausalityMoves fine = enforce_transfer_order(ok, &clock);
  // Two forward transfers, and one backward (stage 1's combined span sends
  // the gradient that stage 0's combined span receives).
  EXPECT_EQ(fine.transfers, 3u);
  EXPECT_EQ(fine.moved, 0u);
  EXPECT_EQ(fine.violation_count, 0u);

  const std::int64_t early_end = 100 * kUs - 20;  // ends 20 ns before the send began
  analysis::Run counted = two_stage_step(early_end);
  const CausalityMoves seen = enforce_transfer_order(counted, nullptr);
  EXPECT_EQ(seen.moved, 2u);  // the receive and the linked span around it
  EXPECT_EQ(counted.files[1].spans[2].end_ns, early_end) << "raw clocks: counted, not moved";
  analysis::Run early = two_stage_step(early_end);
  const CausalityMoves moved = enforce_transfer_order(early, &clock);
  EXPECT_EQ(moved.moved, 2u);
  EXPECT_EQ(moved.max_shift_ns, 21);
  EXPECT_EQ(moved.violation_count, 0u);
  const SpanRow& recv = early.files[1].spans[2];
  EXPECT_EQ(recv.name, "megatron.p2p.recv_forward");
  EXPECT_EQ(recv.end_ns, 100 * kUs + 1);
  EXPECT_EQ(recv.end_ns - recv.start_ns, 50 * kUs) << "moved, not stretched";
}

TEST(CausalityPass, AGapBeyondTheRanksUncertaintyIsAClockErrorLeftAsItIs) {
  // Rank 1's spans shifted 150 µs early: beyond 20 µs + 1 µs of rounding.
  const ClockAlignment clock = twenty_us();
  analysis::Run run = two_stage_step(100 * kUs - 150 * kUs);
  const SpanRow before = run.files[1].spans[2];
  const CausalityMoves m = enforce_transfer_order(run, &clock);
  EXPECT_EQ(m.moved, 0u);
  EXPECT_EQ(m.violation_count, 2u);  // the receive and its linked span
  EXPECT_EQ(run.files[1].spans[2].end_ns, before.end_ns) << "not hidden by a move";
  ASSERT_EQ(m.violations.size(), 2u);
  const ClockViolation& v = m.violations.front();
  EXPECT_EQ(v.step, 3);
  EXPECT_EQ(v.sender_rank, 0);
  EXPECT_EQ(v.receiver_rank, 1);
  EXPECT_EQ(v.early_ns, 150 * kUs);
  EXPECT_EQ(v.bound_ns, 21 * kUs);
  EXPECT_EQ(v.describe(),
            "step 3: rank 1's megatron.p2p.recv_forward ended 150.0 us before rank 0's send "
            "began (the ranks' samples allow 21.0 us)");
}

TEST(CausalityPass, NoMoveEndsAReceiveAfterItsParent) {
  const ClockAlignment clock = twenty_us();
  analysis::Run run = two_stage_step(100 * kUs - 20);
  run.files[1].spans[0].end_ns = 100 * kUs - 10;  // the step span ends 10 ns after the receive
  const CausalityMoves m = enforce_transfer_order(run, &clock);
  EXPECT_GE(m.held, 1u) << "within the bound, held by its parent";
  EXPECT_EQ(m.violation_count, 0u) << "not a clock error";
  EXPECT_LE(run.files[1].spans[2].end_ns, run.files[1].spans[0].end_ns);
  ClockReport r = ClockReport::of(clock);
  r.moves = m;
  EXPECT_NE(r.describe().find(std::to_string(m.held) +
                              " left early within the ranks' uncertainty (moving them would end "
                              "them after their parent)"),
            std::string::npos)
      << r.describe();
}

TEST(CausalityPass, TensorParallelPeersAreNeverPaired) {
  // Two TP ranks per stage. Tensor rank 1's stage 0 sends late (at 500 µs);
  // its stage 1 receives after that. Tensor rank 0's pair is on time. Were
  // the ranks of a stage pooled, tensor rank 0's receive (ending at 150 µs)
  // would be matched with tensor rank 1's late send and look impossible.
  const ClockAlignment clock = twenty_us();
  analysis::Run run = two_stage_step(150 * kUs);
  analysis::Run peer = two_stage_step(600 * kUs);
  for (auto& f : peer.files) {
    f.rank += 2;
    f.tensor_rank = 1;
    for (auto& s : f.spans) {
      s.rank = f.rank;
      s.span_id += "-tp1";
      if (!s.parent_span_id.empty()) s.parent_span_id += "-tp1";
    }
  }
  peer.files[0].spans[1].start_ns = 500 * kUs;  // its send_forward
  peer.files[0].spans[1].end_ns = 510 * kUs;
  for (auto& f : run.files) f.tensor_rank = 0;
  for (auto& f : peer.files) run.files.push_back(std::move(f));
  const CausalityMoves m = enforce_transfer_order(run, &clock);
  EXPECT_EQ(m.transfers, 6u);  // three per pipeline
  EXPECT_EQ(m.moved, 0u);
  EXPECT_EQ(m.violation_count, 0u);
}

TEST(CausalityPass, ExtremeTimesDoNotOverflow) {
  ClockAlignment wide;
  wide.add(sample(1, kSecond, 0, 3'600'000'000'000));
  analysis::Run run = two_stage_step(80);
  run.files[0].spans[1].start_ns = std::numeric_limits<std::int64_t>::max();
  run.files[0].spans[1].end_ns = std::numeric_limits<std::int64_t>::max();
  const CausalityMoves m = enforce_transfer_order(run, &wide);
  EXPECT_GE(m.moved + m.violation_count, 1u);
  EXPECT_LE(run.files[1].spans[2].start_ns, run.files[1].spans[2].end_ns);
}

TEST(CausalityMoves, KeepsTheLargestViolationsAndCountsThemAll) {
  CausalityMoves a, b;
  for (int i = 0; i < 20; ++i) a.add(ClockViolation{i, 0, 1, "r", (i + 1) * kUs, kUs});
  b.add(ClockViolation{99, 2, 3, "r", 500 * kUs, kUs});
  a.add(b);
  EXPECT_EQ(a.violation_count, 21u);
  ASSERT_EQ(a.violations.size(), CausalityMoves::kKeptViolations);
  EXPECT_EQ(a.violations.front().step, 99);
  EXPECT_EQ(a.violations.back().early_ns, 6 * kUs);  // 500, then 20 down to 6
}

TEST(ClockReport, SaysWhichClockWhatMovedAndWhatIsWrong) {
  ClockAlignment a;
  a.add(sample(1, kSecond, 5));
  ClockReport r = ClockReport::of(a);
  r.moves.transfers = 10;
  r.moves.moved = 1;
  r.moves.max_shift_ns = 2500;
  EXPECT_EQ(r.describe(),
            "clock: aligned to rank 0 by 1 samples of 1 ranks (uncertainty up to 20.0 us); "
            "causality: 1 of 10 receives moved after their send (by up to 2.5 us)");
  r.moves.add(ClockViolation{4, 1, 2, "megatron.p2p.recv_backward", 150 * kUs, 41 * kUs});
  r.unaligned_ranks = {3};
  EXPECT_EQ(r.describe(),
            "clock: aligned to rank 0 by 1 samples of 1 ranks (uncertainty up to 20.0 us); "
            "causality: 1 of 10 receives moved after their send (by up to 2.5 us); CLOCK ERROR: "
            "1 receives end before their send by more than the alignment allows and are left as "
            "they are; the largest: step 4: rank 2's megatron.p2p.recv_backward ended 150.0 us "
            "before rank 1's send began (the ranks' samples allow 41.0 us); WARNING: rank(s) 3 "
            "have no clock samples of their process and stay on their own clock");
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["reference_rank"], 0);
  EXPECT_EQ(j["unaligned_ranks"], nlohmann::json::array({3}));
  EXPECT_EQ(j["clock_errors"], 1);
  EXPECT_EQ(j["clock_error_list"][0]["sender_rank"], 1);
  EXPECT_EQ(j["clock_error_list"][0]["receiver_rank"], 2);
  EXPECT_EQ(j["clock_error_list"][0]["early_us"], 150.0);
  ClockReport raw;
  raw.raw_asked = true;
  raw.moves.transfers = 4;
  raw.moves.moved = 2;
  EXPECT_EQ(raw.describe(),
            "clock: raw, each rank's own (--raw-clock); causality: 2 of 4 receives end before "
            "their send began");
  EXPECT_TRUE(raw.to_json()["reference_rank"].is_null());
}

}  // namespace
}  // namespace lens::analysis
