// The `lens` command over a run written by lens-train, and over hand-broken
// copies of it: each violation is reported with its step and rank, with the
// documented exit codes; the timeline renders in headless Chromium; the
// viewer exports are well-formed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "run_command.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using Result = lens::testing::CommandResult;

Result run(const std::string& command) {
  return lens::testing::run_command(
      command, fs::temp_directory_path() / ("lens-cli-out-" + std::to_string(getpid())));
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

void write_lines(const fs::path& p, const std::vector<std::string>& lines,
                 bool last_newline = true) {
  std::ofstream out(p, std::ios::trunc);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out << lines[i];
    if (i + 1 < lines.size() || last_newline) out << "\n";
  }
}

class LensCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("lens-cli-test-" + std::to_string(getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_);
    Result r = run(std::string(LENS_TRAIN_BIN) +
                   " --pp 4 --microbatches 4 --steps 2 --layers 4 --hidden 32 --microbatch-size 8"
                   " --otel-enabled=true --otel-span-groups per_step,microbatch --trace-dir " +
                   (base_ / "traces").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const auto& e : fs::directory_iterator(base_ / "traces")) run_dir_ = e.path();
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }

  // A copy of the good run to break.
  fs::path copy(const std::string& name) {
    fs::path dir = base_ / name;
    fs::remove_all(dir);
    fs::copy(run_dir_, dir);
    return dir;
  }

  static std::string lens(const std::string& args) { return std::string(LENS_BIN) + " " + args; }

  static fs::path base_;
  static fs::path run_dir_;
};

fs::path LensCli::base_;
fs::path LensCli::run_dir_;

TEST_F(LensCli, CheckPassesOnATrainerRun) {
  Result r = run(lens("check " + run_dir_.string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 ranks, 2 steps"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
}

TEST_F(LensCli, RetargetedLinkIsReportedWithStepAndRank) {
  fs::path dir = copy("retargeted");
  auto lines = read_lines(dir / "rank-2.otlp.jsonl");
  // Point the first link of rank 2 at a span that does not exist.
  std::regex link_span(
      R"delim(("links":\[\{"traceId":"[0-9a-f]{32}","spanId":")[0-9a-f]{16})delim");
  bool changed = false;
  for (auto& l : lines) {
    if (changed) break;
    std::string replaced = std::regex_replace(l, link_span, "$01" + std::string("00000000deadbeef"),
                                              std::regex_constants::format_first_only);
    changed = replaced != l;
    l = replaced;
  }
  ASSERT_TRUE(changed);
  write_lines(dir / "rank-2.otlp.jsonl", lines);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 2: megatron.pp.recv_forward.linked links to span 00000000deadbeef"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("does not link to rank 0's step span"), std::string::npos) << r.output;
}

TEST_F(LensCli, MissingRankFileIsReported) {
  fs::path dir = copy("missing-rank");
  fs::remove(dir / "rank-3.otlp.jsonl");
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 3: no trace file for this rank (the run has 4 ranks)"),
            std::string::npos)
      << r.output;
}

TEST_F(LensCli, TraceIdChangedOnOneRankIsReported) {
  fs::path dir = copy("changed-trace");
  // Replace rank 1's trace ids wholesale with another id.
  auto lines = read_lines(dir / "rank-1.otlp.jsonl");
  std::regex trace(R"delim("traceId":"[0-9a-f]{32}")delim");
  for (auto& l : lines)
    l = std::regex_replace(l, trace, R"("traceId":"0123456789abcdef0123456789abcdef")");
  write_lines(dir / "rank-1.otlp.jsonl", lines);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("step 0, rank 1: trace id 0123456789abcdef0123456789abcdef differs"),
            std::string::npos)
      << r.output;
}

TEST_F(LensCli, TornLastLineIsSkippedWithAWarning) {
  fs::path dir = copy("torn");
  auto lines = read_lines(dir / "rank-0.otlp.jsonl");
  lines.push_back(lines.back().substr(0, lines.back().size() / 2));
  write_lines(dir / "rank-0.otlp.jsonl", lines, /*last_newline=*/false);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped an incomplete last line"), std::string::npos) << r.output;
}

TEST_F(LensCli, MalformedLineIsBadInputNamingFileAndLine) {
  fs::path dir = copy("malformed");
  auto lines = read_lines(dir / "rank-1.otlp.jsonl");
  lines.insert(lines.begin(), "{\"resourceSpans\": [ this is not json");
  write_lines(dir / "rank-1.otlp.jsonl", lines);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("rank-1.otlp.jsonl:1:"), std::string::npos) << r.output;
  EXPECT_EQ(run(lens("check " + (base_ / "does-not-exist").string())).exit_code, 2);
}

TEST_F(LensCli, SummaryReportsStagesAndBubble) {
  Result r = run(lens("summary " + run_dir_.string() + " --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = json::parse(r.output);
  EXPECT_EQ(j["pipeline_stages"], 4);
  EXPECT_EQ(j["microbatches"], 4);
  EXPECT_NEAR(j["theoretical_bubble"].get<double>(), 3.0 / 7.0, 1e-9);
  ASSERT_TRUE(j["measured_bubble"].is_number());
  EXPECT_GT(j["measured_bubble"].get<double>(), 0.0);
  EXPECT_LT(j["measured_bubble"].get<double>(), 1.0);
  ASSERT_EQ(j["rows"].size(), 8u);  // 2 steps x 4 ranks
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["step_ms"].get<double>(), 0);
    EXPECT_GT(row["forward_ms"].get<double>(), 0);
    EXPECT_GT(row["backward_ms"].get<double>(), 0);
    EXPECT_LE(row["forward_ms"].get<double>() + row["backward_ms"].get<double>(),
              row["step_ms"].get<double>());
  }
  Result table = run(lens("summary " + run_dir_.string()));
  EXPECT_NE(table.output.find("theoretical (P-1)/(M+P-1) = 0.429"), std::string::npos)
      << table.output;
  EXPECT_NE(table.output.find("slowest stage:"), std::string::npos) << table.output;
}

TEST_F(LensCli, TimelineRendersInChromiumWithALanePerRankAndAnArrowPerLink) {
  if (std::system("command -v chromium > /dev/null") != 0) GTEST_SKIP() << "chromium not installed";
  const fs::path html = base_ / "wave.html";
  Result r = run(lens("timeline " + run_dir_.string() + " -o " + html.string() + " --steps 0-1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Linked spans in the drawn steps, counted from the files.
  int linked = 0;
  for (const auto& e : fs::directory_iterator(run_dir_))
    for (const auto& l : read_lines(e.path())) {
      for (std::size_t at = l.find("\"megatron.pp.recv_forward.linked\""); at != std::string::npos;
           at = l.find("\"megatron.pp.recv_forward.linked\"", at + 1))
        ++linked;
    }
  ASSERT_GT(linked, 0);
  const fs::path profile = base_ / "chromium-profile";
  Result dom =
      run("timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic "
          "--no-first-run --disable-background-networking --disable-component-update "
          "--disable-sync --user-data-dir=" +
          profile.string() + " --dump-dom file://" + html.string());
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  // The page's script runs to its end and records what it found in the DOM.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      dom.output, m, std::regex(R"re(data-ready="lanes=(\d+) links=(\d+) spans=(\d+)")re")))
      << dom.output.substr(0, 2000);
  EXPECT_EQ(std::stoi(m[1]), 4);
  EXPECT_EQ(std::stoi(m[2]), linked);
  EXPECT_GT(std::stoi(m[3]), 0);
}

TEST_F(LensCli, PerfettoExportIsValidChromeTraceJson) {
  const fs::path out = base_ / "perfetto.json";
  Result r = run(lens("export " + run_dir_.string() + " --perfetto " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  json j = json::parse(in);
  std::map<std::int64_t, int> flows;  // id -> +1 start, +1 end
  std::set<int> pids;
  int slices = 0;
  std::map<std::string, int> names;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++slices;
      pids.insert(e["pid"].get<int>());
      EXPECT_GE(e["dur"].get<double>(), 0);
      // Microseconds since the epoch: 1.6e15 and up, far below nanoseconds' 1.6e18.
      EXPECT_GT(e["ts"].get<double>(), 1.6e15);
      EXPECT_LT(e["ts"].get<double>(), 1.0e17);
    } else if (ph == "s") {
      flows[e["id"].get<std::int64_t>()] += 1;
    } else if (ph == "f") {
      flows[e["id"].get<std::int64_t>()] += 10;
      EXPECT_EQ(e["bp"], "e");
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_GT(slices, 0);
  ASSERT_FALSE(flows.empty());
  for (const auto& [id, v] : flows) EXPECT_EQ(v, 11) << "flow " << id << " lacks its start or end";
}

TEST_F(LensCli, JaegerExportHasProcessesAndParentFirstReferences) {
  const fs::path out = base_ / "jaeger.json";
  Result r = run(lens("export " + run_dir_.string() + " --jaeger " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  json j = json::parse(in);
  ASSERT_GE(j["data"].size(), 2u);  // one trace per step (and the job spans' own traces)
  int linked = 0;
  for (const auto& trace : j["data"]) {
    for (const auto& s : trace["spans"]) {
      EXPECT_EQ(s["traceID"], trace["traceID"]);
      ASSERT_TRUE(trace["processes"].contains(s["processID"].get<std::string>()));
      EXPECT_EQ(trace["processes"][s["processID"].get<std::string>()]["serviceName"],
                "megatron-lm");
      if (s["operationName"] == "megatron.pp.recv_forward.linked") {
        ++linked;
        ASSERT_EQ(s["references"].size(), 2u);
        EXPECT_EQ(s["references"][0]["refType"], "CHILD_OF");
        EXPECT_EQ(s["references"][1]["refType"], "FOLLOWS_FROM");
      }
    }
  }
  EXPECT_GT(linked, 0);
}

TEST_F(LensCli, UsageErrorsExitWithTwo) {
  EXPECT_EQ(run(lens("")).exit_code, 2);
  EXPECT_EQ(run(lens("frobnicate x")).exit_code, 2);
  EXPECT_EQ(run(lens("timeline " + run_dir_.string() + " -o /tmp/x.html --steps a-b")).exit_code,
            2);
}

}  // namespace
