// `lens check` over runs built in memory, where a trainer run cannot show
// the case: pipeline scope with tensor parallelism, where each (dp, tp)
// pipeline has a trace of its own.
#include "check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

namespace lens::analysis {
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
  lens::analysis::Run run = tensor_parallel_run(2);
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
  lens::analysis::Run run = tensor_parallel_run(1);
  for (auto& s : run.files[2].spans)
    if (s.name == "megatron.pp.recv_forward.linked") s.start_ns -= 5000;
  const auto found = violations(run);
  ASSERT_EQ(found.size(), 1u) << ::testing::PrintToString(found);
  EXPECT_NE(found[0].find("step 0, rank 2: starts 4 us before its parent megatron.train_step"),
            std::string::npos)
      << found[0];
}

// A span marked truncated is a finding that says why it was cut; one the
// stopping signal ended is counted, not found.
TEST(Check, ATruncatedSpanIsFoundSayingWhatEndedIt) {
  struct Row {
    std::vector<std::pair<std::string, std::string>> marks;
    std::string said;  // empty: no finding
  };
  const std::vector<Row> rows = {
      {{{"nemo.span.truncated", "true"}}, "was still open when its process shut down"},
      {{{"nemo.span.truncated", "true"}, {"lens.ended_by", "garbage collection"}},
       "was never ended: its Python object was collected as garbage"},
      {{{"nemo.span.truncated", "true"}, {"lens.stopped_by", "SIGTERM"}}, ""},
  };
  for (const Row& row : rows) {
    lens::analysis::Run run = tensor_parallel_run(1);
    for (auto& s : run.files[2].spans)
      if (s.name == "megatron.pp.recv_forward.linked")
        for (const auto& [key, value] : row.marks)
          s.attributes.set(key, value, key == "nemo.span.truncated" ? 'b' : 's');
    const auto found = violations(run);
    if (row.said.empty()) {
      EXPECT_EQ(found, std::vector<std::string>{}) << row.marks.size();
      continue;
    }
    ASSERT_EQ(found.size(), 1u) << ::testing::PrintToString(found);
    EXPECT_NE(found[0].find("megatron.pp.recv_forward.linked " + row.said), std::string::npos)
        << found[0];
  }
}

// World scope, pp = 2, two microbatches, as the trainer writes it: each
// rank's job span in one trace (rank 1's linking to rank 0's), each step
// span linking to its rank's job span, the schedule inside
// forward_backward, and rank 0's step span first (stage 1 opens its step
// 30 us later, when the broadcast arrives).
Run world_run(int steps, const std::string& host_of_rank_1 = "node-a") {
  Run run;
  const auto job_id = [](int rank) { return hex(0x7000 + rank, 16); };
  const std::string job_trace = hex(0xdead, 32);
  for (int rank = 0; rank < 2; ++rank) {
    RankFile f;
    f.path = "rank-" + std::to_string(rank) + ".otlp.jsonl";
    f.rank = rank;
    f.world_size = 2;
    f.run_id = "run";
    f.trace_scope = "world";
    f.resource = {{"host.name", rank == 0 ? "node-a" : host_of_rank_1},
                  {"lens.step_context", "broadcast"}};
    SpanRow job;
    job.rank = rank;
    job.trace_id = job_trace;
    job.span_id = job_id(rank);
    job.name = "megatron.job";
    job.start_ns = 1'000'000'000;
    job.end_ns = 2'000'000'000;
    job.attributes = {{"dl.pipeline_parallel.size", "2"}, {"dl.num_microbatches", "2"}};
    if (rank == 1) job.links.push_back({job_trace, job_id(0)});
    f.spans.push_back(job);
    run.files.push_back(f);
  }
  std::uint64_t next = 1;
  for (int step = 0; step < steps; ++step) {
    const std::string trace = hex(0x100 + step, 32);
    const std::string source_step = hex(0x5000 + step * 10, 16);
    for (int rank = 0; rank < 2; ++rank) {
      const std::int64_t t = 1'100'000'000 + step * 1'000'000 + rank * 30'000;
      auto span = [&](const std::string& name, std::string_view parent, std::int64_t start) {
        SpanRow s;
        s.rank = rank;
        s.trace_id = trace;
        s.span_id = hex(0x10000 + next++, 16);
        s.parent_span_id = parent;
        s.name = name;
        s.start_ns = start;
        s.end_ns = start + 10'000;
        return s;
      };
      SpanRow st = span("megatron.train_step", "", t);
      st.span_id = hex(0x5000 + step * 10 + rank, 16);
      st.end_ns = t + 900'000;
      st.attributes = {{"dl.step", std::to_string(step)},
                       {"dl.pipeline_parallel.rank", std::to_string(rank)}};
      st.links.push_back({hex(0xdead, 32), job_id(rank)});
      SpanRow fb = span("megatron.forward_backward", st.span_id, t + 1'000);
      fb.end_ns = t + 800'000;
      std::vector<SpanRow> schedule;
      for (int mb = 0; mb < 2; ++mb) {
        const std::int64_t at = t + 2'000 + mb * 100'000;
        if (rank == 1 && mb == 0) {  // stage 1 of 2: the pre-1F1B receive only
          SpanRow linked = span("megatron.pp.recv_forward.linked", fb.span_id, at);
          linked.attributes = {{"dl.pipeline_parallel.rank", "1"},
                               {"dl.microbatch_id", std::to_string(mb)}};
          linked.links.push_back({trace, source_step});
          schedule.push_back(linked);
        }
        SpanRow f = span("megatron.microbatch.forward", fb.span_id, at + 20'000);
        f.attributes = {{"dl.microbatch_id", std::to_string(mb)}};
        schedule.push_back(f);
      }
      for (auto& s : schedule) run.files[rank].spans.push_back(s);
      run.files[rank].spans.push_back(fb);
      run.files[rank].spans.push_back(st);
    }
  }
  return run;
}

TEST(Check, AWorldRunAsTheTrainerWritesItPasses) {
  EXPECT_EQ(violations(world_run(3)), std::vector<std::string>{});
}

TEST(Check, AStepOpeningBeforeTheSourcesFails) {
  lens::analysis::Run run = world_run(2);
  // Rank 0's step 1 opens 200 us after rank 1's (after its broadcast).
  for (auto& s : run.files[0].spans)
    if (s.trace_id == hex(0x100 + 1, 32)) s.start_ns += 230'000;
  const auto found = violations(run);
  ASSERT_EQ(found.size(), 2u) << ::testing::PrintToString(found);
  EXPECT_NE(found[0].find("step 1, rank 1: linked span starts 198 us before the span it links "
                          "to (megatron.train_step " +
                          hex(0x5000 + 10, 16) + " of rank 0)"),
            std::string::npos)
      << found[0];
  EXPECT_NE(found[1].find("step 1, rank 1: starts 200 us before the source's step span"),
            std::string::npos)
      << found[1];
}

TEST(Check, StartOrderIsWithinTheSameHostSlack) {
  lens::analysis::Run run = world_run(1);
  // Rank 1's step 40 us before rank 0's: within the 50 us of one host.
  for (auto& s : run.files[1].spans)
    if (s.name != "megatron.job") s.start_ns -= 70'000;
  EXPECT_EQ(violations(run), std::vector<std::string>{});
  for (auto& s : run.files[1].spans)
    if (s.name != "megatron.job") s.start_ns -= 20'000;  // now 60 us before
  EXPECT_EQ(violations(run).size(), 2u);  // its step span, and its linked span 58 us before
}

TEST(Check, StartOrderIsNotJudgedWhereNothingOrdersTheSteps) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"lens.step_context", "derived"}, {"lens.step_prefetch", "true"}}) {
    lens::analysis::Run run = world_run(1);
    for (auto& s : run.files[1].spans) s.start_ns -= 500'000;
    ASSERT_FALSE(violations(run).empty());
    for (auto& f : run.files) f.resource[key] = value;
    EXPECT_EQ(violations(run), std::vector<std::string>{}) << key;
    RunChecker checker;
    checker.add(run, build_view(run));
    EXPECT_NE(checker.start_order().find("not compared: the step contexts are derived or "
                                         "prefetched"),
              std::string::npos);
  }
}

TEST(Check, StartOrderOnTwoHostsNeedsClockSamples) {
  lens::analysis::Run run = world_run(1, "node-b");
  for (auto& s : run.files[1].spans) s.start_ns -= 500'000;  // a clock 500 us behind
  EXPECT_EQ(violations(run), std::vector<std::string>{});    // not compared
  const ClockAlignment none;
  const StartOrder unknown = StartOrder::of({"node-a", "node-b"}, {0, 1}, none);
  EXPECT_FALSE(unknown.judged);
  EXPECT_NE(unknown.how.find("on 2 hosts"), std::string::npos) << unknown.how;

  // A sample says rank 1's clock is 500 us behind, within 20 us: compared
  // on rank 0's clock, the run passes; 300 us further off, it fails.
  ClockAlignment clock;
  SpanRow sample;
  sample.rank = 1;
  sample.name = semconv::kClockSyncSpan;
  sample.attributes = {{"dl.rank", "1"},
                       {"lens.clock.local_time_ns", "1000000000"},
                       {"lens.clock.offset_ns", "500000"},
                       {"lens.clock.uncertainty_ns", "20000"}};
  ASSERT_TRUE(clock.add(sample));
  const StartOrder aligned = StartOrder::of({"node-a", "node-b"}, {0, 1}, clock);
  ASSERT_TRUE(aligned.judged);
  EXPECT_EQ(aligned.tolerance_ns, StartOrder::kSameHostSlackNs + 20'000);
  const auto check = [&](const lens::analysis::Run& r) {
    RunChecker checker(aligned);
    checker.add(r, build_view(r));
    lens::analysis::Run files;
    for (const auto& f : r.files) files.files.push_back(f.without_spans());
    return checker.finish(files, [](std::map<std::string, std::string>&) {});
  };
  EXPECT_TRUE(check(run).empty());
  for (auto& s : run.files[1].spans) s.start_ns -= 300'000;
  EXPECT_FALSE(check(run).empty());
}

TEST(Check, AScheduleSpanOutsideForwardBackwardFails) {
  lens::analysis::Run run = world_run(1);
  std::string step_span;
  for (const auto& s : run.files[1].spans)
    if (s.name == "megatron.train_step") step_span = s.span_id;
  for (auto& s : run.files[1].spans)
    if (s.name == "megatron.microbatch.forward") s.parent_span_id = step_span;
  const auto found = violations(run);
  ASSERT_EQ(found.size(), 1u) << ::testing::PrintToString(found);
  EXPECT_NE(found[0].find("step 0, rank 1: 2 schedule span(s) (microbatch, p2p, linked) not "
                          "inside megatron.forward_backward"),
            std::string::npos)
      << found[0];
}

TEST(Check, JobSpansInTwoTracesOrStepsNotLinkingToTheJobFail) {
  lens::analysis::Run run = world_run(2);
  for (auto& s : run.files[1].spans)
    if (s.name == "megatron.job") s.trace_id = hex(0xbeef, 32);
  for (auto& s : run.files[0].spans)
    if (s.int_attr("dl.step") == 1 && s.name == "megatron.train_step") s.links.clear();
  const auto found = violations(run);
  // Rank 1's job link now names a trace rank 0's job span is not in.
  std::vector<std::string> expected{
      "rank 0: 1 of 2 step spans do not link to this rank's megatron.job span",
      "rank 1: megatron.job is in trace " + hex(0xbeef, 32) + ", rank 0's in " + hex(0xdead, 32) +
          ": the job is not one trace"};
  for (const auto& e : expected)
    EXPECT_TRUE(std::any_of(found.begin(), found.end(),
                            [&](const std::string& f) { return f.find(e) != std::string::npos; }))
        << e << " in " << ::testing::PrintToString(found);
}

}  // namespace
}  // namespace lens::analysis
