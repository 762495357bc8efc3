// Derived step contexts (LENS_STEP_CONTEXT=derived): no collective per
// step, the same traces and links as the broadcast, the step check that
// catches a rank at another step, and the step budget every deciding rank
// spends alike. Ranks are threads over in-process groups.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "lens/error.h"
#include "lens/in_process_communicator.h"
#include "lens/pipeline_stats.h"
#include "lens/step_check.h"
#include "lens/step_context.h"
#include "lens/step_trace.h"
#include "memory_telemetry.h"

namespace lens {
namespace {

// A pp x dp job: a world group (the job communicator; the step
// communicator in world scope) and one group per pipeline replica.
struct Job {
  int pp = 2, dp = 2, steps = 5;
  TraceScope scope = TraceScope::kWorld;
  StepContextMode mode = StepContextMode::kDerived;
  std::uint32_t verify_steps = 2;
  bool job_communicator = true;
  int skewed_rank = -1;  // passes step + 1
  std::map<std::string, std::string> env;
};

struct RankOut {
  int rank = 0, stage = 0, replica = 0;
  std::vector<SpanRecord> spans;
  std::vector<std::optional<StepCarrier>> carriers;
  std::string error;
};

struct JobOut {
  std::vector<RankOut> ranks;
  std::uint64_t world_collectives = 0;
  std::uint64_t pipeline_collectives = 0;
};

JobOut run_job(const Job& j) {
  const int world = j.pp * j.dp;
  InProcessGroup world_group(world);
  std::vector<std::unique_ptr<InProcessGroup>> pipelines;
  for (int d = 0; d < j.dp; ++d) pipelines.push_back(std::make_unique<InProcessGroup>(j.pp));
  JobOut out;
  out.ranks.resize(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    // Megatron's order with TP 1: rank = replica * pp + stage here.
    const int stage = r % j.pp, replica = r / j.pp;
    threads.emplace_back([&, r, stage, replica] {
      auto world_comm = world_group.communicator(r);
      auto pipeline_comm = pipelines[static_cast<std::size_t>(replica)]->communicator(stage);
      RankOut& mine = out.ranks[static_cast<std::size_t>(r)];
      mine.rank = r;
      mine.stage = stage;
      mine.replica = replica;
      TelemetryOptions o;
      o.rank = r;
      o.world_size = world;
      o.trace_scope = j.scope;
      o.step_context = j.mode;
      o.step_verify_steps = j.verify_steps;
      o.clock_sync = false;
      o.coordinates = {stage, replica, 0};
      o.run_key = 0x5eed;
      testing::MemoryTelemetry mt(o, j.env);
      StepTraceOptions so;
      so.pipeline_parallel_size = j.pp;
      so.pipeline_rank = stage;
      if (j.job_communicator) so.job_communicator = world_comm.get();
      try {
        StepTrace trace(mt.telemetry.get(),
                        j.scope == TraceScope::kPipeline ? pipeline_comm.get() : world_comm.get(),
                        so);
        for (int step = 0; step < j.steps; ++step) {
          const int skew = r == j.skewed_rank ? 1 : 0;
          StepScope scope(trace, static_cast<std::uint64_t>(step + skew));
          mine.carriers.push_back(scope.carrier());
          Span link = trace.recv_forward_linked(0);
        }
        trace.finish();
      } catch (const std::exception& e) {
        mine.error = e.what();
      }
      mine.spans = mt.spans();
    });
  }
  for (auto& t : threads) t.join();
  out.world_collectives = world_group.collectives();
  for (const auto& p : pipelines) out.pipeline_collectives += p->collectives();
  return out;
}

std::int64_t int_attr(const SpanRecord& s, std::string_view key) {
  const auto* v = find_attribute(s.attributes, key);
  return v ? std::get<std::int64_t>(*v) : -1;
}

const SpanRecord* named_in_step(const RankOut& r, std::string_view name, std::int64_t step,
                                const SpanRecord* step_span = nullptr) {
  for (const auto& s : r.spans) {
    if (s.name != name) continue;
    if (step_span ? s.parent_span_id == step_span->context.span_id : int_attr(s, "dl.step") == step)
      return &s;
  }
  return nullptr;
}

class DerivedSteps : public ::testing::TestWithParam<TraceScope> {};

// The traces, the step spans' parents, the linked spans' links and the
// links to global rank 0's step are those of the broadcast protocol; no
// broadcast ran, and the only collectives are the step checks.
TEST_P(DerivedSteps, SameTracesAndLinksAsTheBroadcastWithoutAPerStepCollective) {
  Job j;
  j.scope = GetParam();
  const std::uint64_t broadcasts_before = pipeline_stats().broadcasts;
  const std::uint64_t checks_before = pipeline_stats().step_checks;
  const JobOut out = run_job(j);
  const int world = j.pp * j.dp;
  EXPECT_EQ(pipeline_stats().broadcasts, broadcasts_before);
  // Checks after opened steps 0, 2 and 4, over the world group, on every
  // rank; in pipeline scope each pipeline's one broadcast of its source's
  // global rank when its StepTraces are made, and none per step.
  EXPECT_EQ(out.world_collectives, 3u);
  EXPECT_EQ(out.pipeline_collectives,
            j.scope == TraceScope::kPipeline ? static_cast<std::size_t>(j.dp) : 0u);
  EXPECT_EQ(pipeline_stats().step_checks - checks_before, 3u * static_cast<std::uint64_t>(world));
  for (int step = 0; step < j.steps; ++step) {
    const SpanRecord* global0 = named_in_step(out.ranks[0], "megatron.train_step", step);
    ASSERT_NE(global0, nullptr);
    EXPECT_EQ(global0->context.trace_id, anchor_step_context(0x5eed, "test-run", step).trace_id);
    EXPECT_EQ(global0->context.span_id, anchor_step_context(0x5eed, "test-run", step).span_id);
    std::set<TraceId> replica_traces;
    for (const RankOut& r : out.ranks) {
      ASSERT_EQ(r.error, "") << "rank " << r.rank;
      const RankOut& source = out.ranks[static_cast<std::size_t>(
          j.scope == TraceScope::kPipeline ? r.replica * j.pp : 0)];
      const SpanRecord* source_step = named_in_step(source, "megatron.train_step", step);
      const SpanRecord* s = named_in_step(r, "megatron.train_step", step);
      ASSERT_NE(s, nullptr) << "rank " << r.rank << " step " << step;
      ASSERT_NE(source_step, nullptr);
      replica_traces.insert(s->context.trace_id);
      EXPECT_EQ(s->context.trace_id, source_step->context.trace_id) << "rank " << r.rank;
      EXPECT_FALSE(s->has_parent());
      if (j.scope == TraceScope::kPipeline && r.replica != 0) {
        ASSERT_EQ(s->links.size(), 1u) << "rank " << r.rank;
        EXPECT_EQ(s->links[0].context.span_id, global0->context.span_id);
      } else {
        EXPECT_TRUE(s->links.empty()) << "rank " << r.rank;
      }
      const SpanRecord* linked = named_in_step(r, "megatron.pp.recv_forward.linked", step, s);
      if (r.stage == 0) {
        EXPECT_EQ(linked, nullptr);
        continue;
      }
      ASSERT_NE(linked, nullptr) << "rank " << r.rank << " step " << step;
      ASSERT_EQ(linked->links.size(), 1u);
      EXPECT_EQ(linked->links[0].context.trace_id, source_step->context.trace_id);
      EXPECT_EQ(linked->links[0].context.span_id, source_step->context.span_id);
    }
    EXPECT_EQ(replica_traces.size(),
              j.scope == TraceScope::kPipeline ? static_cast<std::size_t>(j.dp) : 1u);
  }
}

TEST_P(DerivedSteps, ARankAtAnotherStepFailsEveryRankAtTheNextCheck) {
  Job j;
  j.scope = GetParam();
  j.steps = 6;
  j.verify_steps = 3;
  j.skewed_rank = 3;
  const JobOut out = run_job(j);  // returns: nobody hangs
  for (const RankOut& r : out.ranks) {
    EXPECT_NE(r.error.find("the ranks are not at the same step: rank(s) 0,1,2 at step 0; "
                           "rank(s) 3 at step 1"),
              std::string::npos)
        << "rank " << r.rank << ": " << r.error;
    // The first check (after the first opened step) stopped it.
    EXPECT_EQ(r.carriers.size(), 0u) << "rank " << r.rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Scopes, DerivedSteps,
                         ::testing::Values(TraceScope::kWorld, TraceScope::kPipeline),
                         [](const auto& info) {
                           return std::string(trace_scope_name(info.param));
                         });

TEST(DerivedStepsCheck, AMismatchAfterTheFirstCheckIsCaughtWithinNSteps) {
  // A rank that skips a step number midway: its record differs at the next
  // check, at most N opened steps later.
  InProcessGroup group(2);
  std::vector<std::string> errors(2);
  std::vector<int> opened(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions o;
      o.rank = r;
      o.step_context = StepContextMode::kDerived;
      o.step_verify_steps = 4;
      o.clock_sync = false;
      o.run_key = 7;
      testing::MemoryTelemetry mt(o);
      StepTraceOptions so;
      so.pipeline_parallel_size = 2;
      try {
        StepTrace trace(mt.telemetry.get(), comm.get(), so);
        for (std::uint64_t step = 0; step < 12; ++step) {
          StepScope scope(trace, r == 1 && step >= 5 ? step + 1 : step);
          ++opened[static_cast<std::size_t>(r)];
        }
      } catch (const StepCheckError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank(s) 0 at step 8; rank(s) 1 at step 9"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
    EXPECT_EQ(opened[static_cast<std::size_t>(r)], 8);  // checks at opened steps 0, 4, 8
  }
}

TEST(DerivedStepsSampling, EveryRankAndReplicaKeepsTheSameStepsWithoutAnyExchange) {
  Job j;
  j.scope = TraceScope::kPipeline;
  j.steps = 40;
  j.verify_steps = 0;  // no check: the decisions are alike anyway
  j.env = {{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "0.5"}};
  const JobOut out = run_job(j);
  // Only each pipeline's start-up broadcast of its source's global rank.
  EXPECT_EQ(out.world_collectives, 0u);
  EXPECT_EQ(out.pipeline_collectives, static_cast<std::size_t>(j.dp));
  std::set<std::int64_t> kept0;
  for (const auto& s : out.ranks[0].spans)
    if (s.name == "megatron.train_step") kept0.insert(int_attr(s, "dl.step"));
  EXPECT_GT(kept0.size(), 5u);
  EXPECT_LT(kept0.size(), 35u);
  for (const RankOut& r : out.ranks) {
    std::set<std::int64_t> kept;
    for (const auto& s : r.spans)
      if (s.name == "megatron.train_step") kept.insert(int_attr(s, "dl.step"));
    EXPECT_EQ(kept, kept0) << "rank " << r.rank;
  }
}

// The step budget where more than one rank decides: every rank (derived) or
// every replica's source (pipeline scope, broadcast) decides each step alike.
class SharedBudget : public ::testing::TestWithParam<std::tuple<StepContextMode, TraceScope>> {};

TEST_P(SharedBudget, EveryDecidingRankKeepsTheSameSteps) {
  Job j;
  j.mode = std::get<0>(GetParam());
  j.scope = std::get<1>(GetParam());
  j.steps = 8;
  j.verify_steps = 3;
  j.env = {{"LENS_STEP_BUDGET", "2"}};
  const JobOut out = run_job(j);
  for (const RankOut& r : out.ranks) {
    ASSERT_EQ(r.error, "") << "rank " << r.rank;
    ASSERT_EQ(r.carriers.size(), 8u);
    std::set<std::int64_t> kept;
    for (int step = 0; step < 8; ++step) {
      ASSERT_TRUE(r.carriers[static_cast<std::size_t>(step)]);
      if (r.carriers[static_cast<std::size_t>(step)]->context.sampled()) kept.insert(step);
    }
    // The bucket starts with 2 tokens; steps microseconds apart earn no more.
    EXPECT_EQ(kept, (std::set<std::int64_t>{0, 1})) << "rank " << r.rank;
  }
  // The budget's rate is renewed over the world group at opened steps 0, 3, 6.
  EXPECT_GE(out.world_collectives, 3u);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SharedBudget,
    ::testing::Values(std::make_tuple(StepContextMode::kDerived, TraceScope::kWorld),
                      std::make_tuple(StepContextMode::kDerived, TraceScope::kPipeline),
                      std::make_tuple(StepContextMode::kBroadcast, TraceScope::kPipeline)),
    [](const auto& info) {
      return std::string(step_context_mode_name(std::get<0>(info.param))) + "_" +
             std::string(trace_scope_name(std::get<1>(info.param)));
    });

TEST(DerivedIds, AGridOfStepsAndPipelinesHasNoDuplicateContextParallelismIncluded) {
  // 1,000 steps x 256 pipelines in pipeline scope (TP 8 x CP 2 x DP 16 in
  // Megatron's order: a pipeline's first global rank is tp + 8 cp + 16 dp,
  // so two pipelines with the same (dp, tp) and another cp differ): 256,000
  // pipelines' steps, each its own trace id and source span id, and each
  // half of the trace ids distinct too (the two halves come from two
  // states, so neither half repeats where the other does not).
  std::set<std::pair<std::uint64_t, std::uint64_t>> traces;
  std::set<std::uint64_t> highs, lows;
  std::set<std::string> spans;
  std::size_t made = 0;
  TelemetryOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.trace_scope = TraceScope::kPipeline;
  o.step_context = StepContextMode::kDerived;
  o.clock_sync = false;
  o.run_key = 0x5eed;
  testing::MemoryTelemetry mt(o);
  for (int dp = 0; dp < 16; ++dp)
    for (int cp = 0; cp < 2; ++cp)
      for (int tp = 0; tp < 8; ++tp) {
        const int source = tp + 8 * cp + 16 * dp;
        StepBudget budget;
        for (std::uint64_t step = 0; step < 1000; ++step) {
          const StepCarrier c =
              derive_step_context(*mt.telemetry, TraceScope::kPipeline, step, budget, source);
          const auto& b = c.context.trace_id.bytes();
          std::uint64_t hi = 0, lo = 0;
          for (int i = 0; i < 8; ++i) {
            hi = hi << 8 | b[static_cast<std::size_t>(i)];
            lo = lo << 8 | b[static_cast<std::size_t>(8 + i)];
          }
          traces.insert({hi, lo});
          highs.insert(hi);
          lows.insert(lo);
          spans.insert(c.context.span_id.to_hex());
          ++made;
        }
      }
  EXPECT_EQ(made, 256'000u);
  EXPECT_EQ(traces.size(), made);
  EXPECT_EQ(highs.size(), made);
  EXPECT_EQ(lows.size(), made);
  EXPECT_EQ(spans.size(), made);
  // The pipeline holding global rank 0 takes the anchor; without its source
  // a pipeline-scope derivation is refused, naming what it needs.
  StepBudget budget;
  EXPECT_EQ(
      derive_step_context(*mt.telemetry, TraceScope::kPipeline, 3, budget, 0).context.trace_id,
      anchor_step_context(0x5eed, mt.telemetry->config().run_id, 3).trace_id);
  try {
    derive_step_context(*mt.telemetry, TraceScope::kPipeline, 3, budget);
    ADD_FAILURE() << "derived without the pipeline's source";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the global rank of the pipeline's first stage"),
              std::string::npos)
        << e.what();
  }
}

TEST(StepBudgetShared, DecidesBySharedRateAloneWhateverEachRanksClock) {
  StepBudget a(2, /*shared=*/true), b(2, /*shared=*/true);
  StepBudget own(2);
  std::vector<bool> da, db;
  for (int step = 0; step < 12; ++step) {
    if (step == 4) {
      // A token every 3 steps, given to both.
      a.set_shared_rate(StepBudget::kMicro / 3 + 1);
      b.set_shared_rate(StepBudget::kMicro / 3 + 1);
    }
    // Two ranks whose clocks say very different things.
    da.push_back(a.decide(std::int64_t{step} * 1'000'000'000));
    db.push_back(b.decide(std::int64_t{step} * 7));
  }
  EXPECT_EQ(da, db);
  EXPECT_EQ(da, (std::vector<bool>{true, true, false, false, false, false, true, false, false, true,
                                   false, false}));
  // The source's own bucket refills from its clock: a token per 30 s here.
  EXPECT_TRUE(own.decide(0));
  EXPECT_TRUE(own.decide(1));
  EXPECT_FALSE(own.decide(2));
  EXPECT_TRUE(own.decide(30'000'000'002));
  // A step the sampler drops spends nothing.
  StepBudget c(1, true);
  EXPECT_FALSE(c.decide(0, false));
  EXPECT_TRUE(c.decide(0, true));
}

TEST(StepBudgetShared, RateForSpendsTheBudgetOverAMinute) {
  // 600 steps a minute, 60 kept a minute: a tenth of a token per step.
  EXPECT_EQ(StepBudget::rate_for(60, 600, 60'000'000'000), StepBudget::kMicro / 10);
  EXPECT_EQ(StepBudget::rate_for(60, 0, 1), 0u);
  EXPECT_EQ(StepBudget::rate_for(0, 10, 1), 0u);
  // Slower than the budget: at most a whole bucket per step.
  EXPECT_EQ(StepBudget::rate_for(2, 1, 3'600'000'000'000), 2 * StepBudget::kMicro);
}

TEST(DerivedStepsSettings, RefusedWhereTheyCannotWork) {
  InProcessGroup group(2);
  auto comm = group.communicator(0);
  auto expect_refused = [&](TelemetryOptions o, std::map<std::string, std::string> env,
                            StepTraceOptions so, const std::string& says) {
    o.rank = 0;
    o.run_key = 1;
    o.clock_sync = false;
    testing::MemoryTelemetry mt(o, env);
    so.pipeline_parallel_size = 2;
    try {
      StepTrace trace(mt.telemetry.get(), comm.get(), so);
      ADD_FAILURE() << "not refused: " << says;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  TelemetryOptions derived;
  derived.step_context = StepContextMode::kDerived;
  TelemetryOptions no_checks = derived;
  no_checks.step_verify_steps = 0;
  expect_refused(no_checks, {{"LENS_STEP_BUDGET", "5"}}, {},
                 "needs LENS_STEP_VERIFY_STEPS above 0");
  TelemetryOptions pipeline;
  pipeline.trace_scope = TraceScope::kPipeline;
  pipeline.coordinates = {0, 0, 0};
  expect_refused(pipeline, {{"LENS_STEP_BUDGET", "5"}}, {},
                 "needs StepTraceOptions::job_communicator");
}

TEST(StepCheckRecords, ATableOfWhatTheComparisonRefuses) {
  auto records = [](std::vector<StepCheckRecord> rs) {
    std::vector<std::uint8_t> out;
    for (const auto& r : rs) {
      const auto e = encode_step_check(r);
      out.insert(out.end(), e.begin(), e.end());
    }
    return out;
  };
  const TraceId a = anchor_step_context(1, "r", 4).trace_id;
  const TraceId b = anchor_step_context(2, "r", 4).trace_id;
  StepCheckRecord ok{4, -1, a, true, 77};
  // Round trip.
  const auto back = compare_step_checks(0, records({ok, ok}));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1], ok);
  struct Case {
    std::string name;
    std::vector<std::uint8_t> bytes;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({"empty", {}, "0 bytes of step check records"});
  auto torn = records({ok, ok});
  torn.pop_back();
  cases.push_back({"torn", torn, "95 bytes of step check records"});
  auto foreign = records({ok, ok});
  foreign[kStepCheckRecordBytes] = 'X';
  cases.push_back({"foreign", foreign, "rank(s) 1 sent something that is not a lens step check"});
  auto version = records({ok, ok});
  version[4] = 9;
  cases.push_back({"version", version, "rank(s) 0 sent something that is not"});
  StepCheckRecord later = ok;
  later.step = 5;
  cases.push_back(
      {"steps", records({ok, later, ok}), "rank(s) 0,2 at step 4; rank(s) 1 at step 5"});
  StepCheckRecord other_trace = ok;
  other_trace.trace_id = b;
  cases.push_back({"trace", records({ok, other_trace}), "two ranks of one pipeline derived"});
  StepCheckRecord dropped = ok;
  dropped.sampled = false;
  cases.push_back({"sampled", records({ok, dropped}), "decided step 4's sampling differently"});
  for (const Case& c : cases) {
    try {
      compare_step_checks(3, c.bytes);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const StepCheckError& e) {
      EXPECT_NE(std::string(e.what()).find("step check failed on rank 3"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos)
          << c.name << ": " << e.what();
    }
  }
  // Other pipelines derive other traces; a record without a trace (the
  // broadcast mode's) is not compared.
  StepCheckRecord replica1 = other_trace;
  replica1.pipeline = 4;
  StepCheckRecord replica0 = ok;
  replica0.pipeline = 0;
  StepCheckRecord none = ok;
  none.trace_id = TraceId();
  none.sampled = false;
  EXPECT_NO_THROW(compare_step_checks(0, records({replica0, replica1, none})));
}

}  // namespace
}  // namespace lens
