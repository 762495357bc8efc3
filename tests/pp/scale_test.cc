// Scale features: trace scope (world / pipeline), export filters by parallel
// coordinates, the step budget. Ranks are threads over in-process
// communicators, each with its own Telemetry writing to memory.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "lens/error.h"
#include "lens/in_process_communicator.h"
#include "lens/startup_agreement.h"
#include "lens/step_trace.h"
#include "memory_telemetry.h"
#include "test_env.h"

namespace lens {
namespace {

using namespace std::chrono_literals;

TEST(ExportFilter, ParsesWhatItAcceptsAndNamesTheSettingOtherwise) {
  struct Row {
    const char* spec;
    std::string canonical;  // "" = error
  };
  const Row rows[] = {
      {"dp=0", "dp=0"},
      {"DP = 3", "dp=3"},
      {"dp=0,tp=0", "dp=0,tp=0"},
      {"tp=1, pp=2", "pp=2,tp=1"},
      {"pp=1073741824", "pp=1073741824"},
      {"", ""},
      {"dp", ""},
      {"dp=", ""},
      {"dp=-1", ""},
      {"dp=x", ""},
      {"xp=0", ""},
      {"dp=0,dp=1", ""},
      {"dp=0,", ""},
      {",dp=0", ""},
      {"dp=1073741825", ""},
      {"dp=0x1", ""},
      {"dp=1 2", ""},
  };
  for (const auto& row : rows) {
    if (row.canonical.empty()) {
      try {
        ExportFilter::parse(row.spec, "LENS_EXPORT_FILTER");
        ADD_FAILURE() << "accepted '" << row.spec << "'";
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("LENS_EXPORT_FILTER"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("accepted"), std::string::npos) << e.what();
      }
    } else {
      EXPECT_EQ(ExportFilter::parse(row.spec).to_string(), row.canonical) << row.spec;
    }
  }
}

TEST(ExportFilter, KeepsOnlyRanksMatchingEveryNamedCoordinate) {
  const ExportFilter f = ExportFilter::parse("dp=0,tp=0");
  EXPECT_TRUE(f.keeps({3, 0, 0}));
  EXPECT_FALSE(f.keeps({0, 1, 0}));
  EXPECT_FALSE(f.keeps({0, 0, 1}));
  EXPECT_FALSE(f.keeps({0, -1, 0})) << "an unknown coordinate does not match";
  EXPECT_TRUE(ExportFilter().keeps({-1, -1, -1}));
}

TEST(ScaleConfig, ScopeFilterAndBudgetComeFromTheEnvironment) {
  const Config c = resolve_config({}, testing::fake_env({{"MEGATRON_OTEL_ENABLED", "1"},
                                                         {"LENS_TRACE_SCOPE", "Pipeline"},
                                                         {"LENS_EXPORT_FILTER", "dp=0"},
                                                         {"LENS_STEP_BUDGET", "12"}}));
  EXPECT_EQ(c.trace_scope, TraceScope::kPipeline);
  EXPECT_EQ(c.export_filter.to_string(), "dp=0");
  EXPECT_EQ(c.step_budget_per_minute, 12u);
  for (auto [name, value] :
       {std::pair{"LENS_TRACE_SCOPE", "replica"}, std::pair{"LENS_STEP_BUDGET", "-1"},
        std::pair{"LENS_STEP_BUDGET", "1e3"}, std::pair{"LENS_EXPORT_FILTER", "rank=0"}}) {
    try {
      resolve_config({}, testing::fake_env({{"MEGATRON_OTEL_ENABLED", "1"}, {name, value}}));
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(AnchorStepContext, IsTheSameEverywhereAndDiffersPerStepAndRun) {
  const SpanContext a = anchor_step_context(42, "run", 7);
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a, anchor_step_context(42, "run", 7));
  EXPECT_NE(a.trace_id, anchor_step_context(42, "run", 8).trace_id);
  EXPECT_NE(a.trace_id, anchor_step_context(43, "run", 7).trace_id);
  EXPECT_NE(a.trace_id, anchor_step_context(42, "run2", 7).trace_id);
  std::set<std::string> ids;
  for (std::uint64_t step = 0; step < 1000; ++step)
    ids.insert(anchor_step_context(1, "r", step).trace_id.to_hex());
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(StepBudget, KeepsAtMostNPerMinuteAndRefills) {
  StepBudget budget(3);
  std::int64_t t = 1'000'000'000;
  EXPECT_TRUE(budget.decide(t));
  EXPECT_TRUE(budget.decide(t));
  EXPECT_TRUE(budget.decide(t));
  EXPECT_FALSE(budget.decide(t + 1'000'000));
  EXPECT_FALSE(budget.decide(t + 19'000'000'000));  // 2.85 tokens spent, 0.95 back
  EXPECT_TRUE(budget.decide(t + 21'000'000'000));   // one token per 20 s
  EXPECT_FALSE(budget.decide(t + 22'000'000'000));
  StepBudget unlimited(0);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(unlimited.decide(t));
}

// A pp x dp job on threads: one in-process group per pipeline replica for
// the step broadcast (pipeline scope) or one for the world (world scope).
struct Job {
  int pp = 2, dp = 2, steps = 3;
  TraceScope scope = TraceScope::kPipeline;
  std::string filter;
  std::map<std::string, std::string> env;
};

struct RankOut {
  int rank = 0, stage = 0, replica = 0;
  std::vector<SpanRecord> spans;
  std::vector<std::optional<StepCarrier>> carriers;
};

std::vector<RankOut> run_job(const Job& j) {
  const int world = j.pp * j.dp;
  InProcessGroup world_group(world);
  std::vector<std::unique_ptr<InProcessGroup>> pipelines;
  for (int d = 0; d < j.dp; ++d) pipelines.push_back(std::make_unique<InProcessGroup>(j.pp));
  std::vector<RankOut> out(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    // Megatron's order: rank = replica * pp + stage.
    const int stage = r % j.pp, replica = r / j.pp;
    std::unique_ptr<Communicator> comm =
        j.scope == TraceScope::kPipeline
            ? pipelines[static_cast<std::size_t>(replica)]->communicator(stage)
            : world_group.communicator(r);
    threads.emplace_back([&, r, stage, replica, comm = std::move(comm)] {
      TelemetryOptions o;
      o.rank = r;
      o.world_size = world;
      o.trace_scope = j.scope;
      o.coordinates = {stage, replica, 0};
      o.run_key = 0x5eed;
      if (!j.filter.empty()) o.export_filter = ExportFilter::parse(j.filter);
      testing::MemoryTelemetry mt(o, j.env);
      StepTraceOptions so;
      so.pipeline_parallel_size = j.pp;
      so.pipeline_rank = stage;
      StepTrace trace(mt.telemetry.get(), comm.get(), so);
      RankOut& mine = out[static_cast<std::size_t>(r)];
      mine.rank = r;
      mine.stage = stage;
      mine.replica = replica;
      for (int step = 0; step < j.steps; ++step) {
        StepScope scope(trace, static_cast<std::uint64_t>(step));
        mine.carriers.push_back(scope.carrier());
        Span link = trace.recv_forward_linked(0);
      }
      mine.spans = mt.spans();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

const SpanRecord* step_span(const RankOut& r, std::int64_t step) {
  for (const auto& s : r.spans) {
    if (s.name != "megatron.train_step") continue;
    const auto* v = find_attribute(s.attributes, "dl.step");
    if (v && std::get<std::int64_t>(*v) == step) return &s;
  }
  return nullptr;
}

TEST(TraceScope, PipelineScopeGivesEachReplicaItsOwnTraceLinkedToGlobalRankZero) {
  Job j;
  const auto out = run_job(j);
  for (int step = 0; step < j.steps; ++step) {
    const SpanRecord* global0 = step_span(out[0], step);
    ASSERT_NE(global0, nullptr);
    EXPECT_EQ(global0->context.trace_id, anchor_step_context(0x5eed, "test-run", step).trace_id);
    EXPECT_TRUE(global0->links.empty());
    std::set<std::string> replica_traces;
    for (int d = 0; d < j.dp; ++d) {
      const SpanRecord* first = step_span(out[static_cast<std::size_t>(d * j.pp)], step);
      ASSERT_NE(first, nullptr);
      replica_traces.insert(first->context.trace_id.to_hex());
      for (int p = 0; p < j.pp; ++p) {
        const RankOut& r = out[static_cast<std::size_t>(d * j.pp + p)];
        const SpanRecord* s = step_span(r, step);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->context.trace_id, first->context.trace_id)
            << "rank " << r.rank << " step " << step;
        if (d == 0) {
          EXPECT_TRUE(s->links.empty()) << "replica 0 is global rank 0's own trace";
        } else {
          ASSERT_EQ(s->links.size(), 1u) << "rank " << r.rank;
          EXPECT_EQ(s->links[0].context.trace_id, global0->context.trace_id);
          EXPECT_EQ(s->links[0].context.span_id, global0->context.span_id);
        }
      }
    }
    EXPECT_EQ(replica_traces.size(), static_cast<std::size_t>(j.dp)) << "replicas' traces differ";
  }
}

TEST(TraceScope, WorldScopeKeepsOneTracePerStepForEveryRank) {
  Job j;
  j.scope = TraceScope::kWorld;
  const auto out = run_job(j);
  for (int step = 0; step < j.steps; ++step) {
    const SpanRecord* global0 = step_span(out[0], step);
    ASSERT_NE(global0, nullptr);
    for (const auto& r : out) {
      const SpanRecord* s = step_span(r, step);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->context.trace_id, global0->context.trace_id);
      EXPECT_TRUE(s->links.empty());
    }
  }
}

TEST(ExportFilter, FilteredRanksRecordNothingButTakePartAndTheRestIsComplete) {
  Job j;
  j.filter = "dp=0";
  const auto out = run_job(j);
  for (const auto& r : out) {
    // Every rank took part in every step's broadcast.
    ASSERT_EQ(r.carriers.size(), static_cast<std::size_t>(j.steps));
    for (const auto& c : r.carriers) EXPECT_TRUE(c.has_value()) << "rank " << r.rank;
    if (r.replica != 0) {
      EXPECT_TRUE(r.spans.empty()) << "filtered rank " << r.rank << " recorded spans";
      continue;
    }
    for (int step = 0; step < j.steps; ++step) {
      const SpanRecord* s = step_span(r, step);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->context.trace_id, step_span(out[0], step)->context.trace_id);
    }
    if (r.stage > 0) {
      // Its linked spans point at a span that was exported (rank 0's).
      for (const auto& s : r.spans) {
        if (s.name != "megatron.pp.recv_forward.linked") continue;
        ASSERT_EQ(s.links.size(), 1u);
        bool found = false;
        for (int step = 0; step < j.steps; ++step)
          found |= s.links[0].context.span_id == step_span(out[0], step)->context.span_id;
        EXPECT_TRUE(found);
      }
    }
  }
}

TEST(StepBudgetInProtocol, TheSourcesDecisionReachesEveryRank) {
  Job j;
  j.scope = TraceScope::kWorld;
  j.dp = 1;
  j.steps = 5;
  j.env = {{"LENS_STEP_BUDGET", "2"}};
  const auto out = run_job(j);
  for (const auto& r : out) {
    ASSERT_EQ(r.carriers.size(), 5u);
    for (int step = 0; step < 5; ++step) {
      ASSERT_TRUE(r.carriers[static_cast<std::size_t>(step)]);
      EXPECT_EQ(r.carriers[static_cast<std::size_t>(step)]->context.sampled(), step < 2)
          << "rank " << r.rank << " step " << step;
    }
    std::set<std::int64_t> exported_steps;
    for (const auto& s : r.spans)
      if (s.name == "megatron.train_step")
        exported_steps.insert(std::get<std::int64_t>(*find_attribute(s.attributes, "dl.step")));
    EXPECT_EQ(exported_steps, (std::set<std::int64_t>{0, 1})) << "rank " << r.rank;
  }
}

TEST(StartupAgreementScale, MixedTraceScopesFailEveryRankAndTheRunKeyIsRankZeros) {
  for (bool mixed : {true, false}) {
    InProcessGroup group(3);
    std::vector<std::string> errors(3);
    std::vector<std::uint64_t> keys(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        auto comm = group.communicator(r);
        TelemetryOptions o;
        o.run_key = 100 + static_cast<std::uint64_t>(r);
        o.exporter = "none";
        std::map<std::string, std::string> env = {{"MEGATRON_OTEL_ENABLED", "1"}};
        if (mixed && r == 2) env["LENS_TRACE_SCOPE"] = "pipeline";
        try {
          auto t = create_distributed_telemetry(*comm, 3, o, testing::fake_env(env));
          keys[static_cast<std::size_t>(r)] = t->config().run_key;
        } catch (const ConfigError& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      if (mixed) {
        EXPECT_NE(errors[static_cast<std::size_t>(r)].find("LENS_TRACE_SCOPE"), std::string::npos)
            << "rank " << r << ": " << errors[static_cast<std::size_t>(r)];
      } else {
        EXPECT_EQ(errors[static_cast<std::size_t>(r)], "");
        EXPECT_EQ(keys[static_cast<std::size_t>(r)], 100u) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace lens
