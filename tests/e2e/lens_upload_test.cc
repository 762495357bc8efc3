// Spans reaching an OTLP/HTTP receiver from a real training run: directly
// (OTEL_EXPORTER_OTLP_ENDPOINT) and later, from its files, with `lens upload`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "faulty_endpoint.h"
#include "otlp_receiver.h"
#include "run_command.h"

namespace {

namespace fs = std::filesystem;
using lens::testing::OtlpReceiver;

using Result = lens::testing::CommandResult;

Result run(const std::string& command, const fs::path& dir) {
  return lens::testing::run_command(command, dir / "output.txt");
}

// The spans in the *.otlp.jsonl files under `dir` (or in the one file it names).
std::size_t spans_in_files(const fs::path& dir) {
  std::size_t n = 0;
  std::vector<fs::path> files;
  if (fs::is_regular_file(dir))
    files.push_back(dir);
  else
    for (const auto& e : fs::recursive_directory_iterator(dir)) files.push_back(e.path());
  for (const auto& path : files) {
    if (!path.string().ends_with(".otlp.jsonl")) continue;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      for (const auto& rs : j["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"]) n += ss["spans"].size();
    }
  }
  return n;
}

class Upload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lens-upload-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string trainer(const std::string& env) {
    return "env " + env + " " + std::string(LENS_TRAIN_BIN) +
           " --pp 2 --microbatches 3 --steps 3 --layers 2 --hidden 16 --microbatch-size 4"
           " --otel-enabled=true --otel-span-groups per_step,microbatch --trace-dir " +
           (dir_ / "traces").string() + " --report-dir " + (dir_ / "reports").string();
  }
  fs::path dir_;
};

TEST_F(Upload, TrainerSendsSpansToTheOtlpEndpoint) {
  OtlpReceiver receiver;
  receiver.start();
  fs::create_directories(dir_ / "reports");
  Result r = run(trainer("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + receiver.endpoint()), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "traces"));  // no files: spans went over HTTP
  std::size_t reported = 0;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(dir_ / "reports" / ("rank-" + std::to_string(rank) + ".json"));
    reported += nlohmann::json::parse(in)["spans_exported"].get<std::size_t>();
  }
  EXPECT_GT(reported, 0u);
  EXPECT_EQ(receiver.accepted_spans(), reported);
  std::set<std::int64_t> ranks;
  std::set<std::string> step_traces;
  for (const auto& req : receiver.protobuf_requests()) {
    for (const auto& rs : req.resource_spans()) {
      for (const auto& kv : rs.resource().attributes())
        if (kv.key() == "dl.rank") ranks.insert(kv.value().int_value());
      for (const auto& ss : rs.scope_spans())
        for (const auto& s : ss.spans())
          if (s.name() == "megatron.train_step") step_traces.insert(s.trace_id());
    }
  }
  EXPECT_EQ(ranks, (std::set<std::int64_t>{0, 1}));
  EXPECT_EQ(step_traces.size(), 3u);  // both ranks' step spans share one trace per step
}

TEST_F(Upload, FilesOfARunArriveComplete) {
  fs::create_directories(dir_ / "reports");
  Result r = run(trainer("MEGATRON_OTEL_EXPORTER=file"), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::size_t in_files = spans_in_files(dir_ / "traces");
  ASSERT_GT(in_files, 0u);
  OtlpReceiver receiver;
  receiver.start();
  Result up = run(std::string(LENS_BIN) + " upload " + (dir_ / "traces").string() +
                      " --batch-spans 50 --endpoint " + receiver.endpoint(),
                  dir_);
  EXPECT_EQ(up.exit_code, 0) << up.output;
  EXPECT_EQ(receiver.accepted_spans(), in_files);
  EXPECT_GT(receiver.requests(), 1);  // batches of at most 50 spans
  EXPECT_NE(up.output.find(std::to_string(in_files) + " spans sent"), std::string::npos)
      << up.output;
  // The batches counted before sending are the requests made.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(up.output, m, std::regex(R"((\d+) batches)"))) << up.output;
  EXPECT_EQ(std::stoi(m[1]), receiver.requests());
}

TEST_F(Upload, TracesInAnotherLayoutAreSentAsImported) {
  fs::create_directories(dir_ / "reports");
  Result r = run(trainer("MEGATRON_OTEL_EXPORTER=file"), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::size_t in_files = spans_in_files(dir_ / "traces");
  ASSERT_GT(in_files, 0u);
  // Every batch of the run in one pretty-printed OTLP/JSON document, as a
  // collector's or a backend's single document holds them.
  nlohmann::json all = nlohmann::json::array();
  std::set<std::string> traces;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "traces")) {
    if (!e.path().string().ends_with(".otlp.jsonl")) continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      nlohmann::json request = nlohmann::json::parse(line);
      for (auto& rs : request["resourceSpans"]) {
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& s : ss["spans"]) traces.insert(s["traceId"]);
        all.push_back(std::move(rs));
      }
    }
  }
  fs::create_directories(dir_ / "collector");
  std::ofstream(dir_ / "collector" / "traces.json") << nlohmann::json{{"resourceSpans", all}}.dump(2);
  OtlpReceiver receiver;
  receiver.start();
  Result up = run(std::string(LENS_BIN) + " upload " + (dir_ / "collector").string() +
                      " --endpoint " + receiver.endpoint(),
                  dir_);
  EXPECT_EQ(up.exit_code, 0) << up.output;
  EXPECT_EQ(receiver.accepted_spans(), in_files);
  std::set<std::string> received;  // lens upload sends OTLP/JSON
  for (const auto& req : receiver.json_requests())
    for (const auto& rs : req["resourceSpans"])
      for (const auto& ss : rs["scopeSpans"])
        for (const auto& s : ss["spans"]) received.insert(s["traceId"]);
  EXPECT_EQ(received, traces);
}

TEST_F(Upload, CorruptLineIsNamedAndTheValidLinesStillGo) {
  fs::create_directories(dir_ / "reports");
  Result r = run(trainer("MEGATRON_OTEL_EXPORTER=file"), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::size_t in_files = spans_in_files(dir_ / "traces");
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "traces"))
    if (e.path().string().ends_with("rank-1.otlp.jsonl")) file = e.path();
  ASSERT_FALSE(file.empty());
  std::vector<std::string> lines;
  {
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  lines.insert(lines.begin(),
               R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"XYZ"}]}]}]})");
  {
    std::ofstream out(file, std::ios::trunc);
    for (const auto& l : lines) out << l << "\n";
  }
  OtlpReceiver receiver;
  receiver.start();
  Result up = run(std::string(LENS_BIN) + " upload " + file.parent_path().string() +
                      " --endpoint " + receiver.endpoint(),
                  dir_);
  EXPECT_EQ(up.exit_code, 1) << up.output;
  EXPECT_NE(up.output.find(file.string() + ":1: skipped"), std::string::npos) << up.output;
  EXPECT_EQ(receiver.accepted_spans(), in_files);
}

TEST_F(Upload, AFileNamedTwiceIsSentOnce) {
  fs::create_directories(dir_ / "reports");
  Result r = run(trainer("MEGATRON_OTEL_EXPORTER=file"), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::size_t in_files = spans_in_files(dir_ / "traces");
  fs::path run_dir;
  for (const auto& e : fs::directory_iterator(dir_ / "traces")) run_dir = e.path();
  OtlpReceiver receiver;
  receiver.start();
  // The run as its parent, itself, by another spelling, and one of its files.
  Result up =
      run(std::string(LENS_BIN) + " upload " + (dir_ / "traces").string() + " " + run_dir.string() +
              " " + (run_dir / ".." / run_dir.filename()).string() + " " +
              (run_dir / "rank-0.otlp.jsonl").string() + " --endpoint " + receiver.endpoint(),
          dir_);
  EXPECT_EQ(up.exit_code, 0) << up.output;
  EXPECT_EQ(receiver.accepted_spans(), in_files);
  EXPECT_NE(up.output.find(" 2 files,"), std::string::npos) << up.output;
}

// A 2-rank run against `endpoint` with a spool: every rank's summary line
// says produced = exported + spooled + dropped with nothing dropped and
// matches its spool file, the exit is not held long, and `lens upload`
// then delivers the whole spool to a healthy receiver.
void expect_nothing_lost(const std::string& endpoint, const fs::path& dir) {
  const auto start = std::chrono::steady_clock::now();
  Result r =
      run("env OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + endpoint +
              " OTEL_EXPORTER_OTLP_TIMEOUT=1000 OTEL_BSP_EXPORT_TIMEOUT=3000 LENS_SPOOL_DIR=" +
              (dir / "spool").string() + " " + std::string(LENS_TRAIN_BIN) +
              " --pp 2 --microbatches 3 --steps 3 --layers 2 --hidden 16"
              " --microbatch-size 4 --otel-enabled=true --otel-span-groups all",
          dir);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(took, std::chrono::seconds(20)) << "an unhealthy backend holds the exit for long";
  // The summary's words, per rank, match the spool's content.
  const std::uint64_t spooled = spans_in_files(dir / "spool");
  ASSERT_GT(spooled, 0u);
  const std::regex rank_line(
      R"(rank (\d) +(\d+) spans: (\d+) exported, (\d+) spooled \(to ([^)]+)\), (\d+) dropped)");
  std::uint64_t said_spooled = 0;
  int ranks = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), rank_line), end; it != end; ++it) {
    const std::uint64_t produced = std::stoull((*it)[2]), exported = std::stoull((*it)[3]),
                        in_spool = std::stoull((*it)[4]), dropped = std::stoull((*it)[6]);
    EXPECT_EQ(exported + in_spool + dropped, produced) << (*it)[0];
    EXPECT_EQ(dropped, 0u) << (*it)[0];
    EXPECT_EQ(spans_in_files((*it)[5].str()), in_spool) << (*it)[0];
    said_spooled += in_spool;
    ++ranks;
  }
  EXPECT_EQ(ranks, 2) << r.output;
  EXPECT_EQ(said_spooled, spooled);
  // Once a backend answers, the spool goes to it whole.
  OtlpReceiver receiver;
  receiver.start();
  Result up = run(std::string(LENS_BIN) + " upload " + (dir / "spool").string() + " --endpoint " +
                      receiver.endpoint(),
                  dir);
  EXPECT_EQ(up.exit_code, 0) << up.output;
  EXPECT_EQ(receiver.accepted_spans(), spooled);
}

TEST_F(Upload, ASilentBackendLosesNothingAndTheSpoolUploadsLater) {
  lens::testing::FaultyEndpoint silent(lens::testing::Fault::kSilent);
  expect_nothing_lost(silent.endpoint(), dir_);
  EXPECT_GT(silent.connections(), 0);
}

TEST_F(Upload, AResettingBackendLosesNothing) {
  lens::testing::FaultyEndpoint reset(lens::testing::Fault::kReset);
  expect_nothing_lost(reset.endpoint(), dir_);
  EXPECT_GT(reset.connections(), 0);
}

TEST_F(Upload, ARefusingBackendLosesNothing) {
  expect_nothing_lost(lens::testing::refused_endpoint(), dir_);
}

TEST_F(Upload, UnreachableEndpointCountsFailedSpans) {
  fs::create_directories(dir_ / "reports");
  Result r = run(trainer("MEGATRON_OTEL_EXPORTER=file"), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result up = run("OTEL_EXPORTER_OTLP_TIMEOUT=300 " + std::string(LENS_BIN) + " upload " +
                      (dir_ / "traces").string() +
                      " --max-attempts 2 --endpoint http://127.0.0.1:1/v1/traces",
                  dir_);
  EXPECT_EQ(up.exit_code, 1) << up.output;
  EXPECT_NE(up.output.find("0 spans sent"), std::string::npos) << up.output;
  EXPECT_NE(up.output.find("failed"), std::string::npos) << up.output;
}

// Metrics by OTLP from a real training run (OTEL_METRICS_EXPORTER=otlp):
// every rank sends its step figures to /v1/metrics, decoded as OTLP, and
// the exemplars point at the step spans in the run's trace files.
class MetricsExport : public Upload {};

TEST_F(MetricsExport, TrainerSendsStepMetricsWhoseExemplarsAreItsStepSpans) {
  OtlpReceiver receiver;
  receiver.start();
  const std::string endpoint =
      "http://127.0.0.1:" + std::to_string(receiver.port()) + "/v1/metrics";
  Result r = run(trainer("OTEL_METRICS_EXPORTER=otlp OTEL_METRIC_EXPORT_INTERVAL=200 "
                         "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" +
                         endpoint),
                 dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The step spans' trace and span ids, from the files.
  std::set<std::string> step_spans;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "traces")) {
    if (!e.path().string().ends_with(".otlp.jsonl")) continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      for (const auto& rs : j["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& span : ss["spans"])
            if (span["name"] == "megatron.train_step")
              step_spans.insert(span["traceId"].get<std::string>() + "/" +
                                span["spanId"].get<std::string>());
    }
  }
  ASSERT_EQ(step_spans.size(), 6u) << "3 steps on 2 ranks";
  const auto hex = [](const std::string& bytes) {
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) {
      out += digits[c >> 4];
      out += digits[c & 15];
    }
    return out;
  };
  // Each rank's last request: the totals at the end.
  std::map<std::string, lens::test::otlp::ExportMetricsServiceRequest> last;
  for (const auto& req : receiver.metrics_protobuf_requests())
    for (const auto& kv : req.resource_metrics(0).resource().attributes())
      if (kv.key() == "dl.rank") last[std::to_string(kv.value().int_value())] = req;
  ASSERT_EQ(last.size(), 2u) << "both ranks";
  for (const auto& [rank, req] : last) {
    std::map<std::string, const lens::test::otlp::Metric*> metrics;
    for (const auto& m : req.resource_metrics(0).scope_metrics(0).metrics()) metrics[m.name()] = &m;
    ASSERT_TRUE(metrics.count("lens.steps")) << rank;
    EXPECT_DOUBLE_EQ(metrics["lens.steps"]->sum().data_points(0).as_double(), 3) << rank;
    for (const char* name : {"lens.step.duration", "lens.step.compute", "lens.step.p2p_wait",
                             "lens.step.p2p_send", "lens.step.optimizer"}) {
      ASSERT_TRUE(metrics.count(name)) << rank << " " << name;
      const auto& p = metrics[name]->histogram().data_points(0);
      EXPECT_EQ(p.count(), 3u) << rank << " " << name;
      EXPECT_GT(p.sum(), 0) << rank << " " << name;
      // Every step was sampled: each exemplar is one of the step spans.
      EXPECT_GE(p.exemplars_size(), 1) << rank << " " << name;
      for (const auto& e : p.exemplars())
        EXPECT_TRUE(step_spans.count(hex(e.trace_id()) + "/" + hex(e.span_id())))
            << rank << " " << name << ": " << hex(e.trace_id());
    }
    const auto& duration = metrics["lens.step.duration"]->histogram().data_points(0);
    const auto& compute = metrics["lens.step.compute"]->histogram().data_points(0);
    EXPECT_LT(compute.sum(), duration.sum()) << "a step is more than its compute";
  }
}

}  // namespace
