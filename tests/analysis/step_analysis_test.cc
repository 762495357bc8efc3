// analyze_step on synthetic steps whose schedule is worked out by hand
// (docs/analysis.md): the critical path, its shares, the waits at every
// receive and the idle split must come out as constructed.
#include "step_analysis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "analyze.h"
#include "microbatch_variability.h"
#include "replica_waits.h"
#include "step_replay.h"

namespace lens::analysis {
namespace {

struct Compute {
  int stage;
  bool backward;
  int microbatch;
  double start_ms, end_ms;
  int chunk = -1;  // dl.virtual_pipeline.rank; -1: not said
};

// A p2p span on `stage`: its name says what it receives and sends
// (megatron.p2p.recv_forward, send_backward, send_forward_recv_backward).
struct Transfer {
  int stage;
  std::string name;
  int peer;                      // the peer's stage
  int received = -1, sent = -1;  // microbatch ids
  double start_ms, end_ms;
};

std::int64_t ns(double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); }

// A span id (16 hex digits, as a run's are) unique to `what` it names.
std::string id_for(const std::string& what) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>()(what));
  return hex;
}

// A run of one step: per stage a rank (rank = stage + stages * replica),
// its step and forward_backward spans over `windows[stage]`, and the
// compute spans.
Run make_step(int stages, const std::vector<std::pair<double, double>>& windows,
              const std::vector<Compute>& compute, std::int64_t step = 7, int replica = 0,
              const std::vector<Transfer>& transfers = {}) {
  Run run;
  for (int s = 0; s < stages; ++s) {
    RankFile f;
    f.rank = s + stages * replica;
    f.replica = replica;
    const std::string trace = "trace-" + std::to_string(step);
    auto span = [&](std::string name, double a, double b) {
      SpanRow r;
      r.rank = f.rank;
      r.trace_id = trace;
      r.span_id = id_for(name + std::to_string(f.rank) + std::to_string(a));
      r.name = std::move(name);
      r.start_ns = ns(a);
      r.end_ns = ns(b);
      return r;
    };
    SpanRow st = span("megatron.train_step", windows[s].first, windows[s].second);
    st.attributes.set("dl.step", std::to_string(step));
    st.attributes.set("dl.pipeline_parallel.rank", std::to_string(s));
    f.spans.push_back(st);
    f.spans.push_back(span("megatron.forward_backward", windows[s].first, windows[s].second));
    for (const auto& c : compute) {
      if (c.stage != s) continue;
      SpanRow r = span(c.backward ? "megatron.microbatch.backward" : "megatron.microbatch.forward",
                       c.start_ms, c.end_ms);
      r.attributes.set("dl.microbatch_id", std::to_string(c.microbatch));
      if (c.chunk >= 0) r.attributes.set("dl.virtual_pipeline.rank", std::to_string(c.chunk));
      f.spans.push_back(r);
    }
    for (const auto& t : transfers) {
      if (t.stage != s) continue;
      SpanRow r = span("megatron.p2p." + t.name, t.start_ms, t.end_ms);
      r.attributes.set("dl.pipeline_parallel.peer_rank", std::to_string(t.peer));
      if (t.received >= 0) r.attributes.set("dl.microbatch_id.received", std::to_string(t.received));
      if (t.sent >= 0) r.attributes.set("dl.microbatch_id.sent", std::to_string(t.sent));
      f.spans.push_back(r);
    }
    run.files.push_back(std::move(f));
  }
  return run;
}

// Adds a span `name` over [a, b] ms to stage s's rank of `run`, in the
// step's trace (a data-parallel all-reduce, an optimizer step).
void add_span(Run& run, int s, const char* name, double a, double b) {
  SpanRow r = run.files[static_cast<std::size_t>(s)].spans.front();
  r.name = name;
  r.span_id = id_for(r.span_id + name);
  r.attributes.clear();
  r.start_ns = ns(a);
  r.end_ns = ns(b);
  run.files[static_cast<std::size_t>(s)].spans.push_back(r);
}

StepAnalysis analyze(const Run& run, int stages) {
  const PipelineView view = build_view(run);
  EXPECT_EQ(view.steps.size(), 1u);
  return analyze_step(view.steps.at(0), stages, pipelines_of(run));
}

const StageFigures& stage(const StepAnalysis& a, int s) {
  for (const auto& f : a.stages_figures)
    if (f.stage == s) return f;
  throw std::runtime_error("no stage " + std::to_string(s));
}

constexpr bool F = false, B = true;

// P = 3, M = 1: stage 1 takes `slow` ms per pass, the others 1 ms.
Run three_stages(double slow, std::int64_t step = 7, int replica = 0) {
  return make_step(3, {{0, 4 + 2 * slow}, {0, 3 + 2 * slow}, {0, 2 + slow}},
                   {{0, F, 0, 0, 1},
                    {1, F, 0, 1, 1 + slow},
                    {2, F, 0, 1 + slow, 2 + slow},
                    {2, B, 0, 2 + slow, 3 + slow},
                    {1, B, 0, 3 + slow, 3 + 2 * slow},
                    {0, B, 0, 3 + 2 * slow, 4 + 2 * slow}},
                   step, replica);
}

TEST(StepAnalysis, OneMicrobatchOnTwoStagesIsOneChain) {
  // F0 on 0, F0 on 1, B0 on 1, B0 on 0, back to back (no transfer time).
  const analysis::Run run = make_step(
      2, {{0, 6}, {0, 4}}, {{0, F, 0, 0, 1}, {1, F, 0, 1, 2}, {1, B, 0, 2, 4}, {0, B, 0, 4, 6}});
  const StepAnalysis a = analyze(run, 2);
  ASSERT_TRUE(a.complete);
  EXPECT_DOUBLE_EQ(a.critical_path_ms, 6);
  EXPECT_DOUBLE_EQ(a.critical_transfer_ms, 0);
  ASSERT_EQ(a.critical_path.size(), 4u);
  EXPECT_EQ(a.critical_path[0].stage, 0);
  EXPECT_EQ(a.critical_path[3].stage, 0);
  EXPECT_EQ(a.critical_path[3].kind, PathSegment::Kind::kBackward);
  EXPECT_DOUBLE_EQ(stage(a, 0).critical_share, 0.5);
  EXPECT_DOUBLE_EQ(stage(a, 1).critical_share, 0.5);
  // Without transfer spans no wait is measured: the time between computes
  // is the rest of each step.
  EXPECT_DOUBLE_EQ(stage(a, 1).late_sender_ms, 0);
  EXPECT_DOUBLE_EQ(stage(a, 0).transfer_ms, 0);
  EXPECT_DOUBLE_EQ(stage(a, 0).rest_ms, 6 - 3);
  // Idle 3 ms on each: stage 1 1 ms before and 2 ms after its compute;
  // stage 0 3 ms between, waiting on its neighbour.
  EXPECT_DOUBLE_EQ(stage(a, 1).idle_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 1).warmup_idle_ms, 1);
  EXPECT_DOUBLE_EQ(stage(a, 1).cooldown_idle_ms, 2);
  EXPECT_DOUBLE_EQ(stage(a, 0).idle_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 0).transfer_idle_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 0).schedule_idle_ms, 3);  // (P-1)(f+b) = 1 x (1+2)
}

TEST(StepAnalysis, InterleavedChunksChainThroughTheLastAndFirstStages) {
  // P = 2, V = 2, one microbatch: forward through chunk 0 of stages 0 and
  // 1, then chunk 1 of both (stage 1's chunk 0 feeds stage 0's chunk 1),
  // and back; 1 ms each, back to back.
  const analysis::Run run = make_step(2, {{0, 8}, {0, 8}},
                                      {{0, F, 0, 0, 1, 0},
                                       {1, F, 0, 1, 2, 0},
                                       {0, F, 0, 2, 3, 1},
                                       {1, F, 0, 3, 4, 1},
                                       {1, B, 0, 4, 5, 1},
                                       {0, B, 0, 5, 6, 1},
                                       {1, B, 0, 6, 7, 0},
                                       {0, B, 0, 7, 8, 0}});
  const StepAnalysis a = analyze(run, 2);
  ASSERT_TRUE(a.complete);
  EXPECT_DOUBLE_EQ(a.critical_path_ms, 8);
  ASSERT_EQ(a.critical_path.size(), 8u) << "every chunk's compute, in order";
  const std::vector<int> stages = {0, 1, 0, 1, 1, 0, 1, 0};
  for (std::size_t i = 0; i < stages.size(); ++i)
    EXPECT_EQ(a.critical_path[i].stage, stages[i]) << "segment " << i;
  EXPECT_EQ(a.microbatches, 1) << "forwards per chunk";
}

TEST(StepAnalysis, SpansThatMakeTheGraphGoRoundEndTheWalkInsteadOfLooping) {
  // Stage 0's forward recorded after its backward (a clock or a file gone
  // wrong): stage 1's forward needs it, and it needs what needs stage 1.
  const analysis::Run run = make_step(
      2, {{0, 6}, {0, 6}}, {{0, B, 0, 0, 1}, {0, F, 0, 5, 6}, {1, F, 0, 2, 3}, {1, B, 0, 3, 4}});
  const StepAnalysis a = analyze(run, 2);
  EXPECT_LE(a.critical_path.size(), 4u + 4u) << "each compute once, with its transfers";
}

TEST(StepAnalysis, WaitsAreMeasuredFromTheTransferSpansAndAddUpToTheStep) {
  // P = 2, M = 1 (docs/analysis.md's example). Stage 1 posts its receive at
  // 0; stage 0 sends at 1 after its forward; the activation arrives at 1.8.
  // Stage 0 posts the gradient's receive at 1.5; stage 1 sends it at 4.6;
  // it arrives at 5.
  const analysis::Run run =
      make_step(2, {{0, 6.5}, {0, 5}},
                {{0, F, 0, 0, 1}, {1, F, 0, 2, 3}, {1, B, 0, 3, 4.5}, {0, B, 0, 5, 6}}, 7, 0,
                {{0, "send_forward", 1, -1, 0, 1, 1.5},
                 {0, "recv_backward", 1, 0, -1, 1.5, 5},
                 {1, "recv_forward", 0, 0, -1, 0, 1.8},
                 {1, "send_backward", 0, -1, 0, 4.6, 4.9}});
  const StepAnalysis a = analyze(run, 2);
  ASSERT_TRUE(a.complete);
  // Stage 0: late sender 3.1 (4.6 - 1.5), transfers 0.5 + 0.4, rest 0.5.
  const StageFigures& s0 = stage(a, 0);
  EXPECT_NEAR(s0.late_sender_ms, 3.1, 1e-9);
  EXPECT_NEAR(s0.late_receiver_ms, 0, 1e-9);
  EXPECT_NEAR(s0.transfer_ms, 0.9, 1e-9);
  EXPECT_NEAR(s0.rest_ms, 0.5, 1e-9);
  // Stage 1: late sender 1 (1 - 0), transfers 0.8 + 0.3, rest 0.4.
  const StageFigures& s1 = stage(a, 1);
  EXPECT_NEAR(s1.late_sender_ms, 1, 1e-9);
  EXPECT_NEAR(s1.transfer_ms, 1.1, 1e-9);
  EXPECT_NEAR(s1.rest_ms, 0.4, 1e-9);
  for (const auto& f : a.stages_figures)
    EXPECT_NEAR(f.compute_ms + f.late_sender_ms + f.late_receiver_ms + f.transfer_ms + f.rest_ms,
                f.step_ms, 1e-9)
        << "stage " << f.stage;
  // The path takes each transfer to the receive's end: F0@0, 1 -> 1.8,
  // F0@1, B0@1, 4.5 -> 5, B0@0.
  ASSERT_EQ(a.critical_path.size(), 6u);
  EXPECT_EQ(a.critical_path[1].kind, PathSegment::Kind::kTransfer);
  EXPECT_NEAR(a.critical_path[1].end_ms, 1.8, 1e-9);
  EXPECT_EQ(a.critical_path[4].kind, PathSegment::Kind::kTransfer);
  EXPECT_NEAR(a.critical_path[4].start_ms, 4.5, 1e-9);
  EXPECT_NEAR(a.critical_path[4].end_ms, 5, 1e-9);
  EXPECT_NEAR(a.critical_transfer_ms, 0.8 + 0.5, 1e-9);
  EXPECT_NEAR(a.critical_compute_ms, 4.5, 1e-9);
  EXPECT_EQ(a.impossible_edges, 0);
  // Replayed with stage 1 twice as slow: F0@1 2 -> 4, B0@1 4 -> 7, the
  // gradient arrives 0.5 later at 7.5, B0@0 ends at 8.5: 2.5 ms later.
  const StepGraph& g = a.graphs.at({});
  const StepReplay replay(g);
  EXPECT_EQ(replay.end(), ns(6));
  EXPECT_EQ(replay.end(1, 2.0) - replay.end(), ns(2.5));
  // Both stages are on the path: neither has slack.
  EXPECT_NEAR(s0.slack_ms, 0, 1e-3);
  EXPECT_NEAR(s1.slack_ms, 0, 1e-3);
}

TEST(StepAnalysis, ALateReceiverIsASendBlockedUntilTheReceiveWasPosted) {
  // Stage 1 is busy with microbatch 0 until 3.5; stage 0's send of
  // microbatch 1 begins at 2.2 and blocks until stage 1 posts its receive.
  const analysis::Run run = make_step(
      2, {{0, 4}, {0, 6.3}},
      {{0, F, 0, 0, 1}, {0, F, 1, 1.2, 2.2}, {1, F, 0, 1.3, 3.5}, {1, F, 1, 4.1, 6.3}}, 7, 0,
      {{0, "send_forward", 1, -1, 0, 1, 1.2},
       {0, "send_forward", 1, -1, 1, 2.2, 4},
       {1, "recv_forward", 0, 0, -1, 0, 1.3},
       {1, "recv_forward", 0, 1, -1, 3.5, 4.1}});
  const StepAnalysis a = analyze(run, 2);
  EXPECT_NEAR(stage(a, 0).late_receiver_ms, 1.3, 1e-9);  // 3.5 - 2.2
  EXPECT_NEAR(stage(a, 0).transfer_ms, 0.2 + 0.5, 1e-9);
  EXPECT_NEAR(stage(a, 0).late_sender_ms, 0, 1e-9);
  EXPECT_NEAR(stage(a, 1).late_sender_ms, 1, 1e-9);  // microbatch 0: sent at 1, posted at 0
  EXPECT_NEAR(stage(a, 1).late_receiver_ms, 0, 1e-9);
  EXPECT_NEAR(stage(a, 1).transfer_ms, 0.3 + 0.6, 1e-9);
  for (const auto& f : a.stages_figures)
    EXPECT_NEAR(f.compute_ms + f.late_sender_ms + f.late_receiver_ms + f.transfer_ms + f.rest_ms,
                f.step_ms, 1e-9);
}

TEST(StepAnalysis, ACombinedSendAndReceiveCountsItsWaitOnce) {
  // Stage 0's send_forward_recv_backward [1, 6]: its receive waits for the
  // gradient sent at 5.5 (4.5 ms); its send also waited, for the receive
  // posted at 3, but within that same wait: nothing more.
  const analysis::Run run =
      make_step(2, {{0, 7}, {3, 5.8}},
                {{0, F, 0, 0, 1}, {1, F, 0, 3.5, 4.5}, {1, B, 0, 4.5, 5.5}, {0, B, 0, 6, 7}}, 7, 0,
                {{0, "send_forward_recv_backward", 1, 0, 0, 1, 6},
                 {1, "recv_forward", 0, 0, -1, 3, 3.5},
                 {1, "send_backward", 0, -1, 0, 5.5, 5.8}});
  const StepAnalysis a = analyze(run, 2);
  EXPECT_NEAR(stage(a, 0).late_sender_ms, 4.5, 1e-9);
  EXPECT_NEAR(stage(a, 0).late_receiver_ms, 0, 1e-9);
  EXPECT_NEAR(stage(a, 0).transfer_ms, 0.5, 1e-9);
  EXPECT_NEAR(stage(a, 1).transfer_ms, 0.5 + 0.3, 1e-9);
}

TEST(StepAnalysis, AFasterReplicaHasSlackUpToTheStepsEnd) {
  // Replica 0 ends at 10 (stage 1 at 3 ms a pass); replica 1 at 6. Each of
  // replica 1's stages could add 4 ms of compute before ending at 10 (its
  // stage 0 has 2 ms: x3; its stage 1 2 ms: x3).
  analysis::Run run = three_stages(3, 7, 0);
  analysis::Run fast = three_stages(1, 7, 1);
  for (auto& f : fast.files) run.files.push_back(std::move(f));
  const StepAnalysis a = analyze(run, 3);
  EXPECT_EQ(a.critical_replica, 0);
  for (const auto& f : a.stages_figures)
    if (f.replica == 1)
      EXPECT_NEAR(f.slack_ms, 4, 1e-3) << "stage " << f.stage;
    else
      EXPECT_NEAR(f.slack_ms, 0, 1e-3) << "stage " << f.stage;
}

TEST(StepAnalysis, FewerMicrobatchesThanStagesIsOneChainThroughEveryStage) {
  const analysis::Run run = make_step(3, {{0, 6}, {0, 5}, {0, 4}},
                                      {{0, F, 0, 0, 1},
                                       {1, F, 0, 1, 2},
                                       {2, F, 0, 2, 3},
                                       {2, B, 0, 3, 4},
                                       {1, B, 0, 4, 5},
                                       {0, B, 0, 5, 6}});
  const StepAnalysis a = analyze(run, 3);
  EXPECT_DOUBLE_EQ(a.critical_path_ms, 6);
  EXPECT_EQ(a.critical_path.size(), 6u);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(stage(a, s).critical_share, 1.0 / 3, 1e-12);
}

const Straggler* straggler(const Analysis& a, int rank) {
  for (const auto& r : a.stragglers)
    if (r.who.rank == rank) return &r.who;
  return nullptr;
}

TEST(StepAnalysis, AStageSlowFromTheStartIsImbalanceNotAStraggler) {
  EXPECT_NEAR(stage(analyze(three_stages(3), 3), 1).critical_share, 6.0 / 10, 1e-12);
  AnalysisBuilder builder;
  for (int i = 0; i < 6; ++i) {
    analysis::Run run = three_stages(3, i);
    builder.add(build_view(run), run);
  }
  const Analysis all = builder.finish();
  EXPECT_EQ(all.steps, 6u);
  EXPECT_TRUE(all.stragglers.empty()) << format_table(all);
  ASSERT_EQ(all.imbalance.size(), 1u) << format_table(all);
  EXPECT_EQ(all.imbalance[0].what.stage, 1);
  EXPECT_NEAR(all.imbalance[0].what.ratio, 3.0, 1e-9);
  EXPECT_EQ(all.imbalance[0].what.ranks, std::vector<int>{1});
  // At the median stage's cost (1 ms a pass) the step is the balanced one:
  // 6 ms instead of 10.
  EXPECT_NEAR(all.imbalance[0].gain_ms, -4.0, 1e-6);
  EXPECT_NE(format_table(all).find("imbalance: stage 1 (rank 1): 3.00x"), std::string::npos)
      << format_table(all);
  EXPECT_NE(format_table(all).find("straggler: none"), std::string::npos) << format_table(all);

  AnalysisBuilder balanced;
  analysis::Run even = three_stages(1);
  balanced.add(build_view(even), even);
  const Analysis b = balanced.finish();
  EXPECT_TRUE(b.stragglers.empty());
  EXPECT_TRUE(b.imbalance.empty());
  EXPECT_NE(format_diff(b, all).find("most changed: stage 1 (compute per microbatch 3.00x)"),
            std::string::npos)
      << format_diff(b, all);
}

TEST(StepAnalysis, ARankThatSlowsDownMidRunIsAStragglerSinceThatStep) {
  // Stage 1 at 1 ms a pass for steps 0-3, then 3 ms: its own baseline (the
  // median of its first three steps) is 1 ms, and the others did not move.
  AnalysisBuilder builder;
  for (int i = 0; i < 8; ++i) {
    analysis::Run run = three_stages(i < 4 ? 1 : 3, i);
    builder.add(build_view(run), run);
  }
  const Analysis all = builder.finish();
  ASSERT_EQ(all.stragglers.size(), 1u) << format_table(all);
  const Straggler& s = all.stragglers[0].who;
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.since_step, 4);
  EXPECT_EQ(s.against, Straggler::Against::kOwnBaseline);
  EXPECT_NEAR(s.ratio, 3.0, 1e-9);
  // At its baseline a slow step takes 6 ms instead of 10.
  EXPECT_NEAR(all.stragglers[0].gain_ms, -4.0, 1e-6);
  EXPECT_NEAR(all.stragglers[0].gain_share, -0.4, 1e-6);
  EXPECT_TRUE(all.imbalance.empty()) << format_table(all);
  EXPECT_NE(format_table(all).find("straggler: rank 1 (stage 1, replica 0): 3.00x its own "
                                   "baseline"),
            std::string::npos)
      << format_table(all);
}

TEST(StepAnalysis, AMachineThatSlowsEveryRankNamesNoStraggler) {
  // Every pass 1 ms, then from step 4 every pass 3 ms: every rank moved
  // alike against its own baseline.
  AnalysisBuilder builder;
  for (int i = 0; i < 8; ++i) {
    const double f = i < 4 ? 1 : 3;
    analysis::Run run = make_step(3, {{0, 6 * f}, {0, 5 * f}, {0, 4 * f}},
                                  {{0, F, 0, 0, f},
                                   {1, F, 0, f, 2 * f},
                                   {2, F, 0, 2 * f, 3 * f},
                                   {2, B, 0, 3 * f, 4 * f},
                                   {1, B, 0, 4 * f, 5 * f},
                                   {0, B, 0, 5 * f, 6 * f}},
                                  i);
    builder.add(build_view(run), run);
  }
  const Analysis all = builder.finish();
  EXPECT_TRUE(all.stragglers.empty()) << format_table(all);
  EXPECT_TRUE(all.imbalance.empty()) << format_table(all);
}

TEST(StepAnalysis, ARankSlowerThanTheSameStageInTheOtherReplicaIsAStraggler) {
  // Two replicas; stage 1 of replica 1 (rank 4) is 3x slower from step 0.
  AnalysisBuilder builder;
  for (int i = 0; i < 4; ++i) {
    analysis::Run run = three_stages(1, i, 0);
    analysis::Run slow = three_stages(3, i, 1);
    for (auto& f : slow.files) run.files.push_back(std::move(f));
    builder.add(build_view(run), run);
  }
  const Analysis all = builder.finish();
  ASSERT_EQ(all.stragglers.size(), 1u) << format_table(all);
  const Straggler* s = straggler(all, 4);
  ASSERT_NE(s, nullptr) << format_table(all);
  EXPECT_EQ(s->stage, 1);
  EXPECT_EQ(all.stragglers[0].replica, 1);
  EXPECT_EQ(s->since_step, 0);
  EXPECT_EQ(s->against, Straggler::Against::kPeers);
  EXPECT_NEAR(s->ratio, 3.0, 1e-9);
  EXPECT_TRUE(all.imbalance.empty()) << "slow in one replica only: " << format_table(all);
}

TEST(StageVerdicts, ShortRunsAndNoiseBelowTheThresholdNameNothing) {
  // Fewer steps than the baseline and the run of slow steps take, and a
  // rank wobbling 1.3x: nothing is named.
  std::vector<RankSeries> series = {{0, 0, 0, {0, 1, 2, 3, 4, 5}, {1, 1, 1, 1, 1, 1}},
                                    {1, 1, 0, {0, 1, 2, 3, 4, 5}, {1, 1, 1, 1.3, 1.3, 1.3}}};
  Verdicts v = judge_stages(series);
  EXPECT_TRUE(v.stragglers.empty());
  EXPECT_TRUE(v.imbalance.empty());
  series[1].per_microbatch_ms = {1, 1, 1, 3, 3, 1};  // two slow steps, not three
  EXPECT_TRUE(judge_stages(series).stragglers.empty());
  series[1].per_microbatch_ms = {1, 1, 1, 3, 3, 3};
  v = judge_stages(series);
  ASSERT_EQ(v.stragglers.size(), 1u);
  EXPECT_EQ(v.stragglers[0].since_step, 3);
  EXPECT_TRUE(judge_stages({{0, 0, 0, {0, 1}, {1, 5}}}).stragglers.empty());
}

TEST(StepAnalysis, TheOptimizerAndTheGradientAllReduceEndThePath) {
  // P = 2, M = 1 as in the first case, then on each stage a data-parallel
  // all-reduce and the optimizer: stage 1's end earlier than stage 0's.
  analysis::Run run = make_step(
      2, {{0, 6}, {0, 4}}, {{0, F, 0, 0, 1}, {1, F, 0, 1, 2}, {1, B, 0, 2, 4}, {0, B, 0, 4, 6}});
  add_span(run, 1, "megatron.grads.all_reduce", 4, 5);
  add_span(run, 1, "megatron.optimizer.step", 5, 5.5);
  add_span(run, 0, "megatron.grads.all_reduce", 6, 8);
  add_span(run, 0, "megatron.optimizer.step", 8, 9);
  const StepAnalysis a = analyze(run, 2);
  EXPECT_DOUBLE_EQ(a.critical_path_ms, 9);
  EXPECT_DOUBLE_EQ(a.critical_all_reduce_ms, 2);
  EXPECT_DOUBLE_EQ(a.critical_compute_ms, 7);  // 6 of microbatches, 1 of optimizer
  ASSERT_EQ(a.critical_path.size(), 6u);
  EXPECT_EQ(a.critical_path[4].kind, PathSegment::Kind::kAllReduce);
  EXPECT_EQ(a.critical_path[5].kind, PathSegment::Kind::kOptimizer);
  EXPECT_DOUBLE_EQ(stage(a, 0).optimizer_ms, 1);
  EXPECT_DOUBLE_EQ(stage(a, 1).all_reduce_ms, 1);
  // The microbatch figures are as without them.
  EXPECT_DOUBLE_EQ(stage(a, 0).compute_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 1).cooldown_idle_ms, 2);
}

// Two replicas of P = 2, M = 1 meeting at the gradient sync: replica 0's
// passes take 1 ms; replica 1's stage 1 takes 3. Each rank's all-reduce
// runs from its last compute until the last replica's rank of its stage
// arrives, plus 0.5 ms; then 0.5 ms of optimizer.
Run two_replicas_at_the_sync() {
  analysis::Run run;
  for (int replica = 0; replica < 2; ++replica) {
    const double slow = replica == 1 ? 3 : 1;
    const double end0 = 2 + 2 * slow;  // stage 0's last compute ends
    analysis::Run r = make_step(2, {{0, 9}, {0, 8}},
                                {{0, F, 0, 0, 1},
                                 {1, F, 0, 1, 1 + slow},
                                 {1, B, 0, 1 + slow, 1 + 2 * slow},
                                 {0, B, 0, 1 + 2 * slow, end0}},
                                7, replica);
    add_span(r, 0, "megatron.grads.all_reduce", end0, 8.5);
    add_span(r, 0, "megatron.optimizer.step", 8.5, 9);
    add_span(r, 1, "megatron.grads.all_reduce", 1 + 2 * slow, 7.5);
    add_span(r, 1, "megatron.optimizer.step", 7.5, 8);
    for (auto& f : r.files) run.files.push_back(std::move(f));
  }
  return run;
}

TEST(StepAnalysis, ThePathRunsThroughTheReplicaLastAtTheSyncAndTheOthersWaitThere) {
  const StepAnalysis a = analyze(two_replicas_at_the_sync(), 2);
  ASSERT_TRUE(a.complete);
  // Replica 1's compute ended last (8 against 4): it set the step. Its
  // path: F0@0 0-1, F0@1 1-4, B0@1 4-7, B0@0 7-8, then its sync 8-8.5 and
  // optimizer 8.5-9, the sync once.
  EXPECT_EQ(a.critical_replica, 1);
  EXPECT_DOUBLE_EQ(a.critical_path_ms, 9);
  EXPECT_DOUBLE_EQ(a.critical_all_reduce_ms, 0.5);
  EXPECT_DOUBLE_EQ(a.critical_compute_ms, 8.5);
  ASSERT_EQ(a.critical_path.size(), 6u);
  for (const auto& seg : a.critical_path) EXPECT_GE(seg.rank, 2) << "replica 1's ranks only";
  EXPECT_EQ(a.critical_path[4].kind, PathSegment::Kind::kAllReduce);
  EXPECT_EQ(a.pipeline_path_ms.at({1, 0}), 9);
  EXPECT_EQ(a.pipeline_path_ms.at({0, 0}), 4) << "replica 0's own path: its computes, 0-4";
  for (const auto& f : a.stages_figures) {
    if (f.replica == 0) {
      // Replica 0 waits at the sync from its arrival to replica 1's: stage
      // 0 from 4 to 8, stage 1 from 3 to 7; and its own path is shared.
      EXPECT_DOUBLE_EQ(f.sync_wait_ms, 4) << "stage " << f.stage;
      EXPECT_DOUBLE_EQ(f.critical_share, 0.5) << "stage " << f.stage;
    } else {
      EXPECT_DOUBLE_EQ(f.sync_wait_ms, 0) << "stage " << f.stage;
      EXPECT_NEAR(f.critical_share, f.stage == 1 ? 6.0 / 9 : 2.5 / 9, 1e-12);
    }
    EXPECT_EQ(f.sync_last_replica, 1);
    EXPECT_NEAR(f.compute_ms + f.late_sender_ms + f.late_receiver_ms + f.transfer_ms +
                    f.sync_wait_ms + f.rest_ms,
                f.step_ms, 1e-9)
        << "replica " << f.replica << " stage " << f.stage;
  }
  // Replica 0's stage 0: step 9 = compute 2 + sync 4 + rest 3 (idle 1-3,
  // the sync's own 0.5 and the optimizer's 0.5).
  for (const auto& f : a.stages_figures)
    if (f.replica == 0 && f.stage == 0) {
      EXPECT_DOUBLE_EQ(f.rest_ms, 3);
    }
}

// The same two replicas, with the gradient sync an asynchronous collective
// (NCCL's, or a grad reduce overlapped with the backward): each rank's sync
// span is a 0.1 ms launch, and the wait for the last replica surfaces in
// the optimizer, which ends 0.5 ms after the last replica's rank of its
// stage arrived. Replica 1's stage 1 takes 20 ms a pass instead of 1, as a
// slowed replica's workers would.
TEST(StepAnalysis, AnAsynchronousSyncsWaitIsMeasuredToTheLastReplicasArrivalNotToItsLaunch) {
  analysis::Run run;
  const double slow = 20;
  const double last_stage0 = 2 + 2 * slow, last_stage1 = 1 + 2 * slow;  // replica 1's arrivals
  for (int replica = 0; replica < 2; ++replica) {
    const double pass = replica == 1 ? slow : 1;
    const double end0 = 2 + 2 * pass;
    analysis::Run r = make_step(2, {{0, last_stage0 + 1}, {0, last_stage1 + 1}},
                                {{0, F, 0, 0, 1},
                                 {1, F, 0, 1, 1 + pass},
                                 {1, B, 0, 1 + pass, 1 + 2 * pass},
                                 {0, B, 0, 1 + 2 * pass, end0}},
                                7, replica);
    add_span(r, 0, "megatron.grads.all_reduce", end0, end0 + 0.1);
    add_span(r, 0, "megatron.optimizer.step", end0 + 0.1, last_stage0 + 0.5);
    add_span(r, 1, "megatron.grads.all_reduce", 1 + 2 * pass, 1 + 2 * pass + 0.1);
    add_span(r, 1, "megatron.optimizer.step", 1 + 2 * pass + 0.1, last_stage1 + 0.5);
    for (auto& f : r.files) run.files.push_back(std::move(f));
  }
  const StepAnalysis a = analyze(run, 2);
  ASSERT_TRUE(a.complete);
  EXPECT_EQ(a.critical_replica, 1);
  for (const auto& f : a.stages_figures) {
    // Replica 0 arrived at 4 (stage 0) and 3 (stage 1); replica 1 at 42
    // and 41: 38 ms each, what its step span's length says it waited.
    EXPECT_DOUBLE_EQ(f.sync_wait_ms, f.replica == 0 ? 38 : 0)
        << "replica " << f.replica << " stage " << f.stage;
    EXPECT_EQ(f.sync_last_replica, 1);
    EXPECT_NEAR(f.compute_ms + f.late_sender_ms + f.late_receiver_ms + f.transfer_ms +
                    f.sync_wait_ms + f.rest_ms,
                f.step_ms, 1e-9);
    EXPECT_GE(f.rest_ms, 0) << "replica " << f.replica << " stage " << f.stage;
  }
}

// The wait for the last replica wherever it surfaces (replica_waits.h), in
// the three shapes of a real DP x PP Megatron-LM job with one replica
// slowed, and behind an asynchronous sync: stage 0 waits inside the
// embedding gradients' all-reduce before its gradient sync; stages 1 and 2
// inside the gradient sync (or, asynchronous, in the optimizer after a
// 0.1 ms launch); the last stage in an untraced gap before its layer-norm
// and embedding all-reduces. Each seed: 3 replicas of P = 4, M = 3 (GPipe
// order), per-rank pass costs with noise of 1x-2x, one replica's random
// stage 1.5x-3x slower. A rank's true wait is the last replica's arrival
// (its last backward's end) less its own.
TEST(ReplicaWaits, EachRanksWaitIsItsTrueWaitInEveryShapeAndNamedWhereItSurfaced) {
  constexpr int P = 4, M = 3, R = 3;
  constexpr double emb = 0.3, norm = 0.2, grads = 0.5, opt = 0.5, launch = 0.1;
  int checked = 0, off = 0, misnamed = 0;
  for (unsigned seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> noise(1.0, 2.0), slowdown(1.5, 3.0);
    const int slow_replica = static_cast<int>(rng() % R), slow_stage = static_cast<int>(rng() % P);
    const bool async = rng() % 2 == 1;
    // Per replica: its schedule, and each stage's arrival (last backward's end).
    std::vector<std::vector<Compute>> computes(R);
    std::vector<std::vector<double>> ready(R, std::vector<double>(P));
    for (int r = 0; r < R; ++r) {
      std::vector<double> cost(P);
      for (int st = 0; st < P; ++st)
        cost[st] = noise(rng) * (r == slow_replica && st == slow_stage ? slowdown(rng) : 1.0);
      std::vector<std::vector<double>> fend(M, std::vector<double>(P)), bend = fend;
      for (int m = 0; m < M; ++m)
        for (int st = 0; st < P; ++st) {
          const double t = std::max(st > 0 ? fend[m][st - 1] : 0.0, m > 0 ? fend[m - 1][st] : 0.0);
          fend[m][st] = t + cost[st];
          computes[r].push_back({st, F, m, t, fend[m][st]});
        }
      for (int m = 0; m < M; ++m)
        for (int st = P - 1; st >= 0; --st) {
          const double t = std::max({st + 1 < P ? bend[m][st + 1] : 0.0,
                                     m > 0 ? bend[m - 1][st] : 0.0, fend[M - 1][st]});
          bend[m][st] = t + cost[st];
          computes[r].push_back({st, B, m, t, bend[m][st]});
        }
      for (int st = 0; st < P; ++st) ready[r][st] = bend[M - 1][st];
    }
    std::vector<double> last(P, 0);
    for (int st = 0; st < P; ++st)
      for (int r = 0; r < R; ++r) last[st] = std::max(last[st], ready[r][st]);
    analysis::Run run;
    for (int r = 0; r < R; ++r) {
      // Each stage's tail: the spans after its arrival, to its step's end.
      struct Tail {
        std::vector<std::tuple<const char*, double, double>> spans;
        double end;
      };
      std::vector<Tail> tails(P);
      for (int st = 0; st < P; ++st) {
        const double a = ready[r][st], w = last[st];
        Tail& t = tails[st];
        if (st == 0) {
          t.spans = {{"megatron.embedding_grads.all_reduce", a, w + emb},
                     {"megatron.grads.all_reduce", w + emb, w + emb + grads},
                     {"megatron.optimizer.step", w + emb + grads, w + emb + grads + opt}};
        } else if (st == P - 1) {
          t.spans = {{"megatron.layernorm_grads.all_reduce", w, w + norm},
                     {"megatron.embedding_grads.all_reduce", w + norm, w + norm + emb},
                     {"megatron.grads.all_reduce", w + norm + emb, w + norm + emb + grads},
                     {"megatron.optimizer.step", w + norm + emb + grads,
                      w + norm + emb + grads + opt}};
        } else if (async) {
          t.spans = {{"megatron.grads.all_reduce", a, a + launch},
                     {"megatron.optimizer.step", a + launch, w + grads + opt}};
        } else {
          t.spans = {{"megatron.grads.all_reduce", a, w + grads},
                     {"megatron.optimizer.step", w + grads, w + grads + opt}};
        }
        t.end = std::get<2>(t.spans.back());
      }
      std::vector<std::pair<double, double>> windows;
      for (int st = 0; st < P; ++st) windows.push_back({0, tails[st].end});
      analysis::Run one = make_step(P, windows, computes[r], 7, r);
      for (int st = 0; st < P; ++st)
        for (const auto& [name, a, b] : tails[st].spans) add_span(one, st, name, a, b);
      for (auto& f : one.files) run.files.push_back(std::move(f));
    }
    const StepAnalysis a = analyze(run, P);
    ASSERT_TRUE(a.complete) << "seed " << seed;
    for (const auto& f : a.stages_figures) {
      const double truth = last[f.stage] - ready[f.replica][f.stage];
      EXPECT_NEAR(f.compute_ms + f.late_sender_ms + f.late_receiver_ms + f.transfer_ms +
                      f.sync_wait_ms + f.rest_ms,
                  f.step_ms, 1e-9);
      EXPECT_GE(f.rest_ms, -1e-9) << "seed " << seed;
      if (truth < 1e-9) {
        EXPECT_EQ(f.sync_wait_ms, 0) << "seed " << seed << " the last replica waits for none";
        continue;
      }
      ++checked;
      if (std::abs(f.sync_wait_ms - truth) > 0.05 * truth) {
        ++off;
        ADD_FAILURE() << "seed " << seed << " replica " << f.replica << " stage " << f.stage
                      << ": sync " << f.sync_wait_ms << " ms, true wait " << truth << " ms";
      }
      const char* where = f.stage == 0       ? "megatron.embedding_grads.all_reduce"
                          : f.stage == P - 1 ? kUntraced
                          : async            ? "megatron.optimizer.step"
                                             : "megatron.grads.all_reduce";
      if (f.sync_wait_at != where) ++misnamed;
      EXPECT_EQ(f.sync_wait_at, where) << "seed " << seed << " stage " << f.stage;
      int last_replica = 0;
      for (int r = 1; r < R; ++r)
        if (ready[r][f.stage] > ready[last_replica][f.stage]) last_replica = r;
      EXPECT_EQ(f.sync_last_replica, last_replica) << "seed " << seed;
    }
  }
  std::printf("replica waits: %d waits checked, %d off by more than 5%%, %d misnamed\n", checked,
              off, misnamed);
  EXPECT_GT(checked, 300 * (R - 1) * P / 2);
}

TEST(MicrobatchVariability, TheCostsOrderDoesNotMatterButWithinAMicrobatchOfAStage) {
  // Random steps of costs over 2 replicas, 2 TP ranks, 4 stages and 6
  // microbatches, some missing, some not positive, some a microbatch's
  // cost twice on a stage. Shuffled so that the costs of one replica,
  // tensor rank, stage and microbatch keep their order, the same steps say
  // the same to the bit: costs are grouped by pipeline and stage, and a
  // microbatch's stages taken in stage order, whatever their order given.
  std::mt19937_64 random(17);
  MicrobatchVariability in_order, shuffled;
  for (int step = 0; step < 40; ++step) {
    std::vector<MicrobatchCost> costs;
    for (int replica = 0; replica < 2; ++replica)
      for (int tensor = 0; tensor < 2; ++tensor)
        for (int stage = 0; stage < 4; ++stage)
          for (std::int64_t mb = 0; mb < 6; ++mb) {
            if (random() % 7 == 0) continue;
            const double ms = random() % 11 == 0 ? 0.0 : 0.5 + static_cast<double>(random() % 1000) / 100;
            costs.push_back({replica, stage, tensor, mb, ms});
            if (random() % 9 == 0)
              costs.push_back({replica, stage, tensor, mb, 0.5 + static_cast<double>(random() % 100) / 10});
          }
    // Shuffled: the costs in a random order, then each key's put back in
    // its own order over the places its costs took.
    std::vector<std::size_t> order(costs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), random);
    const auto key = [&](std::size_t i) {
      const MicrobatchCost& c = costs[i];
      return std::make_tuple(c.replica, c.tensor, c.stage, c.microbatch);
    };
    std::map<std::tuple<int, int, int, std::int64_t>, std::vector<std::size_t>> same_key;
    for (std::size_t i = 0; i < costs.size(); ++i) same_key[key(i)].push_back(i);
    std::map<std::tuple<int, int, int, std::int64_t>, std::size_t> taken;
    std::vector<MicrobatchCost> other;
    for (const std::size_t i : order) other.push_back(costs[same_key[key(i)][taken[key(i)]++]]);
    const int setter = static_cast<int>(random() % 2);
    in_order.add(costs, setter);
    shuffled.add(other, setter);
  }
  const Variability a = in_order.finish(), b = shuffled.finish();
  EXPECT_EQ(a.spread, b.spread);
  EXPECT_EQ(a.correlation, b.correlation);
  EXPECT_EQ(a.setter_changes, b.setter_changes);
  EXPECT_EQ(a.variable, b.variable);
  ASSERT_EQ(a.stages.size(), 4u);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    EXPECT_EQ(a.stages[i].stage, b.stages[i].stage);
    EXPECT_EQ(a.stages[i].microbatches, b.stages[i].microbatches);
    EXPECT_EQ(a.stages[i].p50_ms, b.stages[i].p50_ms);
    EXPECT_EQ(a.stages[i].p95_ms, b.stages[i].p95_ms);
    EXPECT_EQ(a.stages[i].max_over_min, b.stages[i].max_over_min);
    EXPECT_EQ(a.stages[i].relative_p90_p10, b.stages[i].relative_p90_p10);
  }
  EXPECT_NE(a.correlation, 0) << "stage pairs were summed";
}

TEST(MicrobatchVariability, WorkSharedByEveryStageIsVariableNoiseOnOneRankIsNot) {
  // Two stages, four microbatches a step, six steps. Shared: microbatch m
  // costs (1, 2, 3, 4)[m] ms on both stages (a long sequence is long
  // everywhere). Noise: stage 0 as shared, stage 1 the reverse order.
  MicrobatchVariability shared, noise;
  for (int step = 0; step < 6; ++step) {
    std::vector<MicrobatchCost> a, b;
    for (int m = 0; m < 4; ++m) {
      a.push_back({0, 0, 0, m, 1.0 + m});
      a.push_back({0, 1, 0, m, 2.0 * (1 + m)});
      b.push_back({0, 0, 0, m, 1.0 + m});
      b.push_back({0, 1, 0, m, 4.0 - m});
    }
    shared.add(a, step % 2);  // the setting replica changes every step
    noise.add(b, 0);
  }
  const Variability v = shared.finish();
  // Relative to the step's median (2.5 on stage 0, 5 on stage 1): 0.4, 0.8,
  // 1.2, 1.6; p10 0.4 and p90 1.6 over 24.
  EXPECT_NEAR(v.spread, 4, 1e-9);
  EXPECT_NEAR(v.correlation, 1, 1e-9);
  EXPECT_TRUE(v.variable);
  EXPECT_DOUBLE_EQ(v.setter_changes, 1);
  ASSERT_EQ(v.stages.size(), 2u);
  EXPECT_EQ(v.stages[1].microbatches, 24u);
  EXPECT_DOUBLE_EQ(v.stages[1].max_over_min, 4);
  EXPECT_DOUBLE_EQ(v.stages[1].p50_ms, 4);
  EXPECT_DOUBLE_EQ(v.stages[1].p95_ms, 8);
  const Variability n = noise.finish();
  EXPECT_NEAR(n.spread, 4, 1e-9) << "as spread";
  EXPECT_LT(n.correlation, 0) << "but not shared";
  EXPECT_FALSE(n.variable);
  EXPECT_DOUBLE_EQ(n.setter_changes, 0);
}

// Adds `part`'s ranks to `run` as tensor rank `tensor` of replica 0.
void add_tensor_rank(analysis::Run& run, analysis::Run&& part, int tensor) {
  for (auto& f : part.files) {
    f.replica = 0;
    f.tensor_rank = tensor;
    run.files.push_back(std::move(f));
  }
}

// Tensor parallelism: two TP ranks per stage, each TP rank of stage 0
// sending to the same TP rank of stage 1, so (replica 0, tensor 0) and
// (replica 0, tensor 1) are two pipelines. Tensor rank 1's stage 1 takes
// `slowed` ms a pass, the others 1 ms.
Run two_tensor_ranks(std::int64_t step = 7, double slowed = 3) {
  analysis::Run run;
  for (int tensor = 0; tensor < 2; ++tensor) {
    const double slow = tensor == 1 ? slowed : 1;
    analysis::Run r = make_step(2, {{0, 2 + 2 * slow}, {0, 1 + 2 * slow}},
                                {{0, F, 0, 0, 1},
                                 {1, F, 0, 1, 1 + slow},
                                 {1, B, 0, 1 + slow, 1 + 2 * slow},
                                 {0, B, 0, 1 + 2 * slow, 2 + 2 * slow}},
                                step, tensor);  // distinct ranks: stage + 2 x tensor
    add_tensor_rank(run, std::move(r), tensor);
  }
  return run;
}

TEST(StepAnalysis, TensorParallelPeersAreSeparatePipelinesAndNoComputeCountsTwice) {
  const analysis::Run run = two_tensor_ranks();
  const StepAnalysis a = analyze(run, 2);
  ASSERT_TRUE(a.complete);
  ASSERT_EQ(a.graphs.size(), 2u);
  EXPECT_EQ(a.stages_figures.size(), 4u);
  for (const auto& f : a.stages_figures) {
    // Each rank's own computes only: 2 ms on every stage but tensor rank 1's
    // stage 1 (6 ms); keyed by stage alone the two would add up.
    EXPECT_DOUBLE_EQ(f.compute_ms, f.tensor == 1 && f.stage == 1 ? 6 : 2) << "rank " << f.rank;
    EXPECT_NEAR(f.compute_ms + f.late_sender_ms + f.late_receiver_ms + f.transfer_ms +
                    f.sync_wait_ms + f.rest_ms,
                f.step_ms, 1e-9);
  }
  // The slower pipeline sets the step; its path is no longer than its step.
  EXPECT_EQ(a.critical_tensor, 1);
  EXPECT_DOUBLE_EQ(a.critical_path_ms, 8);
  EXPECT_LE(a.critical_path_ms, a.step_ms);
  for (const auto& seg : a.critical_path) EXPECT_GE(seg.rank, 2) << "tensor rank 1's ranks";
}

TEST(StepAnalysis, AStragglerAmongTensorParallelPeersIsNamedByRank) {
  // Five steps; from step 2 on, rank 3 (stage 1, tensor rank 1) takes 3 ms a
  // pass, its TP peer rank 1 (stage 1, tensor rank 0) 1 ms.
  AnalysisBuilder b;
  for (int step = 0; step < 5; ++step) {
    const analysis::Run run = two_tensor_ranks(step, step >= 2 ? 3 : 1);
    b.add(build_view(run), run);
  }
  const Analysis a = b.finish();
  EXPECT_EQ(a.tensors, 2);
  ASSERT_EQ(a.stragglers.size(), 1u);
  EXPECT_EQ(a.stragglers[0].who.rank, 3);
  EXPECT_EQ(a.stragglers[0].who.stage, 1);
  EXPECT_EQ(a.stragglers[0].tensor, 1);
  EXPECT_EQ(a.stragglers[0].who.since_step, 2);
  const std::string table = format_table(a);
  EXPECT_NE(table.find("straggler: rank 3 (stage 1, replica 0, tensor rank 1)"), std::string::npos)
      << table;
  EXPECT_NE(table.find("dp.tp"), std::string::npos) << table;
}

// Tensor parallelism as it runs: P = 2, M = 1, two TP ranks per stage, one
// TP collective inside every forward and backward, which every peer leaves
// together. On stage 1 tensor rank 1 (rank 3) does `slow` ms of local work
// before each collective, tensor rank 0 (rank 1) 1 ms: rank 1 waits
// slow - 1 ms at each. Stage 0: 0.8 ms of work, then a 0.2 ms collective.
Run tensor_parallel_step(std::int64_t step, double slow) {
  const double f_end = 1 + slow + 0.2, b_end = f_end + slow + 0.2;
  analysis::Run run;
  for (int tensor = 0; tensor < 2; ++tensor) {
    const double own = tensor == 1 ? slow : 1;  // stage 1's local work per pass
    analysis::Run r = make_step(2, {{0, b_end + 1}, {0, b_end}},
                                {{0, F, 0, 0, 1},
                                 {1, F, 0, 1, f_end},
                                 {1, B, 0, f_end, b_end},
                                 {0, B, 0, b_end, b_end + 1}},
                                step, tensor);  // ranks: stage + 2 x tensor
    std::int64_t sequence[2] = {0, 0};
    const auto collective = [&](int s, double a, double b) {
      add_span(r, s, "megatron.tp.all_reduce", a, b);
      SpanRow& c = r.files[static_cast<std::size_t>(s)].spans.back();
      c.attributes.set("dl.tensor_parallel.rank", std::to_string(tensor));
      c.attributes.set("dl.collective.sequence", std::to_string(sequence[s]++));
    };
    collective(0, 0.8, 1);
    collective(1, 1 + own, f_end);
    collective(1, f_end + own, b_end);
    collective(0, b_end + 0.8, b_end + 1);
    add_tensor_rank(run, std::move(r), tensor);
  }
  return run;
}

TEST(StepAnalysis, AWaitAtATensorParallelCollectiveIsForTheLastPeerAndNotCompute) {
  const analysis::Run run = tensor_parallel_step(7, 3);
  const StepAnalysis a = analyze(run, 2);
  ASSERT_TRUE(a.complete);
  std::map<int, const StageFigures*> by_rank;
  for (const auto& f : a.stages_figures) by_rank[f.rank] = &f;
  ASSERT_EQ(by_rank.size(), 4u);
  // Rank 1 waited 2 ms at each of its two collectives, for tensor rank 1.
  EXPECT_NEAR(by_rank[1]->collective_ms, 4.4, 1e-9);
  EXPECT_NEAR(by_rank[1]->collective_wait_ms, 4, 1e-9);
  EXPECT_EQ(by_rank[1]->collective_last_peer(), 1);
  EXPECT_NEAR(by_rank[1]->compute_ms, 2, 1e-9) << "its own work, not its wait";
  EXPECT_NEAR(by_rank[3]->collective_wait_ms, 0, 1e-9);
  EXPECT_NEAR(by_rank[3]->compute_ms, 6, 1e-9);
  for (int rank : {0, 2}) {
    EXPECT_NEAR(by_rank[rank]->compute_ms, 1.6, 1e-9) << "rank " << rank;
    EXPECT_NEAR(by_rank[rank]->collective_wait_ms, 0, 1e-9) << "rank " << rank;
  }
  for (const auto& [rank, f] : by_rank)
    EXPECT_NEAR(f->compute_ms + f->late_sender_ms + f->late_receiver_ms + f->transfer_ms +
                    f->collective_wait_ms + f->sync_wait_ms + f->rest_ms,
                f->step_ms, 1e-9)
        << "rank " << rank;
  // The waits drawn: rank 1's two, each naming tensor rank 1.
  double drawn = 0;
  for (const auto& w : a.waits)
    if (w.kind == WaitInterval::Kind::kCollective) {
      EXPECT_EQ(w.rank, 1);
      EXPECT_EQ(w.peer, 1);
      drawn += static_cast<double>(w.end_ns - w.start_ns) / 1e6;
    }
  EXPECT_NEAR(drawn, 4, 1e-9);
  // The path runs through the peer the others waited for, and is no longer
  // than the step.
  EXPECT_EQ(a.critical_tensor, 1);
  for (const auto& seg : a.critical_path) EXPECT_GE(seg.rank, 2) << "tensor rank 1's ranks";
  EXPECT_LE(a.critical_path_ms, a.step_ms + 1e-9);
}

TEST(StepAnalysis, ACollectiveOutsideThePassesIsTakenFromTheRestNotFromCompute) {
  // P = 1, M = 1, two TP ranks: F [0, 2], B [2, 4], step [0, 6]; one
  // collective inside F (rank 0 at 1, rank 1 at 1.2, both end 1.5) and one
  // after B, outside the passes (rank 0 at 4, rank 1 at 4.5, both end 5).
  analysis::Run run;
  for (int tensor = 0; tensor < 2; ++tensor) {
    analysis::Run r = make_step(1, {{0, 6}}, {{0, F, 0, 0, 2}, {0, B, 0, 2, 4}}, 7, tensor);
    const double late = tensor == 1 ? 1 : 0;
    std::int64_t sequence = 0;
    for (const auto& [a, b] : {std::pair{1 + 0.2 * late, 1.5}, std::pair{4 + 0.5 * late, 5.0}}) {
      add_span(r, 0, "megatron.tp.all_reduce", a, b);
      r.files[0].spans.back().attributes.set("dl.collective.sequence", std::to_string(sequence++));
    }
    add_tensor_rank(run, std::move(r), tensor);
  }
  const StepAnalysis a = analyze(run, 1);
  ASSERT_TRUE(a.complete);
  std::map<int, const StageFigures*> by_rank;
  for (const auto& f : a.stages_figures) by_rank[f.rank] = &f;
  ASSERT_EQ(by_rank.size(), 2u);
  const StageFigures& r0 = *by_rank[0];
  EXPECT_NEAR(r0.collective_ms, 1.5, 1e-9);
  EXPECT_NEAR(r0.collective_wait_ms, 0.7, 1e-9);
  EXPECT_NEAR(r0.compute_ms, 3.5, 1e-9) << "only the collective inside F comes off compute";
  EXPECT_NEAR(r0.transfer_ms, 0.8, 1e-9);
  EXPECT_NEAR(r0.rest_ms, 1.0, 1e-9);
  const StageFigures& r1 = *by_rank[1];
  EXPECT_NEAR(r1.compute_ms, 3.7, 1e-9);
  EXPECT_NEAR(r1.collective_wait_ms, 0, 1e-9);
  EXPECT_NEAR(r1.rest_ms, 1.5, 1e-9);
  for (const auto& [rank, f] : by_rank)
    EXPECT_NEAR(f->compute_ms + f->late_sender_ms + f->late_receiver_ms + f->transfer_ms +
                    f->collective_wait_ms + f->sync_wait_ms + f->rest_ms,
                f->step_ms, 1e-9)
        << "rank " << rank;
}

TEST(StepAnalysis, ASlowTensorParallelRankIsNamedWithItsPeersWaitsForIt) {
  // Six steps; from step 3 on rank 3's local work takes 4 ms, 1 ms before.
  AnalysisBuilder b;
  for (int step = 0; step < 6; ++step) {
    const analysis::Run run = tensor_parallel_step(step, step >= 3 ? 4 : 1);
    b.add(build_view(run), run);
  }
  const Analysis a = b.finish();
  ASSERT_EQ(a.stragglers.size(), 1u) << format_table(a);
  const StragglerReport& r = a.stragglers[0];
  EXPECT_EQ(r.who.rank, 3);
  EXPECT_EQ(r.who.stage, 1);
  EXPECT_EQ(r.tensor, 1);
  EXPECT_EQ(r.who.since_step, 3);
  ASSERT_TRUE(r.peers_collective_wait_ms.has_value());
  EXPECT_NEAR(*r.peers_collective_wait_ms, 6, 1e-9) << "rank 1 waits 3 ms at each of two";
  const std::string table = format_table(a);
  EXPECT_NE(table.find("its TP peers (stage 1, replica 0) wait 6.00 ms per step (p50) for it"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("tp-wait"), std::string::npos) << table;
  const std::string json = format_json(a);
  EXPECT_NE(json.find("\"peers_collective_wait_ms\": 6.0"), std::string::npos) << json;
}

TEST(StepAnalysis, AStageWithoutComputeSpansLeavesTheStepIncomplete) {
  const analysis::Run run = make_step(2, {{0, 2}, {0, 2}}, {{0, F, 0, 0, 1}, {0, B, 0, 1, 2}});
  EXPECT_FALSE(analyze(run, 2).complete);
}

}  // namespace
}  // namespace lens::analysis
