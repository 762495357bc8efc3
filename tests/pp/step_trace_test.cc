// The step protocol over the in-process communicator: ranks are threads,
// each with its own Telemetry writing to memory.
#include "lens/step_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <set>
#include <thread>

#include "lens/carrier_slot.h"
#include "lens/error.h"
#include "lens/in_process_communicator.h"
#include "lens/linked_span.h"
#include "lens/pipeline_stats.h"
#include "lens/startup_agreement.h"
#include "memory_telemetry.h"

namespace lens {
namespace {

using namespace std::chrono_literals;

struct RankResult {
  std::vector<SpanRecord> spans;
  std::vector<std::optional<StepCarrier>> carriers;
};

struct RunOptions {
  int ranks = 4;
  int steps = 3;
  int microbatches = 2;
  std::string groups = "all";
  bool telemetry = true;
  bool prefetch = false;
  // Off here unless a test measures clocks: the protocol tests count
  // collectives.
  bool clock_sync = false;
  std::uint32_t clock_sync_steps = 0;
  std::vector<std::int64_t> clock_offsets_ns;  // the test aid, per rank
  std::vector<double> clock_drift_ppm;
  std::map<std::string, std::string> env;
};

// Runs `steps` steps on `ranks` threads. Non-first stages open a linked span
// around each of `microbatches` warmup receives.
std::vector<RankResult> run_pipeline(const RunOptions& o, std::uint64_t* collectives = nullptr) {
  InProcessGroup group(o.ranks);
  std::vector<RankResult> results(static_cast<std::size_t>(o.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions opts;
      opts.rank = r;
      opts.world_size = o.ranks;
      opts.span_groups = o.groups;
      opts.step_prefetch = o.prefetch;
      opts.clock_sync = o.clock_sync;
      opts.clock_sync_steps = o.clock_sync_steps;
      if (!o.clock_offsets_ns.empty())
        opts.test_clock_offset_ns = o.clock_offsets_ns[static_cast<std::size_t>(r)];
      if (!o.clock_drift_ppm.empty())
        opts.test_clock_drift_ppm = o.clock_drift_ppm[static_cast<std::size_t>(r)];
      std::optional<testing::MemoryTelemetry> mt;
      if (o.telemetry) mt.emplace(opts, o.env);
      StepTraceOptions so;
      so.pipeline_parallel_size = o.ranks;
      StepTrace trace(mt ? mt->telemetry.get() : nullptr, comm.get(), so);
      for (int step = 0; step < o.steps; ++step) {
        StepScope scope(trace, static_cast<std::uint64_t>(step));
        results[static_cast<std::size_t>(r)].carriers.push_back(scope.carrier());
        for (int mb = 0; mb < o.microbatches; ++mb) {
          Span link = trace.recv_forward_linked(mb);
          Span recv =
              trace.tracer().start_span(SpanGroup::kCommunication, "megatron.p2p.recv_forward");
        }
      }
      trace.finish();
      if (mt) results[static_cast<std::size_t>(r)].spans = mt->spans();
    });
  }
  for (auto& t : threads) t.join();
  if (collectives) *collectives = group.collectives();
  return results;
}

std::vector<const SpanRecord*> named(const RankResult& r, std::string_view name) {
  std::vector<const SpanRecord*> out;
  for (const auto& s : r.spans)
    if (s.name == name) out.push_back(&s);
  return out;
}

std::int64_t int_attr(const SpanRecord& s, std::string_view key) {
  const auto* v = find_attribute(s.attributes, key);
  return v ? std::get<std::int64_t>(*v) : -1;
}

class StepProtocol : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(StepProtocol, EveryRankSharesTheTraceAndLinksResolveToRankZeroStepSpan) {
  RunOptions o;
  o.ranks = std::get<0>(GetParam());
  o.prefetch = std::get<1>(GetParam());
  std::uint64_t collectives = 0;
  auto results = run_pipeline(o, &collectives);
  // Prefetching posts one broadcast ahead: the one after the last step.
  EXPECT_EQ(collectives,
            o.ranks > 1 ? static_cast<std::uint64_t>(o.steps + (o.prefetch ? 1 : 0)) : 0u);

  auto rank0_steps = named(results[0], "megatron.train_step");
  ASSERT_EQ(rank0_steps.size(), static_cast<std::size_t>(o.steps));
  std::set<TraceId> step_traces;
  for (int step = 0; step < o.steps; ++step) {
    const SpanRecord* root = nullptr;
    for (auto* s : rank0_steps)
      if (int_attr(*s, "dl.step") == step) root = s;
    ASSERT_NE(root, nullptr);
    step_traces.insert(root->context.trace_id);
    if (o.ranks > 1) {
      // Every rank decoded the same carrier, naming rank 0's step span.
      for (const auto& r : results) {
        const auto& c = r.carriers[static_cast<std::size_t>(step)];
        ASSERT_TRUE(c);
        EXPECT_EQ(c->context.trace_id, root->context.trace_id);
        EXPECT_EQ(c->context.span_id, root->context.span_id);
        EXPECT_EQ(c->step, static_cast<std::uint64_t>(step));
      }
    }
    for (int rank = 0; rank < o.ranks; ++rank) {
      const auto& res = results[static_cast<std::size_t>(rank)];
      const SpanRecord* mine = nullptr;
      for (auto* s : named(res, "megatron.train_step"))
        if (int_attr(*s, "dl.step") == step) mine = s;
      ASSERT_NE(mine, nullptr) << "rank " << rank << " step " << step;
      EXPECT_FALSE(mine->has_parent());
      EXPECT_EQ(int_attr(*mine, "dl.rank"), rank);
      if (o.ranks > 1) {
        EXPECT_EQ(mine->context.trace_id, root->context.trace_id);
      }
      auto linked = named(res, "megatron.pp.recv_forward.linked");
      std::size_t in_step = 0;
      for (auto* l : linked) {
        if (l->parent_span_id != mine->context.span_id) continue;
        ++in_step;
        EXPECT_EQ(l->context.trace_id, root->context.trace_id);
        ASSERT_EQ(l->links.size(), 1u);
        EXPECT_EQ(l->links[0].context.trace_id, root->context.trace_id);
        EXPECT_EQ(l->links[0].context.span_id, root->context.span_id);
        EXPECT_EQ(int_attr(*l, "dl.pipeline_parallel.rank"), rank);
      }
      const std::size_t expected = (rank == 0 || o.ranks == 1) ? 0u : 2u;
      EXPECT_EQ(in_step, expected) << "rank " << rank << " step " << step;
    }
  }
  EXPECT_EQ(step_traces.size(), static_cast<std::size_t>(o.steps));  // a new trace per step
}

INSTANTIATE_TEST_SUITE_P(Ranks, StepProtocol,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks" +
                                  (std::get<1>(info.param) ? "Prefetch" : "");
                         });

TEST(StepProtocolGates, DefaultGroupsKeepTheBroadcastAndDropLinkedSpans) {
  RunOptions o;
  o.groups = "default";
  std::uint64_t collectives = 0;
  auto results = run_pipeline(o, &collectives);
  EXPECT_EQ(collectives, 3u);  // ids stay shared
  for (const auto& r : results) {
    EXPECT_TRUE(named(r, "megatron.pp.recv_forward.linked").empty());
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(r.carriers[static_cast<std::size_t>(step)]);
      EXPECT_EQ(r.carriers[static_cast<std::size_t>(step)]->context.trace_id,
                results[0].carriers[static_cast<std::size_t>(step)]->context.trace_id);
    }
  }
}

TEST(StepProtocolGates, NoTelemetryMeansNoCollectiveAndNoSpans) {
  RunOptions o;
  o.telemetry = false;
  std::uint64_t collectives = 1;
  auto results = run_pipeline(o, &collectives);
  EXPECT_EQ(collectives, 0u);
  for (const auto& r : results) {
    EXPECT_TRUE(r.spans.empty());
    for (const auto& c : r.carriers) EXPECT_FALSE(c);
  }
}

TEST(StepProtocolGates, CommunicationWithoutStepGroupStillJoinsTheSharedTrace) {
  RunOptions o;
  o.groups = "communication";
  auto results = run_pipeline(o);
  for (int rank = 1; rank < o.ranks; ++rank) {
    auto linked = named(results[static_cast<std::size_t>(rank)], "megatron.pp.recv_forward.linked");
    ASSERT_EQ(linked.size(), 6u);
    for (auto* l : linked) {
      ASSERT_EQ(l->links.size(), 1u);
      EXPECT_EQ(l->context.trace_id, l->links[0].context.trace_id);
    }
  }
}

TEST(StepProtocolSampling, EveryRankKeepsOrDropsTheSameSteps) {
  RunOptions o;
  o.steps = 40;
  o.microbatches = 1;
  o.env = {{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "0.5"}};
  auto results = run_pipeline(o);
  std::set<std::int64_t> kept_by_rank0;
  for (auto* s : named(results[0], "megatron.train_step"))
    kept_by_rank0.insert(int_attr(*s, "dl.step"));
  EXPECT_GT(kept_by_rank0.size(), 5u);
  EXPECT_LT(kept_by_rank0.size(), 35u);
  for (const auto& r : results) {
    std::set<std::int64_t> kept;
    for (auto* s : named(r, "megatron.train_step")) kept.insert(int_attr(*s, "dl.step"));
    EXPECT_EQ(kept, kept_by_rank0);
  }
}

TEST(StepProtocolPrefetch, AStepOutOfSequenceUsesThePostedContextAndIsCounted) {
  InProcessGroup group(2);
  const std::uint64_t before = pipeline_stats().step_mismatches;
  std::vector<std::vector<SpanRecord>> spans(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions opts;
      opts.rank = r;
      opts.step_prefetch = true;
      testing::MemoryTelemetry mt(opts);
      StepTraceOptions so;
      so.pipeline_parallel_size = 2;
      StepTrace trace(mt.telemetry.get(), comm.get(), so);
      for (std::uint64_t step : {0u, 1u, 7u}) StepScope scope(trace, step);
      spans[static_cast<std::size_t>(r)] = mt.spans();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(pipeline_stats().step_mismatches - before, 2u)
      << "step 7 arrived where 2 was posted, on both ranks";
  for (std::int64_t step : {0, 1, 7}) {
    std::set<TraceId> traces;
    for (const auto& rank_spans : spans)
      for (const auto& s : rank_spans)
        if (s.name == "megatron.train_step" && int_attr(s, "dl.step") == step)
          traces.insert(s.context.trace_id);
    EXPECT_EQ(traces.size(), 1u) << "step " << step << " is one trace on both ranks";
  }
}

TEST(LinkedSpan, InvalidRemoteGivesSpanWithoutLinkAndIsCounted) {
  testing::MemoryTelemetry mt;
  reset_pipeline_stats();
  Tracer tracer = mt.telemetry->tracer();
  {
    Span a = create_linked_span(tracer, "no-remote", std::optional<StepCarrier>());
    Span b =
        create_linked_span(tracer, "invalid-remote", std::optional<SpanContext>(SpanContext()));
    EXPECT_TRUE(a.recording());
    EXPECT_TRUE(b.recording());
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 2u);
  for (const auto& s : spans) EXPECT_TRUE(s.links.empty());
  EXPECT_EQ(pipeline_stats().linked_spans_without_link, 2u);
}

TEST(LinkedSpan, ABracedListAndAnAttributeVectorGiveTheSameSpan) {
  testing::MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  SpanContext remote;
  remote.trace_id = TraceId::from_words(7, 9);
  remote.span_id = SpanId::from_word(11);
  remote.trace_flags = TraceFlags::kSampled;
  remote.remote = true;
  const std::string long_key(40, 'k');  // past the short-string buffer
  {
    // Every alternative of a value, and a key given twice (the last wins);
    // the same entries once as the list and once copied into a vector.
    const std::initializer_list<BorrowedAttribute> list = {
        {"dl.microbatch_id", std::int64_t{3}},
        {"b", true},
        {"d", 0.5},
        {long_key, std::string("forward")},
        {"ints", std::vector<std::int64_t>{1, 2}},
        {"strings", std::vector<std::string>{"x", "y"}},
        {"dl.microbatch_id", std::int64_t{4}}};
    Attributes vector;
    for (const auto& a : list) vector.push_back({std::string(a.key), a.value});
    Span listed =
        create_linked_span(tracer, "listed", std::optional<SpanContext>(remote), list);
    Span vectored = create_linked_span(tracer, "vectored", std::optional<SpanContext>(remote),
                                       std::move(vector));
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 2u);
  const SpanRecord& listed = spans[0].name == "listed" ? spans[0] : spans[1];
  const SpanRecord& vectored = spans[0].name == "listed" ? spans[1] : spans[0];
  EXPECT_EQ(listed.attributes, vectored.attributes);
  ASSERT_EQ(listed.attributes.size(), 6u);
  EXPECT_EQ(*find_attribute(listed.attributes, "dl.microbatch_id"), AttributeValue(std::int64_t{4}));
  EXPECT_EQ(*find_attribute(listed.attributes, long_key), AttributeValue(std::string("forward")));
  ASSERT_EQ(listed.links.size(), 1u);
  EXPECT_EQ(listed.links[0].context.span_id, remote.span_id);
  EXPECT_EQ(listed.links, vectored.links);
  EXPECT_EQ(listed.context.trace_id, remote.trace_id);
}

TEST(LinkedSpan, DisabledCommunicationGroupCreatesNothing) {
  TelemetryOptions opts;
  opts.span_groups = "per_step";
  testing::MemoryTelemetry mt(opts);
  mt.telemetry->set_span_groups(SpanGroupSet::parse("step"));
  Span s = create_linked_span(mt.telemetry->tracer(), "x", get_pp_trace_carrier());
  EXPECT_FALSE(s.recording());
}

// Ends step 0 of a one-stage StepTrace by an exception when `throws`, after
// noting `stop_signal` (0: none) on the telemetry; returns the step span.
SpanRecord step_span_ended(int stop_signal, bool throws) {
  testing::MemoryTelemetry mt;
  StepTraceOptions so;
  so.pipeline_parallel_size = 1;
  StepTrace trace(mt.telemetry.get(), nullptr, so);
  if (stop_signal != 0) mt.telemetry->note_stop_signal(stop_signal);
  try {
    StepScope scope(trace, 0);
    if (throws) throw CommError("the peer stopped first");
  } catch (const CommError&) {
  }
  auto steps = mt.spans();
  EXPECT_EQ(steps.size(), 1u);
  return steps.empty() ? SpanRecord() : steps.front();
}

TEST(StepStoppedBySignal, AStepAnExceptionEndsWhileStoppingIsMarkedWithTheSignal) {
  const SpanRecord step = step_span_ended(SIGTERM, true);
  const auto* truncated = find_attribute(step.attributes, "nemo.span.truncated");
  ASSERT_NE(truncated, nullptr);
  EXPECT_TRUE(std::get<bool>(*truncated));
  const auto* by = find_attribute(step.attributes, "lens.stopped_by");
  ASSERT_NE(by, nullptr);
  EXPECT_EQ(std::get<std::string>(*by), "SIGTERM");
}

TEST(StepStoppedBySignal, AFailureWithoutASignalOrAStepThatEndsIsNotMarked) {
  for (const auto& [signo, throws] : {std::pair{0, true}, std::pair{SIGTERM, false}}) {
    const SpanRecord step = step_span_ended(signo, throws);
    EXPECT_EQ(step.name, "megatron.train_step");
    EXPECT_EQ(find_attribute(step.attributes, "nemo.span.truncated"), nullptr) << signo;
    EXPECT_EQ(find_attribute(step.attributes, "lens.stopped_by"), nullptr) << signo;
  }
}

TEST(StepTraceSettings, ThePipelineSizeIsRequired) {
  InProcessGroup group(1);
  auto comm = group.communicator(0);
  try {
    StepTrace trace(nullptr, comm.get(), {});
    ADD_FAILURE() << "a StepTrace without a PP size";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("StepTraceOptions::pipeline_parallel_size is unset"),
              std::string::npos)
        << e.what();
  }
  StepTraceOptions zero_timeout;
  zero_timeout.pipeline_parallel_size = 1;
  zero_timeout.timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(StepTrace(nullptr, comm.get(), zero_timeout), ConfigError);
}

TEST(StepTraceSettings, PipelineScopeIsRefusedWithoutAnAgreedRunKeyOrAGlobalRank) {
  InProcessGroup group(2);
  auto comm = group.communicator(0);
  StepTraceOptions so;
  so.pipeline_parallel_size = 2;
  so.trace_scope = TraceScope::kPipeline;
  TelemetryOptions unagreed;  // each process would draw its own key
  unagreed.rank = 0;
  testing::MemoryTelemetry a(unagreed);
  try {
    StepTrace trace(a.telemetry.get(), comm.get(), so);
    ADD_FAILURE() << "pipeline scope without an agreed run key";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the run key agreed at start-up"), std::string::npos)
        << e.what();
  }
  TelemetryOptions rankless;
  rankless.run_key = 7;
  testing::MemoryTelemetry b(rankless);
  try {
    StepTrace trace(b.telemetry.get(), comm.get(), so);
    ADD_FAILURE() << "pipeline scope without a global rank";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs this rank's global rank"), std::string::npos)
        << e.what();
  }
  TelemetryOptions ready;
  ready.run_key = 7;
  ready.rank = 0;
  testing::MemoryTelemetry c(ready);
  EXPECT_NO_THROW(StepTrace(c.telemetry.get(), comm.get(), so));
}

}  // namespace
}  // namespace lens

namespace lens {
namespace {

bool has_attr(const SpanRecord& s, std::string_view key) {
  return find_attribute(s.attributes, key) != nullptr;
}

TEST(ClockSync, SamplesAtTheFirstStepEveryNStepsAndAtFinishFindTheInjectedSkew) {
  RunOptions o;
  o.steps = 5;
  o.clock_sync = true;
  o.clock_sync_steps = 2;
  o.clock_offsets_ns = {2'000'000, -3'500'000, 6'000'000, 800'000};
  o.clock_drift_ppm = {10, -40, 30, 0};
  std::uint64_t collectives = 0;
  auto results = run_pipeline(o, &collectives);
  // Samples before steps 0, 2, 4 and at finish, point to point: the only
  // collectives are the steps' broadcasts.
  EXPECT_EQ(collectives, 5u);
  std::vector<std::vector<const SpanRecord*>> samples;
  for (const auto& r : results) samples.push_back(named(r, "lens.clock_sync"));
  for (std::size_t rank = 0; rank < results.size(); ++rank) {
    const auto& mine = samples[rank];
    ASSERT_EQ(mine.size(), 4u) << "rank " << rank;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const SpanRecord& s = *mine[i];
      EXPECT_TRUE(s.context.sampled());
      EXPECT_FALSE(s.has_parent());
      // One trace per sample, shared by every rank.
      EXPECT_EQ(s.context.trace_id, samples[0][i]->context.trace_id);
      EXPECT_EQ(int_attr(s, "dl.rank"), static_cast<std::int64_t>(rank));
      EXPECT_EQ(int_attr(s, "lens.clock.reference_rank"), 0);
      EXPECT_EQ(int_attr(s, "lens.clock.exchanges"), 8);
      if (i < 3) {
        EXPECT_EQ(int_attr(s, "dl.step"), static_cast<std::int64_t>(2 * i));
      }
      // Samples milliseconds apart do not pin down a drift.
      EXPECT_FALSE(has_attr(s, "lens.clock.drift_ppm"));
      // The injected truth: rank 0's skew minus this rank's, the drift
      // counted from the run's start (the telemetries start within
      // milliseconds of each other, which moves the truth by nanoseconds).
      const double elapsed_s = static_cast<double>(int_attr(s, "lens.clock.local_time_ns") -
                                                   int_attr(*mine[0], "lens.clock.local_time_ns")) /
                               1e9;
      const double truth = static_cast<double>(o.clock_offsets_ns[0] - o.clock_offsets_ns[rank]) +
                           (o.clock_drift_ppm[0] - o.clock_drift_ppm[rank]) * 1e3 * elapsed_s;
      const std::int64_t offset = int_attr(s, "lens.clock.offset_ns");
      const std::int64_t bound =
          std::max<std::int64_t>(50'000, int_attr(s, "lens.clock.uncertainty_ns"));
      EXPECT_LE(std::abs(static_cast<double>(offset) - truth), static_cast<double>(bound))
          << "rank " << rank << " sample " << i << ": measured " << offset << " ns, injected "
          << truth << " ns";
    }
  }
}

TEST(ClockSync, OffMeansNoSampleAndNoExtraCollective) {
  RunOptions o;
  o.clock_sync = false;
  std::uint64_t collectives = 0;
  auto results = run_pipeline(o, &collectives);
  EXPECT_EQ(collectives, 3u);
  for (const auto& r : results) EXPECT_TRUE(named(r, "lens.clock_sync").empty());
}

TEST(ClockSync, SamplesAreRecordedWhateverTheSpanGroups) {
  RunOptions o;
  o.clock_sync = true;
  o.groups = "communication";
  auto results = run_pipeline(o);
  for (const auto& r : results) EXPECT_EQ(named(r, "lens.clock_sync").size(), 2u);
}

TEST(ClockSync, PipelineScopeWithoutAWorldCommunicatorMeasuresNothing) {
  InProcessGroup group(2);
  std::vector<std::thread> threads;
  std::vector<int> measured(2, -1);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions opts;
      opts.rank = r;
      opts.run_key = 7;
      opts.trace_scope = TraceScope::kPipeline;
      testing::MemoryTelemetry mt(opts);
      StepTraceOptions so;
      so.pipeline_parallel_size = 2;
      StepTrace without(mt.telemetry.get(), comm.get(), so);
      so.job_communicator = comm.get();
      StepTrace with(mt.telemetry.get(), comm.get(), so);
      measured[static_cast<std::size_t>(r)] =
          (without.measures_clocks() ? 1 : 0) + (with.measures_clocks() ? 2 : 0);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(measured, (std::vector<int>{2, 2}));
}

}  // namespace
}  // namespace lens
