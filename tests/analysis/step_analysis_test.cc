// analyze_step on synthetic steps whose schedule is worked out by hand
// (docs/analysis.md): the critical path, its shares, the waits at every
// receive and the idle split must come out as constructed.
#include "step_analysis.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "analyze.h"

namespace lens::tools {
namespace {

struct Compute {
  int stage;
  bool backward;
  int microbatch;
  double start_ms, end_ms;
  int chunk = -1;  // dl.virtual_pipeline.rank; -1: not said
};

std::int64_t ns(double ms) { return static_cast<std::int64_t>(ms * 1e6); }

// A run of one step: per stage a rank (rank = stage + stages * replica),
// its step and forward_backward spans over `windows[stage]`, and the
// compute spans.
Run make_step(int stages, const std::vector<std::pair<double, double>>& windows,
              const std::vector<Compute>& compute, std::int64_t step = 7, int replica = 0) {
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
      r.span_id = name + std::to_string(f.rank) + std::to_string(a);
      r.name = std::move(name);
      r.start_ns = ns(a);
      r.end_ns = ns(b);
      return r;
    };
    SpanRow st = span("megatron.train_step", windows[s].first, windows[s].second);
    st.attributes["dl.step"] = std::to_string(step);
    st.attributes["dl.pipeline_parallel.rank"] = std::to_string(s);
    f.spans.push_back(st);
    f.spans.push_back(span("megatron.forward_backward", windows[s].first, windows[s].second));
    for (const auto& c : compute) {
      if (c.stage != s) continue;
      SpanRow r = span(c.backward ? "megatron.microbatch.backward" : "megatron.microbatch.forward",
                       c.start_ms, c.end_ms);
      r.attributes["dl.microbatch_id"] = std::to_string(c.microbatch);
      if (c.chunk >= 0) r.attributes["dl.virtual_pipeline.rank"] = std::to_string(c.chunk);
      f.spans.push_back(r);
    }
    run.files.push_back(std::move(f));
  }
  return run;
}

StepAnalysis analyze(const Run& run, int stages) {
  const PipelineView view = build_view(run);
  EXPECT_EQ(view.steps.size(), 1u);
  std::map<int, int> replica_of;
  for (const auto& f : run.files) replica_of[f.rank] = f.replica;
  return analyze_step(view.steps.at(0), stages, replica_of);
}

const StageFigures& stage(const StepAnalysis& a, int s) {
  for (const auto& f : a.stages_figures)
    if (f.stage == s) return f;
  throw std::runtime_error("no stage " + std::to_string(s));
}

constexpr bool F = false, B = true;

TEST(StepAnalysis, OneMicrobatchOnTwoStagesIsOneChain) {
  // F0 on 0, F0 on 1, B0 on 1, B0 on 0, back to back (no transfer time).
  const tools::Run run = make_step(
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
  // Stage 1 waits 1 ms for stage 0's forward; stage 0 waits 3 ms for the
  // gradient (stage 1's forward and backward).
  EXPECT_DOUBLE_EQ(stage(a, 1).late_sender_ms, 1);
  EXPECT_DOUBLE_EQ(stage(a, 0).late_sender_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 0).transfer_ms, 0);
  // Idle 3 ms on each: stage 1 1 ms before and 2 ms after its compute;
  // stage 0 3 ms between, waiting on its neighbour.
  EXPECT_DOUBLE_EQ(stage(a, 1).idle_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 1).warmup_idle_ms, 1);
  EXPECT_DOUBLE_EQ(stage(a, 1).cooldown_idle_ms, 2);
  EXPECT_DOUBLE_EQ(stage(a, 0).idle_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 0).imbalance_idle_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 0).schedule_idle_ms, 3);  // (P-1)(f+b) = 1 x (1+2)
}

TEST(StepAnalysis, InterleavedChunksChainThroughTheLastAndFirstStages) {
  // P = 2, V = 2, one microbatch: forward through chunk 0 of stages 0 and
  // 1, then chunk 1 of both (stage 1's chunk 0 feeds stage 0's chunk 1),
  // and back; 1 ms each, back to back.
  const tools::Run run = make_step(2, {{0, 8}, {0, 8}},
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
  // Stage 0 waits 1 ms for stage 1's chunk 0 forward (the wrap), 2 ms for
  // the gradient of chunk 1 (stage 1's chunk 1 forward and backward) and 1
  // ms for chunk 0's; stage 1 waits 1 ms before each chunk's forward and 1
  // ms for chunk 0's gradient from stage 0's chunk 1 (the wrap back).
  EXPECT_DOUBLE_EQ(stage(a, 0).late_sender_ms, 1 + 2 + 1);
  EXPECT_DOUBLE_EQ(stage(a, 1).late_sender_ms, 1 + 1 + 1);
}

TEST(StepAnalysis, SpansThatMakeTheGraphGoRoundEndTheWalkInsteadOfLooping) {
  // Stage 0's forward recorded after its backward (a clock or a file gone
  // wrong): stage 1's forward needs it, and it needs what needs stage 1.
  const tools::Run run = make_step(
      2, {{0, 6}, {0, 6}}, {{0, B, 0, 0, 1}, {0, F, 0, 5, 6}, {1, F, 0, 2, 3}, {1, B, 0, 3, 4}});
  const StepAnalysis a = analyze(run, 2);
  EXPECT_LE(a.critical_path.size(), 4u + 4u) << "each compute once, with its transfers";
}

TEST(StepAnalysis, TwoMicrobatchesWithTransfersFollowTheGradient) {
  // 1F1B, P = 2, M = 2, forward and backward 1 ms, every transfer 0.5 ms
  // (worked out in docs/analysis.md).
  const tools::Run run = make_step(2, {{0, 7}, {0, 5.5}},
                                   {{0, F, 0, 0, 1},
                                    {0, F, 1, 1, 2},
                                    {1, F, 0, 1.5, 2.5},
                                    {1, B, 0, 2.5, 3.5},
                                    {1, F, 1, 3.5, 4.5},
                                    {1, B, 1, 4.5, 5.5},
                                    {0, B, 0, 4, 5},
                                    {0, B, 1, 6, 7}});
  const StepAnalysis a = analyze(run, 2);
  EXPECT_DOUBLE_EQ(a.critical_path_ms, 7);
  EXPECT_DOUBLE_EQ(a.critical_transfer_ms, 1);
  // F0@0, transfer, F0@1, B0@1, F1@1, B1@1, transfer, B1@0.
  std::vector<std::tuple<PathSegment::Kind, int, std::int64_t>> want = {
      {PathSegment::Kind::kForward, 0, 0},  {PathSegment::Kind::kTransfer, 1, 0},
      {PathSegment::Kind::kForward, 1, 0},  {PathSegment::Kind::kBackward, 1, 0},
      {PathSegment::Kind::kForward, 1, 1},  {PathSegment::Kind::kBackward, 1, 1},
      {PathSegment::Kind::kTransfer, 0, 1}, {PathSegment::Kind::kBackward, 0, 1}};
  ASSERT_EQ(a.critical_path.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(
        std::tie(a.critical_path[i].kind, a.critical_path[i].stage, a.critical_path[i].microbatch),
        want[i])
        << "segment " << i;
  EXPECT_NEAR(stage(a, 0).critical_share, 2.0 / 7, 1e-12);
  EXPECT_NEAR(stage(a, 1).critical_share, 4.0 / 7, 1e-12);
  EXPECT_DOUBLE_EQ(stage(a, 1).late_sender_ms, 1);
  EXPECT_DOUBLE_EQ(stage(a, 1).transfer_ms, 0.5);
  EXPECT_DOUBLE_EQ(stage(a, 0).late_sender_ms, 2);
  EXPECT_DOUBLE_EQ(stage(a, 0).transfer_ms, 1);
  // Stage 0's second forward waited 1.5 ms at stage 1 for it to be free.
  EXPECT_DOUBLE_EQ(stage(a, 0).late_receiver_ms, 1.5);
  EXPECT_DOUBLE_EQ(stage(a, 1).late_receiver_ms, 0);
  EXPECT_DOUBLE_EQ(stage(a, 0).idle_ms, 3);
  EXPECT_DOUBLE_EQ(stage(a, 0).imbalance_idle_ms, 2);
  EXPECT_DOUBLE_EQ(stage(a, 0).transfer_idle_ms, 1);
  EXPECT_DOUBLE_EQ(stage(a, 1).warmup_idle_ms, 1.5);
  EXPECT_DOUBLE_EQ(stage(a, 1).cooldown_idle_ms, 1.5);
  EXPECT_DOUBLE_EQ(stage(a, 1).schedule_idle_ms, 2);
}

TEST(StepAnalysis, FewerMicrobatchesThanStagesIsOneChainThroughEveryStage) {
  const tools::Run run = make_step(3, {{0, 6}, {0, 5}, {0, 4}},
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
  EXPECT_DOUBLE_EQ(stage(a, 2).late_sender_ms, 2);  // waited for two forwards
}

TEST(StepAnalysis, ASlowStageOwnsThePathAndIsTheStraggler) {
  // P = 3, M = 1: stage 1 takes 3 ms per pass, the others 1 ms.
  auto run_with = [](double slow) {
    return make_step(3, {{0, 4 + 2 * slow}, {0, 3 + 2 * slow}, {0, 2 + slow}},
                     {{0, F, 0, 0, 1},
                      {1, F, 0, 1, 1 + slow},
                      {2, F, 0, 1 + slow, 2 + slow},
                      {2, B, 0, 2 + slow, 3 + slow},
                      {1, B, 0, 3 + slow, 3 + 2 * slow},
                      {0, B, 0, 3 + 2 * slow, 4 + 2 * slow}});
  };
  const StepAnalysis a = analyze(run_with(3), 3);
  EXPECT_NEAR(stage(a, 1).critical_share, 6.0 / 10, 1e-12);
  AnalysisBuilder builder;
  for (int i = 0; i < 3; ++i) {
    tools::Run run = run_with(3);
    builder.add(build_view(run), run);
  }
  const Analysis all = builder.finish();
  EXPECT_EQ(all.steps, 3u);
  EXPECT_EQ(all.straggler_stage, 1);
  EXPECT_NEAR(all.slowest_relative, 3.0, 1e-9);
  for (const auto& s : all.stages_analysis)
    if (s.stage == 1) {
      EXPECT_EQ(s.slow_since, 7);
    }

  AnalysisBuilder balanced;
  tools::Run even = run_with(1);
  balanced.add(build_view(even), even);
  const Analysis b = balanced.finish();
  EXPECT_EQ(b.straggler_stage, -1);
  EXPECT_NE(format_table(b).find("straggler: none"), std::string::npos) << format_table(b);
  EXPECT_NE(format_diff(b, all).find("most changed: stage 1 (compute per microbatch 3.00x)"),
            std::string::npos)
      << format_diff(b, all);
}

TEST(StepAnalysis, TheOptimizerAndTheGradientAllReduceEndThePath) {
  // P = 2, M = 1 as in the first case, then on each stage a data-parallel
  // all-reduce and the optimizer: stage 1's end earlier than stage 0's.
  tools::Run run = make_step(2, {{0, 6}, {0, 4}},
                             {{0, F, 0, 0, 1}, {1, F, 0, 1, 2}, {1, B, 0, 2, 4}, {0, B, 0, 4, 6}});
  auto add = [&](int s, const char* name, double a, double b) {
    SpanRow r = run.files[static_cast<std::size_t>(s)].spans.front();
    r.name = name;
    r.span_id += name;
    r.attributes.clear();
    r.start_ns = ns(a);
    r.end_ns = ns(b);
    run.files[static_cast<std::size_t>(s)].spans.push_back(r);
  };
  add(1, "megatron.grads.all_reduce", 4, 5);
  add(1, "megatron.optimizer.step", 5, 5.5);
  add(0, "megatron.grads.all_reduce", 6, 8);
  add(0, "megatron.optimizer.step", 8, 9);
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

TEST(StepAnalysis, AStageWithoutComputeSpansLeavesTheStepIncomplete) {
  const tools::Run run = make_step(2, {{0, 2}, {0, 2}}, {{0, F, 0, 0, 1}, {0, B, 0, 1, 2}});
  EXPECT_FALSE(analyze(run, 2).complete);
}

}  // namespace
}  // namespace lens::tools
