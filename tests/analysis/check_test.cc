// `lens check` over runs built in memory, where a trainer run cannot show
// the case: pipeline scope with tensor parallelism, where each (dp, tp)
// pipeline has a trace of its own.
#include "check.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace lens::tools {
namespace {

std::string hex(std::uint64_t v, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

// Pipeline scope, pp = 2, tp = 2, dp = 1, one microbatch per step: rank r is
// stage r / 2, tensor rank r % 2. Each tensor rank's pipeline has its own
// trace per step; tp 1's step spans link to global rank 0's.
Run tensor_parallel_run(int steps) {
  Run run;
  for (int rank = 0; rank < 4; ++rank) {
    RankFile f;
    f.path = "rank-" + std::to_string(rank) + ".otlp.jsonl";
    f.rank = rank;
    f.world_size = 4;
    f.run_id = "run";
    f.trace_scope = "pipeline";
    f.replica = 0;
    f.tensor_rank = rank % 2;
    run.files.push_back(f);
  }
  const auto trace = [](int step, int tp) { return hex(0x100 + step * 10 + tp, 32); };
  const auto step_id = [](int step, int rank) { return hex(0x5000 + step * 10 + rank, 16); };
  for (int step = 0; step < steps; ++step) {
    for (int rank = 0; rank < 4; ++rank) {
      const int stage = rank / 2, tp = rank % 2;
      const std::int64_t t = 1'000'000'000 + step * 1'000'000;
      SpanRow s;
      s.rank = rank;
      s.trace_id = trace(step, tp);
      s.span_id = step_id(step, rank);
      s.name = "megatron.train_step";
      s.start_ns = t + stage * 10;
      s.end_ns = t + 900'000;
      s.attributes = {{"dl.step", std::to_string(step)},
                      {"dl.pipeline_parallel.rank", std::to_string(stage)},
                      {"dl.pipeline_parallel.size", "2"},
                      {"dl.num_microbatches", "1"}};
      if (tp == 1) s.links.push_back({trace(step, 0), step_id(step, 0)});
      if (stage == 1) {
        SpanRow linked;
        linked.rank = rank;
        linked.trace_id = s.trace_id;
        linked.span_id = hex(0x9000 + step * 10 + rank, 16);
        linked.parent_span_id = s.span_id;
        linked.name = "megatron.pp.recv_forward.linked";
        linked.start_ns = s.start_ns + 100;
        linked.end_ns = s.start_ns + 200;
        linked.attributes = {{"dl.pipeline_parallel.rank", "1"}, {"dl.microbatch_id", "0"}};
        linked.links.push_back({s.trace_id, step_id(step, tp)});  // its pipeline's first stage
        run.files[rank].spans.push_back(linked);
      }
      run.files[rank].spans.push_back(s);
    }
  }
  return run;
}

std::vector<std::string> violations(const Run& run) {
  std::vector<std::string> out;
  for (const auto& v : check_run(run, build_view(run))) out.push_back(format_violation(v));
  return out;
}

TEST(Check, PipelineScopeWithTensorParallelismChecksEachPipelineOnItsOwn) {
  EXPECT_EQ(violations(tensor_parallel_run(3)), std::vector<std::string>{});
}

TEST(Check, PipelineScopeFindsARankOutsideItsPipelinesTrace) {
  lens::tools::Run run = tensor_parallel_run(2);
  // Rank 3 (tp 1, stage 1) opens step 1 in tp 0's trace.
  for (auto& s : run.files[3].spans)
    if (s.int_attr("dl.step") == 1 || s.parent_span_id == hex(0x5000 + 10 + 3, 16))
      s.trace_id = hex(0x100 + 10 + 0, 32);
  const auto found = violations(run);
  ASSERT_FALSE(found.empty());
  EXPECT_NE(
      found[0].find("step 1, rank 3: trace id " + hex(0x100 + 10, 32) + " differs from rank 1's"),
      std::string::npos)
      << found[0];
}

TEST(Check, ChildStartingBeforeItsParentOnOneRankFails) {
  lens::tools::Run run = tensor_parallel_run(1);
  for (auto& s : run.files[2].spans)
    if (s.name == "megatron.pp.recv_forward.linked") s.start_ns -= 5000;
  const auto found = violations(run);
  ASSERT_EQ(found.size(), 1u) << ::testing::PrintToString(found);
  EXPECT_NE(found[0].find("step 0, rank 2: starts 4 us before its parent megatron.train_step"),
            std::string::npos)
      << found[0];
}

}  // namespace
}  // namespace lens::tools
