// End to end: runs build/bin/lens-train in small configurations and checks,
// from the files it writes, that every stage of a step shares one trace and
// that the linked spans are exactly where the reference page puts them.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "check.h"
#include "clock_alignment.h"
#include "pipeline_view.h"
#include "run_reader.h"
#include "trace_files.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// This process's runs, under the temporary directory.
fs::path process_dir() {
  return fs::temp_directory_path() / ("lens-e2e-" + std::to_string(getpid()));
}

// A process whose tests passed leaves nothing behind; a failure's runs stay,
// to be read.
class ProcessDirRemovedWhenPassed : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    if (::testing::UnitTest::GetInstance()->Passed()) fs::remove_all(process_dir(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kProcessDir =
    ::testing::AddGlobalTestEnvironment(new ProcessDirRemovedWhenPassed);

struct TrainerRun {
  int pp = 2, dp = 1, microbatches = 2, steps = 3, layers = 4;
  int tp = 1;
  std::string env;    // extra "K=V " assignments
  std::string flags;  // extra trainer flags
};

struct RunOutput {
  int exit_code = -1;
  std::string output;
  std::vector<json> reports;  // by rank
  fs::path trace_dir;
  std::string run_id;
};

// The reference page's count of linked spans per step on stage s.
int expected_linked(int pp, int stage, int microbatches) {
  if (stage == 0) return 0;
  const int warmup = std::min(pp - stage - 1, microbatches);
  return warmup + (microbatches > warmup ? 1 : 0);
}

RunOutput run_trainer(const TrainerRun& r, const std::string& name) {
  RunOutput out;
  const fs::path base = process_dir() / name;
  fs::remove_all(base);
  fs::create_directories(base / "reports");
  out.trace_dir = base / "traces";
  const std::string command =
      "env " + r.env + " " LENS_TRAIN_BIN " --pp " + std::to_string(r.pp) + " --dp " +
      std::to_string(r.dp) + " --tp " + std::to_string(r.tp) + " --microbatches " +
      std::to_string(r.microbatches) + " --steps " + std::to_string(r.steps) + " --layers " +
      std::to_string(r.layers) + " --hidden 32 --microbatch-size 32 --lr 0.01 --timeout-s 60" +
      (r.flags.find("--trace-dir") == std::string::npos ? " --trace-dir " + out.trace_dir.string()
                                                        : "") +
      " --report-dir " + (base / "reports").string() + " " + r.flags + " > " +
      (base / "output.txt").string() + " 2>&1";
  const int status = std::system(command.c_str());
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream in(base / "output.txt");
  out.output.assign(std::istreambuf_iterator<char>(in), {});
  for (int rank = 0; rank < r.pp * r.dp * r.tp; ++rank) {
    std::ifstream rep(base / "reports" / ("rank-" + std::to_string(rank) + ".json"));
    if (!rep) break;
    out.reports.push_back(json::parse(rep));
  }
  if (!out.reports.empty()) out.run_id = out.reports[0]["run_id"];
  return out;
}

// Linked spans per step on each rank, from the trace files.
std::map<int, int> linked_per_step_by_rank(const std::vector<lens::testing::ExportedSpan>& spans,
                                           int steps) {
  std::map<int, int> count;
  for (const auto& s : spans)
    if (s.name == "megatron.pp.recv_forward.linked") ++count[std::stoi(s.resource.at("dl.rank"))];
  for (auto& [rank, n] : count) n /= steps;
  return count;
}

void expect_loss_decreases(const RunOutput& out, int pp) {
  for (const auto& rep : out.reports) {
    if (rep["stage"] != pp - 1) continue;
    const auto& steps = rep["steps"];
    ASSERT_FALSE(steps.front()["loss"].is_null());
    EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>())
        << "rank " << rep["rank"];
  }
}

class Correlation : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Correlation, EveryStepIsOneTraceWithLinksWhereTheReferenceSays) {
  const auto [pp, microbatches, dp] = GetParam();
  TrainerRun r;
  r.pp = pp;
  r.dp = dp;
  r.microbatches = microbatches;
  r.flags = "--otel-enabled=true --otel-span-groups per_step,microbatch";
  const std::string name =
      "p" + std::to_string(pp) + "m" + std::to_string(microbatches) + "d" + std::to_string(dp);
  RunOutput out = run_trainer(r, name);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  ASSERT_EQ(out.reports.size(), static_cast<std::size_t>(pp * dp)) << out.output;
  EXPECT_NE(out.output.find("loss"), std::string::npos) << out.output;

  auto spans = lens::testing::read_run(out.trace_dir / out.run_id);
  lens::testing::CorrelationExpectation expect;
  expect.ranks = pp * dp;
  expect.steps = r.steps;
  expect.linked_per_step = [&, pp = pp, m = microbatches](int stage) {
    return expected_linked(pp, stage, m);
  };
  for (const auto& problem : lens::testing::check_correlation(spans, expect))
    ADD_FAILURE() << problem;

  // Per rank: no linked span on stage 0; p2p and microbatch spans are there.
  std::set<std::string> names;
  for (const auto& s : spans) {
    names.insert(s.name);
    if (s.name == "megatron.pp.recv_forward.linked") {
      EXPECT_NE(s.int_attr("dl.pipeline_parallel.rank"), 0);
    }
    EXPECT_EQ(s.resource.at("service.name"), "megatron-lm");
    EXPECT_EQ(s.resource.at("nemo.run.id"), out.run_id);
  }
  for (const char* expected :
       {"megatron.train_step", "megatron.microbatch.forward", "megatron.microbatch.backward",
        "megatron.optimizer.step", "megatron.p2p.send_forward", "megatron.p2p.recv_backward"})
    EXPECT_TRUE(names.count(expected)) << expected;
  expect_loss_decreases(out, pp);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Correlation,
                         ::testing::Values(std::make_tuple(2, 1, 1), std::make_tuple(2, 4, 1),
                                           std::make_tuple(4, 2, 1), std::make_tuple(4, 8, 1),
                                           std::make_tuple(2, 3, 2)),
                         [](const auto& info) {
                           return "pp" + std::to_string(std::get<0>(info.param)) + "_m" +
                                  std::to_string(std::get<1>(info.param)) + "_dp" +
                                  std::to_string(std::get<2>(info.param));
                         });

// The step prefetch (the next step's broadcast posted early over the world
// group) keeps every invariant, with data parallelism too.
TEST(TrainerGates, StepPrefetchKeepsEveryStepOneTrace) {
  TrainerRun r;
  r.pp = 2;
  r.dp = 2;
  r.microbatches = 3;
  r.steps = 4;
  r.flags = "--otel-enabled=true --otel-span-groups per_step,microbatch --step-prefetch=true";
  RunOutput out = run_trainer(r, "prefetch");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  auto spans = lens::testing::read_run(out.trace_dir / out.run_id);
  lens::testing::CorrelationExpectation expect;
  expect.ranks = 4;
  expect.steps = r.steps;
  expect.linked_per_step = [&](int stage) { return expected_linked(2, stage, 3); };
  for (const auto& problem : lens::testing::check_correlation(spans, expect))
    ADD_FAILURE() << problem;
  for (const auto& rep : out.reports)
    EXPECT_EQ(rep["broadcasts"], r.steps) << "rank " << rep["rank"];
}

TEST(TrainerGates, LinkedSpanCountDoesNotGrowWithMicrobatches) {
  TrainerRun a;
  a.pp = 4;
  a.microbatches = 4;
  a.steps = 2;
  a.flags = "--otel-enabled=true --otel-span-groups per_step";
  TrainerRun b = a;
  b.microbatches = 12;
  RunOutput ra = run_trainer(a, "m4"), rb = run_trainer(b, "m12");
  ASSERT_EQ(ra.exit_code, 0) << ra.output;
  ASSERT_EQ(rb.exit_code, 0) << rb.output;
  auto ca = linked_per_step_by_rank(lens::testing::read_run(ra.trace_dir / ra.run_id), 2);
  auto cb = linked_per_step_by_rank(lens::testing::read_run(rb.trace_dir / rb.run_id), 2);
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(ca, (std::map<int, int>{{1, 3}, {2, 2}, {3, 1}}));
}

TEST(TrainerGates, DefaultGroupsDropLinkedSpansButIdsStayShared) {
  TrainerRun r;
  r.env = "MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=default";
  r.pp = 4;
  RunOutput out = run_trainer(r, "default-groups");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  auto spans = lens::testing::read_run(out.trace_dir / out.run_id);
  for (const auto& s : spans) EXPECT_NE(s.name, "megatron.pp.recv_forward.linked");
  ASSERT_EQ(out.reports.size(), 4u);
  for (const auto& rep : out.reports) {
    EXPECT_EQ(rep["broadcasts"], r.steps);
    for (int step = 0; step < r.steps; ++step) {
      const std::string id = rep["steps"][step]["trace_id"];
      EXPECT_EQ(id.size(), 32u);
      EXPECT_EQ(id, out.reports[0]["steps"][step]["trace_id"].get<std::string>());
    }
  }
}

TEST(TrainerGates, DisabledMeansNoSpansAndNoBroadcast) {
  TrainerRun r;
  r.env = "MEGATRON_OTEL_ENABLED=0";
  RunOutput out = run_trainer(r, "disabled");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_FALSE(fs::exists(out.trace_dir));
  for (const auto& rep : out.reports) {
    EXPECT_EQ(rep["broadcasts"], 0);
    EXPECT_EQ(rep["tracing"], false);
  }
  EXPECT_NE(out.output.find("tracing       off"), std::string::npos) << out.output;
  expect_loss_decreases(out, r.pp);
}

TEST(TrainerGates, SingleStageMeansNoBroadcast) {
  TrainerRun r;
  r.pp = 1;
  r.flags = "--otel-enabled=true --otel-span-groups per_step";
  RunOutput out = run_trainer(r, "pp1");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  ASSERT_EQ(out.reports.size(), 1u);
  EXPECT_EQ(out.reports[0]["broadcasts"], 0);
  auto spans = lens::testing::read_run(out.trace_dir / out.run_id);
  int steps = 0;
  for (const auto& s : spans) steps += s.name == "megatron.train_step";
  EXPECT_EQ(steps, r.steps);
  expect_loss_decreases(out, 1);
}

TEST(TrainerGates, CliOverridesEnvironment) {
  TrainerRun r;
  r.env = "MEGATRON_OTEL_ENABLED=0 OTEL_SERVICE_NAME=from-env";
  r.flags = "--otel-enabled=true --otel-service-name from-cli";
  RunOutput out = run_trainer(r, "cli-override");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  auto spans = lens::testing::read_run(out.trace_dir / out.run_id);
  ASSERT_FALSE(spans.empty());
  EXPECT_EQ(spans[0].resource.at("service.name"), "from-cli");
}

TEST(TrainerErrors, BadFlagNamesTheFlag) {
  TrainerRun r;
  r.flags = "--otel-span-groups nonsense --otel-enabled=true";
  RunOutput out = run_trainer(r, "bad-groups");
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.output.find("unknown span group 'nonsense'"), std::string::npos) << out.output;
}

TEST(TrainerErrors, TestAidAndFaultInjectionFlagsOutOfRangeAreRefusedNamingTheFlag) {
  // (flags, what the message must say); the default run is --pp 2.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--test-clock-offsets-us 0,1,2", "--test-clock-offsets-us has 3 values for 2 ranks"},
      {"--test-clock-drift-ppm 5", "--test-clock-drift-ppm has 1 values for 2 ranks"},
      {"--slow-stage 2", "--slow-stage 2 is not a stage of --pp 2"},
      {"--slow-stage 0 --slow-factor 0.5", "--slow-factor"},
      {"--slow-stage 0 --slow-replica 1", "--slow-replica 1 is not a replica of --dp 1"},
      {"--microbatch-jitter 0.5", "--microbatch-jitter"},
      {"--microbatch-jitter 101", "--microbatch-jitter"},
      {"--metrics-port 65535", "--metrics-port 65535 leaves no port for rank 1"},
      {"--metrics-port 70000", "--metrics-port"},
      {"--live-every -1", "--live-every"},
      {"--metrics-job", "--metrics-job is set without --metrics-port"},
      {"--slow-stage 0 --slow-steps 3,x", "--slow-steps"},
      {"--slow-stage 0 --slow-steps -1", "--slow-steps"},
      {"--test-simulated-device 0.5", "--test-simulated-device"},
      {"--slow-stage 0", "--slow-stage or --slow-rank is set but nothing slows it"},
      {"--slow-ms 5", "need what to slow; accepted: with --slow-stage S or --slow-rank R"},
      {"--slow-stage 0 --slow-ms -1", "--slow-ms"}};
  int i = 0;
  for (const auto& [flags, message] : cases) {
    TrainerRun r;
    r.flags = flags;
    RunOutput out = run_trainer(r, "bad-aid-" + std::to_string(i++));
    EXPECT_EQ(out.exit_code, 2) << flags << ": " << out.output;
    EXPECT_NE(out.output.find(message), std::string::npos) << flags << ": " << out.output;
  }
}

}  // namespace

namespace {

// Scale: pipeline scope and export filters on a real 2 x 2 run.
std::map<int, const lens::analysis::SpanRow*> step_spans_of(const lens::analysis::Run& run,
                                                            std::int64_t step) {
  std::map<int, const lens::analysis::SpanRow*> out;  // by rank
  for (const auto& f : run.files)
    for (const auto& s : f.spans)
      if (s.name == "megatron.train_step" && s.int_attr("dl.step") == step) out[f.rank] = &s;
  return out;
}

// A 2 x 2 run with all groups traced and the scale setting `env`.
TrainerRun scaled_run(const std::string& env) {
  TrainerRun r;
  r.dp = 2;
  r.env = env;
  r.flags = "--otel-enabled=true --otel-span-groups all";
  return r;
}

void expect_lens_check_passes(const lens::analysis::Run& run) {
  for (const auto& v : lens::analysis::check_run(run, lens::analysis::build_view(run)))
    ADD_FAILURE() << lens::analysis::format_violation(v);
}

TEST(TrainerScale, PipelineScopeGivesEachReplicaATraceLinkedToRankZero) {
  const TrainerRun r = scaled_run("LENS_TRACE_SCOPE=pipeline");
  RunOutput out = run_trainer(r, "scope-pipeline");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const lens::analysis::Run run = lens::analysis::read_run(out.trace_dir / out.run_id);
  ASSERT_EQ(run.files.size(), 4u);
  std::map<int, int> replica_of;
  for (const auto& f : run.files) {
    EXPECT_EQ(f.trace_scope, "pipeline");
    replica_of[f.rank] = f.replica;
  }
  expect_lens_check_passes(run);
  std::string job_trace;
  for (const auto& f : run.files)
    for (const auto& s : f.spans)
      if (s.name == "megatron.job") job_trace = s.trace_id;
  ASSERT_FALSE(job_trace.empty());
  for (int step = 0; step < r.steps; ++step) {
    const auto spans = step_spans_of(run, step);
    ASSERT_EQ(spans.size(), 4u) << "step " << step;
    const auto* global0 = spans.at(0);
    std::map<int, std::set<lens::analysis::HexId>> traces;  // replica -> trace ids
    for (const auto& [rank, s] : spans) {
      traces[replica_of[rank]].insert(s->trace_id);
      // Besides its link to its rank's job span (in the job's trace).
      std::vector<std::pair<lens::analysis::HexId, lens::analysis::HexId>> to_steps;
      for (const auto& l : s->links)
        if (l.first != job_trace) to_steps.push_back(l);
      EXPECT_EQ(to_steps.size() + 1, s->links.size()) << "rank " << rank << ": a link to the job";
      if (replica_of[rank] == 0) {
        EXPECT_TRUE(to_steps.empty()) << "rank " << rank;
      } else {
        ASSERT_EQ(to_steps.size(), 1u) << "rank " << rank;
        EXPECT_EQ(to_steps[0], std::make_pair(global0->trace_id, global0->span_id))
            << "rank " << rank;
      }
    }
    ASSERT_EQ(traces.size(), 2u);
    EXPECT_EQ(traces[0].size(), 1u) << "replica 0's ranks share one trace";
    EXPECT_EQ(traces[1].size(), 1u) << "replica 1's ranks share one trace";
    EXPECT_NE(*traces[0].begin(), *traces[1].begin()) << "the replicas' traces differ";
  }
  // The check notices a replica that lost its link to rank 0's step span.
  lens::analysis::Run broken = run;
  for (auto& f : broken.files)
    if (f.replica == 1)
      for (auto& s : f.spans)
        if (s.name == "megatron.train_step") s.links.clear();
  const auto found = lens::analysis::check_run(broken, lens::analysis::build_view(broken));
  ASSERT_FALSE(found.empty());
  EXPECT_NE(lens::analysis::format_violation(found[0]).find("does not link to rank 0's step span"),
            std::string::npos)
      << lens::analysis::format_violation(found[0]);
}

// LENS_STEP_CONTEXT=derived on a real 2 x 2 run, in both scopes: no
// trace-context broadcast at all (counted), one step check (at the first
// step, LENS_STEP_VERIFY_STEPS being 100), and a run lens check passes as it
// passes the broadcast's.
class TrainerDerived : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainerDerived, NoBroadcastAndLensCheckPassesWithDataParallel) {
  TrainerRun r = scaled_run("LENS_TRACE_SCOPE=" + GetParam());
  r.flags += " --step-context derived";
  RunOutput out = run_trainer(r, "derived-" + GetParam());
  ASSERT_EQ(out.exit_code, 0) << out.output;
  ASSERT_EQ(out.reports.size(), 4u);
  for (const auto& rep : out.reports) {
    EXPECT_EQ(rep["broadcasts"], 0) << "rank " << rep["rank"];
    EXPECT_EQ(rep["derived_steps"], r.steps) << "rank " << rep["rank"];
    EXPECT_EQ(rep["step_checks"], 1) << "rank " << rep["rank"];
  }
  EXPECT_NE(out.output.find("0 trace-context broadcasts per rank"), std::string::npos)
      << out.output;
  EXPECT_NE(out.output.find("step context  derived on every rank for 3 steps, 1 step checks"),
            std::string::npos)
      << out.output;
  const lens::analysis::Run run = lens::analysis::read_run(out.trace_dir / out.run_id);
  ASSERT_EQ(run.files.size(), 4u);
  expect_lens_check_passes(run);
  std::map<int, int> replica_of;
  for (const auto& f : run.files) replica_of[f.rank] = f.replica;
  for (int step = 0; step < r.steps; ++step) {
    const auto spans = step_spans_of(run, step);
    ASSERT_EQ(spans.size(), 4u) << "step " << step;
    std::map<int, std::set<lens::analysis::HexId>> traces;  // replica -> trace ids
    for (const auto& [rank, s] : spans) traces[replica_of[rank]].insert(s->trace_id);
    EXPECT_EQ(traces[0].size(), 1u);
    EXPECT_EQ(traces[1].size(), 1u);
    if (GetParam() == "world")
      EXPECT_EQ(*traces[0].begin(), *traces[1].begin()) << "one trace per step";
    else
      EXPECT_NE(*traces[0].begin(), *traces[1].begin()) << "a trace per replica";
  }
}

INSTANTIATE_TEST_SUITE_P(Scopes, TrainerDerived, ::testing::Values("world", "pipeline"));

TEST(TrainerDerivedCheck, ARankAtAnotherStepFailsEveryRankNamingTheSteps) {
  TrainerRun r;
  r.steps = 4;
  r.env = "LENS_STEP_VERIFY_STEPS=2";
  r.flags = "--otel-enabled=true --step-context derived --test-step-skew-rank 1";
  RunOutput out = run_trainer(r, "derived-skew");
  EXPECT_EQ(out.exit_code, 1) << out.output;
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(out.output.find("lens: step check failed on rank " + std::to_string(rank) +
                              ": the ranks are not at the same step: rank(s) 0 at step 0; "
                              "rank(s) 1 at step 1"),
              std::string::npos)
        << out.output;
}

TEST(TrainerScale, ExportFilterLeavesRanksOutButNotTheirCollectives) {
  const TrainerRun r = scaled_run("LENS_EXPORT_FILTER=dp=0");
  RunOutput out = run_trainer(r, "filter-dp0");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  ASSERT_EQ(out.reports.size(), 4u);
  for (const auto& rep : out.reports) {
    EXPECT_EQ(rep["broadcasts"], r.steps) << "rank " << rep["rank"] << " skipped a collective";
    if (rep["replica"] != 0) {
      EXPECT_EQ(rep["spans_produced"], 0) << "rank " << rep["rank"];
      EXPECT_EQ(rep["trace_file"], "") << "rank " << rep["rank"];
    }
  }
  const lens::analysis::Run run = lens::analysis::read_run(out.trace_dir / out.run_id);
  std::set<int> ranks;
  for (const auto& f : run.files) {
    ranks.insert(f.rank);
    EXPECT_EQ(f.replica, 0);
    EXPECT_EQ(f.export_filter, "dp=0");
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 2})) << "only replica 0 (ranks 0 and 2) writes files";
  expect_lens_check_passes(run);
  std::size_t linked = 0;
  for (const auto& f : run.files)
    for (const auto& s : f.spans) linked += s.name == "megatron.pp.recv_forward.linked";
  EXPECT_EQ(linked, static_cast<std::size_t>(expected_linked(2, 1, r.microbatches) * r.steps));
}

}  // namespace

namespace {

// Children of `pid`, oldest first (the launcher starts rank 0 first).
std::vector<int> children_of(int pid) {
  std::vector<int> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) out.push_back(std::stoi(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> read_lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Starts a long run, kills one rank with SIGKILL once training is under way,
// and returns the launcher's output after it exits (or after 90 s).
struct KillOutcome {
  bool launcher_exited = false;
  std::chrono::steady_clock::duration after_kill{};
  std::string output;
  int failure_events = 0;  // lens.failure events in the survivors' trace files
};

KillOutcome kill_rank_mid_run(int victim, const std::string& name,
                              const std::string& shape = "--pp 2 --dp 1") {
  KillOutcome k;
  const fs::path base =
      fs::temp_directory_path() / ("lens-e2e-kill-" + std::to_string(getpid()) + name);
  fs::remove_all(base);
  fs::create_directories(base);
  const fs::path out = base / "output.txt";
  FILE* launcher = popen((std::string(LENS_TRAIN_BIN) + " " + shape +
                          " --microbatches 4 --steps 100000 --layers 2 --hidden 16"
                          " --microbatch-size 4 --timeout-s 20 --otel-enabled=true "
                          "--otel-span-groups per_step --trace-dir " +
                          (base / "traces").string() + " > " + out.string() + " 2>&1 & echo $!")
                             .c_str(),
                         "r");
  if (launcher == nullptr) return k;
  int pid = 0;
  if (fscanf(launcher, "%d", &pid) != 1) pid = 0;
  pclose(launcher);
  std::vector<int> ranks;
  for (int i = 0; i < 200 && ranks.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ranks = children_of(pid);
  }
  if (ranks.size() < 2) return k;
  // Training is under way once the ranks have agreed at start-up and
  // created their trace files (slow on a loaded machine), plus a moment.
  auto trace_files = [&] {
    int n = 0;
    if (fs::exists(base / "traces"))
      for (const auto& e : fs::recursive_directory_iterator(base / "traces"))
        n += e.is_regular_file();
    return n;
  };
  for (int i = 0; i < 600 && trace_files() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto start = std::chrono::steady_clock::now();
  kill(ranks[static_cast<std::size_t>(victim)], SIGKILL);
  // The launcher is not our child (the shell started it): poll for its exit.
  while (kill(pid, 0) == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  k.after_kill = std::chrono::steady_clock::now() - start;
  k.launcher_exited = kill(pid, 0) != 0;
  std::ifstream in(out);
  k.output.assign(std::istreambuf_iterator<char>(in), {});
  for (int r : ranks) kill(r, SIGKILL);  // in case something is left
  if (fs::exists(base / "traces"))
    for (const auto& e : fs::recursive_directory_iterator(base / "traces"))
      if (e.is_regular_file())
        for (const auto& line : read_lines_of(e.path()))
          for (auto at = line.find("\"lens.failure\""); at != std::string::npos;
               at = line.find("\"lens.failure\"", at + 1))
            ++k.failure_events;
  fs::remove_all(base);
  return k;
}

// A free TCP port on 127.0.0.1 (bound, read, released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Four ranks started by hand with the variables torchrun's env:// rendezvous
// and srun scripts set: rank 0 serves the store (agent = false, as 4
// stages), or a store the "agent" (here a Python TCPStore) already serves
// (agent = true, as 2 stages x 2 TP ranks).
void launch_four_ranks_by_hand(bool agent) {
  const fs::path base = process_dir() / (agent ? "by-hand-agent" : "by-hand");
  fs::remove_all(base);
  fs::create_directories(base);
  const int port = free_port();
  std::string script = "set -u\n";
  if (agent) {
    // The agent's store, up before the ranks and gone after them.
    script +=
        "/usr/bin/python3 -c 'import time, datetime, torch.distributed as d; "
        "s = d.TCPStore(\"127.0.0.1\", " +
        std::to_string(port) +
        ", 5, True, datetime.timedelta(seconds=60)); time.sleep(120)' &\n"
        "agent=$!\nsleep 2\n";
  }
  for (int r = 0; r < 4; ++r)
    script += "RANK=" + std::to_string(r) +
              " WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
              (agent ? " TORCHELASTIC_USE_AGENT_STORE=True" : "") + " " LENS_TRAIN_BIN +
              std::string(agent ? " --pp 2 --tp 2" : " --pp 4") +
              " --microbatches 4 --steps 2 --layers 4 --hidden 16 --microbatch-size 4"
              " --timeout-s 60 --otel-enabled=true --otel-span-groups per_step --trace-dir " +
              (base / "traces").string() + " > " + (base / ("rank-" + std::to_string(r))).string() +
              ".txt 2>&1 &\npid" + std::to_string(r) + "=$!\n";
  script += "failed=0\nfor p in $pid0 $pid1 $pid2 $pid3; do wait $p || failed=1; done\n";
  if (agent) script += "kill $agent 2>/dev/null; wait $agent 2>/dev/null\n";
  script += "exit $failed\n";
  std::ofstream(base / "launch.sh") << script;
  const int status = std::system(("timeout 180 bash " + (base / "launch.sh").string()).c_str());
  std::string logs;
  for (int r = 0; r < 4; ++r) {
    std::ifstream in(base / ("rank-" + std::to_string(r) + ".txt"));
    logs += "rank " + std::to_string(r) + ": " +
            std::string(std::istreambuf_iterator<char>(in), {}) + "\n";
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << logs;
  fs::path run_dir;
  for (const auto& e : fs::directory_iterator(base / "traces")) run_dir = e.path();
  const lens::analysis::Run run = lens::analysis::read_run(run_dir);
  EXPECT_EQ(run.files.size(), 4u);
  for (const auto& f : run.files) EXPECT_EQ(f.tensor_rank, agent ? f.rank % 2 : 0) << f.rank;
  expect_lens_check_passes(run);
}

// The interleaved schedule (--virtual-stages): the same arithmetic in
// another order, so every step's loss equals the non-interleaved run's.
class TrainerInterleaved : public ::testing::TestWithParam<int> {};

TEST_P(TrainerInterleaved, EveryStepsLossEqualsTheNonInterleavedRuns) {
  const int pp = GetParam();
  TrainerRun plain;
  plain.pp = pp;
  plain.microbatches = 2 * pp;
  plain.layers = 2 * pp;
  plain.flags = "--otel-enabled=false";
  TrainerRun interleaved = plain;
  interleaved.flags = "--otel-enabled=false --virtual-stages 2";
  const std::string name = "interleaved-loss-p" + std::to_string(pp);
  RunOutput a = run_trainer(plain, name + "-v1"), b = run_trainer(interleaved, name + "-v2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const json& last_a = a.reports.at(static_cast<std::size_t>(pp - 1));
  const json& last_b = b.reports.at(static_cast<std::size_t>(pp - 1));
  ASSERT_EQ(last_a["steps"].size(), 3u);
  ASSERT_EQ(last_b["steps"].size(), 3u);
  for (std::size_t step = 0; step < 3; ++step) {
    const double la = last_a["steps"][step]["loss"], lb = last_b["steps"][step]["loss"];
    EXPECT_NEAR(la, lb, 1e-5 * std::max(1.0, std::abs(la))) << "step " << step;
  }
  expect_loss_decreases(b, pp);
}

INSTANTIATE_TEST_SUITE_P(Stages, TrainerInterleaved, ::testing::Values(2, 4));

TEST(TrainerInterleavedTrace, ChunksAreTracedAndLensCheckCountsTheirLinkedSpans) {
  TrainerRun r;
  r.pp = 2;
  r.dp = 2;
  r.microbatches = 4;
  r.flags = "--otel-enabled=true --otel-span-groups all --virtual-stages 2";
  RunOutput out = run_trainer(r, "interleaved-trace");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const lens::analysis::Run run = lens::analysis::read_run(out.trace_dir / out.run_id);
  expect_lens_check_passes(run);
  // Stage 1 of 2 with V = 2, M = 4: min(2*0 + 1*2, 8) = 2 warmup receives
  // and the pre-steady-state one; chunk 0 feeds two of them, chunk 1 one.
  const auto stage_of = [](const lens::analysis::RankFile& f) {
    return std::stoi(f.resource.at("dl.pipeline_parallel.rank"));
  };
  for (const auto& f : run.files) {
    std::map<std::int64_t, int> linked_by_chunk;
    std::set<std::int64_t> chunks_seen;
    for (const auto& s : f.spans) {
      if (s.name == "megatron.microbatch.forward" || s.name == "megatron.microbatch.backward" ||
          s.name.rfind("megatron.p2p.", 0) == 0) {
        ASSERT_TRUE(s.has("dl.virtual_pipeline.rank")) << s.name << " on rank " << f.rank;
        chunks_seen.insert(s.int_attr("dl.virtual_pipeline.rank"));
      }
      if (s.name == "megatron.pp.recv_forward.linked")
        ++linked_by_chunk[s.int_attr("dl.virtual_pipeline.rank")];
    }
    EXPECT_EQ(chunks_seen, (std::set<std::int64_t>{0, 1})) << "rank " << f.rank;
    if (stage_of(f) == 0) {
      EXPECT_TRUE(linked_by_chunk.empty());
    } else {
      EXPECT_EQ(linked_by_chunk, (std::map<std::int64_t, int>{{0, 2 * r.steps}, {1, r.steps}}))
          << "rank " << f.rank;
    }
  }
  // Without one of chunk 1's linked spans the count is wrong, and said so.
  lens::analysis::Run broken = run;
  for (auto& f : broken.files) {
    if (stage_of(f) != 1) continue;
    for (auto it = f.spans.begin(); it != f.spans.end(); ++it)
      if (it->name == "megatron.pp.recv_forward.linked" &&
          it->int_attr("dl.virtual_pipeline.rank") == 1) {
        f.spans.erase(it);
        break;
      }
    break;
  }
  const auto found = lens::analysis::check_run(broken, lens::analysis::build_view(broken));
  ASSERT_FALSE(found.empty());
  EXPECT_NE(lens::analysis::format_violation(found[0]).find(
                "2 linked spans where stage 1 of 2 with 4 microbatches and 2 chunks has 3"),
            std::string::npos)
      << lens::analysis::format_violation(found[0]);
}

TEST(TrainerErrors, VirtualStagesNeedAPipelineAndMicrobatchesAMultipleOfIt) {
  TrainerRun r;
  r.microbatches = 3;
  r.flags = "--virtual-stages 2";
  RunOutput out = run_trainer(r, "bad-virtual");
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_NE(out.output.find("--virtual-stages 2 needs"), std::string::npos) << out.output;
}

// What a person reads in a trace viewer: the source's step span is the
// step's first span on any rank (it opens before its broadcast), every
// linked span starts after the span it links to, the schedule's spans
// nest in megatron.forward_backward, inside the step, and the job is one
// trace that every step links to. Times across ranks are compared on rank
// 0's clock as lens aligns them, within the alignment's uncertainty: the
// ranks' unix times are not one clock even on one host (each process maps
// its monotonic clock to unix time when it starts, and a system clock
// stepped in between, as this VM's was by 5 ms each second for a while,
// puts processes started a few ms apart microseconds apart).
TEST(TrainerReadability, SourceStepFirstLinksBackInTimeScheduleNested) {
  TrainerRun r;
  r.pp = 3;
  r.microbatches = 4;
  r.layers = 3;
  r.flags = "--otel-enabled=true --otel-span-groups all";
  RunOutput out = run_trainer(r, "readability");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  lens::analysis::Run run = lens::analysis::read_run(out.trace_dir / out.run_id);
  expect_lens_check_passes(run);
  const lens::analysis::ClockAlignment clock =
      lens::analysis::read_clock_alignment(out.trace_dir / out.run_id);
  ASSERT_FALSE(clock.empty()) << "the run has clock samples";
  for (auto& f : run.files) ASSERT_TRUE(clock.align(f)) << "rank " << f.rank;
  const std::int64_t slack_ns = clock.max_uncertainty_ns();
  ASSERT_LT(slack_ns, 5'000'000) << "samples of one host";
  std::map<std::string_view, const lens::analysis::SpanRow*> by_id;
  for (const auto& f : run.files)
    for (const auto& s : f.spans) by_id[s.span_id] = &s;
  for (int step = 0; step < r.steps; ++step) {
    const auto steps = step_spans_of(run, step);
    ASSERT_EQ(steps.size(), 3u);
    const lens::analysis::SpanRow* source = steps.at(0);
    for (const auto& f : run.files)
      for (const auto& s : f.spans)
        if (s.trace_id == source->trace_id) {
          EXPECT_LE(source->start_ns, s.start_ns + slack_ns)
              << s.name << " on rank " << f.rank << " starts before the source's step span";
        }
  }
  int nested = 0;
  for (const auto& f : run.files)
    for (const auto& s : f.spans) {
      for (const auto& [trace, target] : s.links)
        if (by_id.count(target) && s.name == "megatron.pp.recv_forward.linked") {
          EXPECT_GE(s.start_ns + slack_ns, by_id.at(target)->start_ns) << "rank " << f.rank;
        }
      const bool schedule = s.name.rfind("megatron.microbatch.", 0) == 0 ||
                            s.name.rfind("megatron.p2p.", 0) == 0 ||
                            s.name == "megatron.pp.recv_forward.linked";
      if (!schedule) continue;
      ASSERT_TRUE(by_id.count(s.parent_span_id)) << s.name << " on rank " << f.rank;
      EXPECT_EQ(by_id.at(s.parent_span_id)->name, "megatron.forward_backward")
          << s.name << " on rank " << f.rank;
      ++nested;
    }
  EXPECT_GT(nested, 0);
  // One job trace: every rank's job span in it, the others linking to rank
  // 0's, and every step span linking to its own rank's job span.
  std::map<int, const lens::analysis::SpanRow*> job_of;
  for (const auto& f : run.files)
    for (const auto& s : f.spans)
      if (s.name == "megatron.job") job_of[f.rank] = &s;
  ASSERT_EQ(job_of.size(), 3u);
  for (const auto& [rank, job] : job_of) {
    EXPECT_EQ(job->trace_id, job_of.at(0)->trace_id) << "rank " << rank;
    if (rank != 0) {
      ASSERT_EQ(job->links.size(), 1u) << "rank " << rank;
      EXPECT_EQ(job->links[0].second, job_of.at(0)->span_id);
    }
  }
  for (int step = 0; step < r.steps; ++step)
    for (const auto& [rank, s] : step_spans_of(run, step)) {
      bool to_job = false;
      for (const auto& [trace, target] : s->links)
        to_job |= target == job_of.at(rank)->span_id && trace == job_of.at(rank)->trace_id;
      EXPECT_TRUE(to_job) << "step " << step << " on rank " << rank << " does not link to its job";
    }
}

// Tensor parallelism (--tp): each stage's Linears split over a TP group
// (column- and row-parallel), the same function as with --tp 1, so every
// step's loss on every last-stage rank equals the --tp 1 run's. Ranks in
// Megatron's order: TP fastest, then DP, then PP.
class TrainerTensorParallel : public ::testing::TestWithParam<int> {};  // dp

TEST_P(TrainerTensorParallel, EveryStepsLossEqualsTheTp1Runs) {
  TrainerRun one;
  one.dp = GetParam();
  one.flags = "--otel-enabled=false";
  TrainerRun two = one;
  two.tp = 2;
  const std::string name = "tp-loss-dp" + std::to_string(GetParam());
  RunOutput a = run_trainer(one, name + "-tp1"), b = run_trainer(two, name + "-tp2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(b.reports.size(), static_cast<std::size_t>(2 * one.dp * 2));
  EXPECT_NE(b.output.find("pp=2 dp=" + std::to_string(one.dp) + " tp=2"), std::string::npos)
      << b.output;
  int compared = 0;
  for (const auto& rb : b.reports) {
    const int rank = rb["rank"];
    // Megatron's order: rank = (stage x dp + replica) x tp + tensor.
    EXPECT_EQ(rb["tensor"], rank % 2);
    EXPECT_EQ(rb["replica"], rank / 2 % one.dp);
    EXPECT_EQ(rb["stage"], rank / (2 * one.dp));
    if (rb["stage"] != 1) continue;
    // The --tp 1 rank of the same stage and replica.
    const json& ra = a.reports.at(static_cast<std::size_t>(one.dp + rb["replica"].get<int>()));
    ASSERT_EQ(ra["replica"], rb["replica"]);
    ASSERT_EQ(rb["steps"].size(), ra["steps"].size());
    for (std::size_t step = 0; step < ra["steps"].size(); ++step) {
      const double la = ra["steps"][step]["loss"], lb = rb["steps"][step]["loss"];
      EXPECT_NEAR(la, lb, 1e-5 * std::max(1.0, std::abs(la)))
          << "rank " << rank << " step " << step;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * one.dp * one.steps) << "every TP rank of the last stage, every step";
  expect_loss_decreases(b, 2);
}

INSTANTIATE_TEST_SUITE_P(Replicas, TrainerTensorParallel, ::testing::Values(1, 2));

// The interleaved schedule with tensor parallelism: each TP rank runs the
// interleaved schedule with its peers of the other stages; the loss of
// every step equals the --tp 1 interleaved run's, and lens check passes.
TEST(TrainerTensorParallelInterleaved, EveryStepsLossEqualsTheTp1InterleavedRuns) {
  TrainerRun one;
  one.microbatches = 4;
  one.flags = "--virtual-stages 2 --otel-enabled=true --otel-span-groups all";
  TrainerRun two = one;
  two.tp = 2;
  RunOutput a = run_trainer(one, "tp-interleaved-tp1"), b = run_trainer(two, "tp-interleaved-tp2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(b.reports.size(), 4u);
  for (const std::size_t rank : {2u, 3u}) {  // stage 1's TP ranks
    ASSERT_EQ(b.reports[rank]["stage"], 1);
    for (std::size_t step = 0; step < 3; ++step) {
      const double la = a.reports[1]["steps"][step]["loss"];
      const double lb = b.reports[rank]["steps"][step]["loss"];
      EXPECT_NEAR(la, lb, 1e-5 * std::max(1.0, std::abs(la)))
          << "rank " << rank << " step " << step;
    }
  }
  const lens::analysis::Run run = lens::analysis::read_run(b.trace_dir / b.run_id);
  ASSERT_EQ(run.files.size(), 4u);
  expect_lens_check_passes(run);
}

// A traced TP run (pp 2 x dp 2 x tp 2) in each scope and step context: lens
// check passes it; every step is one trace (world scope) or one per
// pipeline, a (replica, TP rank) chain (pipeline scope); every rank says its
// TP rank, and its TP collectives are spans that say it too, numbered alike
// on every peer.
class TrainerTensorParallelTrace
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TrainerTensorParallelTrace, LensCheckPassesAndCollectivesAreSpansOfEveryTpRank) {
  const auto& [scope, context] = GetParam();
  TrainerRun r = scaled_run("LENS_TRACE_SCOPE=" + scope);
  r.tp = 2;
  r.flags += " --step-context " + context;
  RunOutput out = run_trainer(r, "tp-trace-" + scope + "-" + context);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const lens::analysis::Run run = lens::analysis::read_run(out.trace_dir / out.run_id);
  ASSERT_EQ(run.files.size(), 8u);
  expect_lens_check_passes(run);
  std::map<int, std::pair<int, int>> pipeline_of;  // rank -> (replica, tensor)
  for (const auto& f : run.files) {
    EXPECT_EQ(f.tensor_rank, f.rank % 2) << "rank " << f.rank;
    pipeline_of[f.rank] = {f.replica, f.tensor_rank};
    // Per step, the same TP collectives on every rank of a stage: their
    // sequence numbers 0..n-1, each with the rank's TP rank.
    std::map<std::int64_t, std::set<std::int64_t>> sequences;  // step -> numbers
    std::map<lens::analysis::HexId, std::int64_t> step_of_trace;
    for (const auto& s : f.spans)
      if (s.name == "megatron.train_step") step_of_trace[s.trace_id] = s.int_attr("dl.step");
    for (const auto& s : f.spans) {
      if (!s.name.starts_with("megatron.tp.")) continue;
      EXPECT_EQ(s.int_attr("dl.tensor_parallel.rank"), f.tensor_rank) << s.name;
      sequences[step_of_trace.at(s.trace_id)].insert(s.int_attr("dl.collective.sequence"));
    }
    ASSERT_EQ(sequences.size(), static_cast<std::size_t>(r.steps)) << "rank " << f.rank;
    for (const auto& [step, numbers] : sequences) {
      EXPECT_EQ(*numbers.begin(), 0);
      EXPECT_EQ(*numbers.rbegin() + 1, static_cast<std::int64_t>(numbers.size()))
          << "rank " << f.rank << " step " << step;
    }
  }
  for (int step = 0; step < r.steps; ++step) {
    const auto spans = step_spans_of(run, step);
    ASSERT_EQ(spans.size(), 8u) << "step " << step;
    std::map<std::pair<int, int>, std::set<lens::analysis::HexId>> traces;
    std::set<lens::analysis::HexId> all;
    for (const auto& [rank, s] : spans) {
      traces[pipeline_of[rank]].insert(s->trace_id);
      all.insert(s->trace_id);
    }
    ASSERT_EQ(traces.size(), 4u);
    for (const auto& [pipeline, ids] : traces) EXPECT_EQ(ids.size(), 1u) << "one per pipeline";
    EXPECT_EQ(all.size(), scope == "world" ? 1u : 4u) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(ScopesAndContexts, TrainerTensorParallelTrace,
                         ::testing::Combine(::testing::Values("world", "pipeline"),
                                            ::testing::Values("broadcast", "derived")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

TEST(TrainerErrors, TensorParallelMustDivideTheHiddenSizeAndSlowRankBeARank) {
  // (tp, flags, what the message must say); the runs are --pp 2 --hidden 32.
  const std::vector<std::tuple<int, std::string, std::string>> cases = {
      {3, "", "--tp 3 does not divide --hidden 32"},
      {2, "--slow-rank 4", "--slow-rank 4 is not a rank of pp x dp x tp = 4"},
      {2, "--slow-rank 1 --slow-stage 1", "--slow-rank names one rank"},
      {2, "--test-clock-offsets-us 0,1",
       "has 2 values for 4 ranks; accepted: one per rank (pp x dp x tp)"}};
  int i = 0;
  for (const auto& [tp, flags, message] : cases) {
    TrainerRun r;
    r.tp = tp;
    r.flags = flags;
    RunOutput out = run_trainer(r, "bad-tp-" + std::to_string(i++));
    EXPECT_EQ(out.exit_code, 2) << flags << ": " << out.output;
    EXPECT_NE(out.output.find(message), std::string::npos) << flags << ": " << out.output;
  }
}

TEST(TrainerLaunch, ByHandWithTorchrunVariablesRankZeroServesTheStore) {
  launch_four_ranks_by_hand(false);
}

TEST(TrainerLaunch, ByHandWithTheAgentsStoreEveryRankIsAClientWithTensorParallelism) {
  if (std::system("/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-torch not installed";
  launch_four_ranks_by_hand(true);
}

TEST(TrainerFailures, KilledRankStopsTheJobWithAnErrorNamingIt) {
  KillOutcome k = kill_rank_mid_run(1, "rank1");
  EXPECT_TRUE(k.launcher_exited) << "the job is still running after rank 1 died";
  EXPECT_LT(k.after_kill, std::chrono::seconds(60));
  EXPECT_NE(k.output.find("rank 1 was killed by signal 9"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("lens-train: failed"), std::string::npos) << k.output;
  // The survivor says what it was doing, and its open spans carry the
  // failure. It notices the loss in a p2p transfer or, when the kill lands
  // between steps, in the next step's broadcast.
  const bool in_p2p = k.output.find("rank 0 was in: megatron.p2p.") != std::string::npos;
  const bool in_broadcast = k.output.find("broadcast") != std::string::npos;
  EXPECT_TRUE(in_p2p || in_broadcast) << k.output;
  if (in_p2p) {
    EXPECT_NE(k.output.find("rank 0 was in: megatron.train_step dl.step="), std::string::npos)
        << k.output;
  }
  EXPECT_NE(k.output.find("rank 0 was in: megatron.job"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("rank 0: last span ended: megatron."), std::string::npos) << k.output;
  EXPECT_GT(k.failure_events, 0);
}

TEST(TrainerFailures, KilledSourceRankStopsTheJobToo) {
  KillOutcome k = kill_rank_mid_run(0, "rank0");
  EXPECT_TRUE(k.launcher_exited) << "the job is still running after rank 0 died";
  EXPECT_LT(k.after_kill, std::chrono::seconds(60));
  EXPECT_NE(k.output.find("rank 0 was killed by signal 9"), std::string::npos) << k.output;
}

// Data parallelism only: the survivor fails in the gradient all-reduce, and
// its failure record names it.
TEST(TrainerFailures, KilledDataParallelPeerFailsTheAllReduceWithARecord) {
  KillOutcome k = kill_rank_mid_run(1, "dp", "--pp 1 --dp 2");
  EXPECT_TRUE(k.launcher_exited) << "the job is still running after rank 1 died";
  EXPECT_LT(k.after_kill, std::chrono::seconds(60));
  EXPECT_NE(k.output.find("rank 1 was killed by signal 9"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("lens-train: rank 0 was in: megatron.grads.all_reduce"),
            std::string::npos)
      << k.output;
  EXPECT_NE(k.output.find("lens-train: rank 0: last span ended: "), std::string::npos) << k.output;
  EXPECT_GT(k.failure_events, 0);
}

TEST(TrainerFailures, KilledTensorParallelPeerFailsTheCollectiveWithARecord) {
  KillOutcome k = kill_rank_mid_run(1, "tp", "--pp 1 --tp 2");
  EXPECT_TRUE(k.launcher_exited) << "the job is still running after rank 1 died";
  EXPECT_LT(k.after_kill, std::chrono::seconds(60));
  EXPECT_NE(k.output.find("rank 1 was killed by signal 9"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("lens-train: rank 0 was in: megatron.tp."), std::string::npos)
      << k.output;
  EXPECT_NE(k.output.find("failed on TP rank 0 of 2"), std::string::npos) << k.output;
  EXPECT_GT(k.failure_events, 0);
}

TEST(TrainerFailures, UnwritableTraceDirectoryIsAStartupError) {
  const fs::path file =
      fs::temp_directory_path() / ("lens-e2e-not-a-dir-" + std::to_string(getpid()));
  std::ofstream(file) << "x";
  TrainerRun bad;
  bad.flags = "--otel-enabled=true --trace-dir " + file.string();
  RunOutput failed = run_trainer(bad, "unwritable2");
  EXPECT_NE(failed.exit_code, 0) << failed.output;
  EXPECT_NE(failed.output.find("cannot be created"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("LENS_TRACE_DIR"), std::string::npos) << failed.output;
  fs::remove(file);
}

// The disk holding the trace directory fills up mid-run (a 96 KiB tmpfs):
// training finishes normally, the lost spans are counted in the report and
// warned about, and every trace file holds whole lines only.
TEST(TrainerFailures, FullDiskMidRunLosesSpansNotTraining) {
  const std::string name = "fulldisk";
  const fs::path base = process_dir() / name;
  const fs::path copy =
      fs::temp_directory_path() / ("lens-e2e-fulldisk-copy-" + std::to_string(getpid()));
  fs::remove_all(copy);
  TrainerRun r;
  r.steps = 40;
  r.microbatches = 4;
  // Small batches (lines of ~10 KiB): some fit before the disk is full.
  r.env = "OTEL_BSP_SCHEDULE_DELAY=50 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=24 " LENS_SMALL_DISK
          " 98304 " +
          (base / "traces").string() + " " + copy.string();
  r.flags = "--otel-enabled=true --otel-span-groups all";
  RunOutput out = run_trainer(r, name);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  ASSERT_EQ(out.reports.size(), 2u) << out.output;
  expect_loss_decreases(out, r.pp);
  std::uint64_t dropped = 0;
  for (const auto& rep : out.reports) dropped += rep["spans_dropped"].get<std::uint64_t>();
  EXPECT_GT(dropped, 0u) << "the disk never filled up: make the run bigger or the disk smaller";
  EXPECT_NE(out.output.find("could not be written"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("No space left on device"), std::string::npos) << out.output;
  int files = 0, lines = 0;
  for (const auto& e : fs::recursive_directory_iterator(copy)) {
    if (!e.is_regular_file()) continue;
    ++files;
    for (const auto& line : read_lines_of(e.path())) {
      ++lines;
      EXPECT_TRUE(json::accept(line)) << e.path() << ": a torn line";
    }
  }
  EXPECT_EQ(files, 2);
  EXPECT_GT(lines, 0);
  fs::remove_all(copy);
}

}  // namespace
