// The `lens` command over a run written by lens-train, and over hand-broken
// copies of it: each violation is reported with its step and rank, with the
// documented exit codes; the timeline renders in headless Chromium; the
// viewer exports are well-formed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
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

// Rewrites every span of a file through `edit` (one line at a time, the
// lines' order kept). `edit` returns false to drop the span.
void edit_spans(const fs::path& p, const std::function<bool(json& span)>& edit) {
  std::vector<std::string> out;
  for (const auto& l : read_lines(p)) {
    json j = json::parse(l);
    for (auto& rs : j["resourceSpans"])
      for (auto& ss : rs["scopeSpans"]) {
        json kept = json::array();
        for (auto& span : ss["spans"])
          if (edit(span)) kept.push_back(span);
        ss["spans"] = kept;
      }
    out.push_back(j.dump());
  }
  write_lines(p, out);
}

std::int64_t attr_int(const json& span, const std::string& key) {
  for (const auto& a : span["attributes"])
    if (a["key"] == key) return std::stoll(a["value"]["intValue"].get<std::string>());
  return -1;
}

void set_attr_int(json& span, const std::string& key, std::int64_t v) {
  for (auto& a : span["attributes"])
    if (a["key"] == key) a["value"] = {{"intValue", std::to_string(v)}};
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

TEST_F(LensCli, ABatchDeliveredTwiceFailsNamingRankFileAndLine) {
  // Rank 2's first batch appended again at the end, as a retried export or
  // a repeated upload leaves it: its spans arrive after their step was
  // checked, and each is the same span again.
  fs::path dir = copy("delivered-twice");
  auto lines = read_lines(dir / "rank-2.otlp.jsonl");
  const std::size_t again = lines.size() + 1;
  lines.push_back(lines.front());
  write_lines(dir / "rank-2.otlp.jsonl", lines);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(", rank 2: rank-2.otlp.jsonl line " + std::to_string(again) +
                          " repeats a span read before (a batch delivered twice)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("every step is one trace"), std::string::npos) << r.output;
  // The views say what they left out.
  Result summary = run(lens("summary " + dir.string()));
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_NE(summary.output.find("left out: "), std::string::npos) << summary.output;
  EXPECT_NE(summary.output.find("repeat a span read before"), std::string::npos) << summary.output;
  // (The reader's warning on stderr left aside: only the JSON.)
  Result j = run("(" + lens("analyze " + dir.string() + " --json") + " 2>/dev/null)");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  EXPECT_GT(json::parse(j.output)["left_out"]["duplicates"].get<int>(), 0) << j.output;
}

TEST_F(LensCli, ABatchDeliveredTwiceBeforeItsStepIsReadFailsTheCheck) {
  // Rank 1's second batch again, at the end of its file (its spans may be
  // of no step: the job span, clock samples) and right after itself (its
  // step not read yet when the copy comes): every shape is a span twice.
  for (const bool in_place : {false, true}) {
    fs::path dir = copy(in_place ? "second-batch-twice-in-place" : "second-batch-twice");
    // A batch a span, as a busy exporter writes them (the run is small
    // enough for one batch a rank).
    std::vector<std::string> lines;
    for (const auto& l : read_lines(dir / "rank-1.otlp.jsonl")) {
      const json j = json::parse(l);
      for (const auto& rs : j["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& span : ss["spans"]) {
            json one = j;
            one["resourceSpans"] = json::array({rs});
            one["resourceSpans"][0]["scopeSpans"] = json::array({ss});
            one["resourceSpans"][0]["scopeSpans"][0]["spans"] = json::array({span});
            lines.push_back(one.dump());
          }
    }
    ASSERT_GE(lines.size(), 3u);
    const std::string second = lines[1];
    if (in_place)
      lines.insert(lines.begin() + 2, second);
    else
      lines.push_back(second);
    const std::size_t again = in_place ? 3 : lines.size();
    write_lines(dir / "rank-1.otlp.jsonl", lines);
    Result r = run(lens("check " + dir.string()));
    EXPECT_EQ(r.exit_code, 1) << (in_place ? "in place: " : "at the end: ") << r.output;
    EXPECT_NE(r.output.find("rank 1: rank-1.otlp.jsonl line " + std::to_string(again) +
                            " repeats a span read before (a batch delivered twice)"),
              std::string::npos)
        << r.output;
  }
}

TEST_F(LensCli, ASpanLateForItsStepIsNotCheckedAndFailsUnlessAllowed) {
  // A span of step 0 on rank 2, new (not a repeat), written after every
  // step: it reaches the reader after step 0 was checked.
  fs::path dir = copy("late-span");
  auto lines = read_lines(dir / "rank-2.otlp.jsonl");
  json late;
  for (const auto& l : lines) {
    const json line = json::parse(l);
    for (const auto& rs : line["resourceSpans"])
      for (const auto& ss : rs["scopeSpans"])
        for (const auto& sp : ss["spans"])
          if (sp["name"] == "megatron.train_step" && attr_int(sp, "dl.step") == 0) {
            late = line;
            json note = sp;
            note["name"] = "user.note";
            note["parentSpanId"] = sp["spanId"];
            note["spanId"] = "00000000000abcde";
            note["attributes"] = json::array();
            note["links"] = json::array();
            late["resourceSpans"] = json::array({rs});
            late["resourceSpans"][0]["scopeSpans"] = json::array({ss});
            late["resourceSpans"][0]["scopeSpans"][0]["spans"] = json::array({note});
          }
  }
  ASSERT_FALSE(late.is_null());
  lines.push_back(late.dump());
  write_lines(dir / "rank-2.otlp.jsonl", lines);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL 1 spans arrived after their step had been checked and were not "
                          "checked (the first: rank 2, rank-2.otlp.jsonl line " +
                          std::to_string(lines.size()) +
                          ", user.note 00000000000abcde of step 0); --allow-late to pass anyway"),
            std::string::npos)
      << r.output;
  Result allowed = run(lens("check " + dir.string() + " --allow-late"));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("note: 1 spans arrived after their step"), std::string::npos)
      << allowed.output;
  Result summary = run(lens("summary " + dir.string()));
  EXPECT_NE(summary.output.find("left out: 1 spans that arrived after their step was read; lens "
                                "check names them"),
            std::string::npos)
      << summary.output;
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
      dom.output, m,
      std::regex(
          R"re(data-ready="lanes=(\d+) links=(\d+) spans=(\d+) critical=(\d+) waits=(\d+) chunks=(\d+)")re")))
      << dom.output.substr(0, 2000);
  EXPECT_EQ(std::stoi(m[1]), 4);
  EXPECT_EQ(std::stoi(m[2]), linked);
  EXPECT_GT(std::stoi(m[3]), 0);
  // The step analysis over the spans: each drawn step's critical path
  // (at least one compute per stage of a 4-stage step) and its waits.
  EXPECT_GE(std::stoi(m[4]), 2 * 4) << "2 steps";
  EXPECT_GT(std::stoi(m[5]), 0);
  EXPECT_EQ(std::stoi(m[6]), 0) << "not interleaved: no chunks";
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
      // Microseconds from the run's first span (a run of seconds), not since
      // the epoch: a double keeps their sub-microsecond digits.
      EXPECT_GE(e["ts"].get<double>(), 0);
      EXPECT_LT(e["ts"].get<double>(), 1.0e9);
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
      // A process per rank, named by rank and stage.
      const std::string service =
          trace["processes"][s["processID"].get<std::string>()]["serviceName"];
      EXPECT_TRUE(std::regex_match(service, std::regex(R"(megatron-lm r\d s\d)"))) << service;
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

// The Jaeger export read back: every span of the files with every
// attribute, typed as in OTLP (numbers as numbers at full precision), and
// every rank's whole resource as its process's tags; nothing lost.
TEST_F(LensCli, JaegerExportRoundTripsEveryAttributeWithItsType) {
  const fs::path out = base_ / "jaeger-typed.json";
  Result r = run(lens("export " + run_dir_.string() + " --jaeger " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  const json exported = json::parse(in);
  // The typed value a Jaeger tag must carry for an OTLP AnyValue.
  const auto expected_tag = [](const json& v) -> std::pair<std::string, json> {
    if (v.contains("intValue")) return {"int64", std::stoll(v["intValue"].get<std::string>())};
    if (v.contains("doubleValue")) return {"float64", v["doubleValue"]};
    if (v.contains("boolValue")) return {"bool", v["boolValue"]};
    return {"string", v.value("stringValue", "")};
  };
  std::map<std::string, json> jaeger_spans;  // span id -> span
  std::map<std::string, json> processes;     // process id -> process
  for (const auto& trace : exported["data"]) {
    for (const auto& sp : trace["spans"]) jaeger_spans[sp["spanID"]] = sp;
    for (const auto& [id, p] : trace["processes"].items()) processes[id] = p;
  }
  std::size_t spans = 0, attributes = 0;
  for (const auto& e : fs::directory_iterator(run_dir_))
    for (const auto& l : read_lines(e.path())) {
      const json line = json::parse(l);
      for (const auto& rs : line["resourceSpans"]) {
        std::string process;
        for (const auto& a : rs["resource"]["attributes"])
          if (a["key"] == "dl.rank") process = "p" + a["value"]["intValue"].get<std::string>();
        ASSERT_TRUE(processes.count(process)) << process;
        std::map<std::string, json> process_tags;
        for (const auto& t : processes[process]["tags"]) process_tags[t["key"]] = t;
        for (const auto& a : rs["resource"]["attributes"]) {
          const auto [type, value] = expected_tag(a["value"]);
          ASSERT_TRUE(process_tags.count(a["key"])) << "resource " << a["key"];
          EXPECT_EQ(process_tags[a["key"]]["type"], type) << a["key"];
          EXPECT_EQ(process_tags[a["key"]]["value"], value) << a["key"];
        }
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& sp : ss["spans"]) {
            ++spans;
            ASSERT_TRUE(jaeger_spans.count(sp["spanId"])) << sp["name"];
            std::map<std::string, json> tags;
            for (const auto& t : jaeger_spans[sp["spanId"]]["tags"]) tags[t["key"]] = t;
            for (const auto& a : sp.value("attributes", json::array())) {
              ++attributes;
              const auto [type, value] = expected_tag(a["value"]);
              ASSERT_TRUE(tags.count(a["key"])) << sp["name"] << " " << a["key"];
              EXPECT_EQ(tags[a["key"]]["type"], type) << sp["name"] << " " << a["key"];
              EXPECT_EQ(tags[a["key"]]["value"], value) << sp["name"] << " " << a["key"];
            }
          }
      }
    }
  EXPECT_EQ(jaeger_spans.size(), spans) << "one Jaeger span per span of the files";
  EXPECT_GT(attributes, 0u);
  // --plain-service-name keeps the name the live OTLP path uses.
  Result plain = run(
      lens("export " + run_dir_.string() + " --jaeger " + out.string() + " --plain-service-name"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  std::ifstream again(out);
  const json plain_export = json::parse(again);
  for (const auto& trace : plain_export["data"])
    for (const auto& [id, p] : trace["processes"].items())
      EXPECT_EQ(p["serviceName"], "megatron-lm") << id;
}

TEST_F(LensCli, UsageErrorsExitWithTwo) {
  EXPECT_EQ(run(lens("")).exit_code, 2);
  EXPECT_EQ(run(lens("frobnicate x")).exit_code, 2);
  EXPECT_EQ(run(lens("timeline " + run_dir_.string() + " -o /tmp/x.html --steps a-b")).exit_code,
            2);
}

// --- `lens check` finds every broken invariant (altered copies of the run) ---

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_F(LensCli, NonSourceStepSpanWithAParentFails) {
  fs::path dir = copy("step-with-parent");
  edit_spans(dir / "rank-1.otlp.jsonl", [](json& s) {
    if (s["name"] == "megatron.train_step" && attr_int(s, "dl.step") == 1)
      s["parentSpanId"] = "0123456789abcdef";
    return true;
  });
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "step 1, rank 1: step span has a parent (0123456789abcdef)"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "[megatron.train_step ")) << r.output;
}

TEST_F(LensCli, LinkedSpanRemovedOrWithoutItsAttributesFails) {
  fs::path dir = copy("linked-count");
  bool removed = false;
  edit_spans(dir / "rank-1.otlp.jsonl", [&](json& s) {
    if (s["name"] != "megatron.pp.recv_forward.linked") return true;
    if (!removed) {
      removed = true;  // step 0's first linked receive on stage 1
      return false;
    }
    json kept = json::array();
    for (auto& a : s["attributes"])
      if (a["key"] != "dl.microbatch_id") kept.push_back(a);
    s["attributes"] = kept;
    return true;
  });
  ASSERT_TRUE(removed);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Stage 1 of 4 with 4 microbatches: min(2, 4) warmup receives + 1.
  EXPECT_TRUE(contains(
      r.output, "step 0, rank 1: 2 linked spans where stage 1 of 4 with 4 microbatches has 3"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: linked span has no dl.microbatch_id")) << r.output;
}

TEST_F(LensCli, StageNotBelowThePipelineSizeFails) {
  fs::path dir = copy("stage-too-big");
  edit_spans(dir / "rank-3.otlp.jsonl", [](json& s) {
    if (s["name"] == "megatron.train_step") set_attr_int(s, "dl.pipeline_parallel.rank", 4);
    return true;
  });
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "step 0, rank 3: stage 4 is not below the pipeline size 4"))
      << r.output;
}

TEST_F(LensCli, DuplicateSpanIdInATraceFails) {
  fs::path dir = copy("duplicate-span");
  auto lines = read_lines(dir / "rank-2.otlp.jsonl");
  // A forward span of step 0, written a second time in a line of its own.
  std::string copy_line;
  for (const auto& l : lines) {
    json j = json::parse(l);
    for (auto& rs : j["resourceSpans"])
      for (auto& ss : rs["scopeSpans"])
        for (auto& span : ss["spans"])
          if (copy_line.empty() && span["name"] == "megatron.microbatch.forward") {
            json one = j;
            one["resourceSpans"] = json::array({rs});
            one["resourceSpans"][0]["scopeSpans"] = json::array({ss});
            one["resourceSpans"][0]["scopeSpans"][0]["spans"] = json::array({span});
            copy_line = one.dump();
          }
  }
  ASSERT_FALSE(copy_line.empty());
  lines.insert(lines.begin(), copy_line);
  write_lines(dir / "rank-2.otlp.jsonl", lines);
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // The copy is read first; the original, read after it, is the repeat.
  EXPECT_TRUE(contains(r.output, "rank 2: rank-2.otlp.jsonl line ")) << r.output;
  EXPECT_TRUE(contains(r.output, "repeats a span read before (a batch delivered twice)"))
      << r.output;
}

TEST_F(LensCli, TwoFilesForOneRankFail) {
  fs::path dir = copy("two-files");
  fs::copy_file(dir / "rank-1.otlp.jsonl", dir / "rank-1-requeued.otlp.jsonl");
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "rank 1: 2 trace files say they are this rank (rank-1-requeued.otlp.jsonl, "
                       "rank-1.otlp.jsonl)"))
      << r.output;
}

TEST_F(LensCli, TraceIdSharedByTwoStepsFails) {
  fs::path dir = copy("shared-trace");
  // Step 1's trace id becomes step 0's on every rank.
  std::string trace0, trace1;
  for (const auto& l : read_lines(dir / "rank-0.otlp.jsonl"))
    for (const json line = json::parse(l); const auto& rs : line["resourceSpans"])
      for (const auto& ss : rs["scopeSpans"])
        for (const auto& span : ss["spans"])
          if (span["name"] == "megatron.train_step")
            (attr_int(span, "dl.step") == 0 ? trace0 : trace1) = span["traceId"].get<std::string>();
  ASSERT_FALSE(trace0.empty());
  ASSERT_FALSE(trace1.empty());
  for (int rank = 0; rank < 4; ++rank)
    edit_spans(dir / ("rank-" + std::to_string(rank) + ".otlp.jsonl"), [&](json& s) {
      if (s["traceId"] == trace1) s["traceId"] = trace0;
      for (auto& l : s["links"])
        if (l["traceId"] == trace1) l["traceId"] = trace0;
      return true;
    });
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(
      r.output, "step 1: trace id " + trace0 + " was already step 0's: two steps share one trace"))
      << r.output;
}

TEST_F(LensCli, ExportFilterLeavingOutTheSourceIsUnverifiableNotAFailure) {
  // dp=1 keeps replica 1 only: rank 0, whose step span every link targets,
  // did not export. In pipeline scope, pp=1 keeps the last stage of each
  // replica: no first stage exported.
  for (const char* env :
       {"LENS_EXPORT_FILTER=dp=1", "LENS_EXPORT_FILTER=pp=1 LENS_TRACE_SCOPE=pipeline"}) {
    const fs::path traces = base_ / "filtered-traces";
    fs::remove_all(traces);
    Result t = run("env " + std::string(env) + " " + std::string(LENS_TRAIN_BIN) +
                   " --pp 2 --dp 2 --microbatches 3 --steps 2 --layers 2 --hidden 16"
                   " --microbatch-size 4 --otel-enabled=true --otel-span-groups per_step"
                   " --trace-dir " +
                   traces.string());
    ASSERT_EQ(t.exit_code, 0) << t.output;
    fs::path dir;
    for (const auto& e : fs::directory_iterator(traces)) dir = e.path();
    Result r = run(lens("check " + dir.string()));
    EXPECT_EQ(r.exit_code, 0) << env << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "links point at ranks the export filter left out"))
        << env << "\n"
        << r.output;
  }
}

// --- the reader survives any file ---

TEST_F(LensCli, DeeplyNestedLineIsBadInputForEveryCommandAndNeverACrash) {
  fs::path dir = copy("deep");
  auto lines = read_lines(dir / "rank-1.otlp.jsonl");
  // ~200 KB: a kvlistValue nested 100,000 deep inside an attribute.
  std::string value;
  for (int i = 0; i < 50000; ++i) value += R"({"kvlistValue":{"values":[{"key":"k","value":)";
  value += "{}";
  for (int i = 0; i < 50000; ++i) value += "}]}}";
  lines.insert(
      lines.begin() + 1,
      R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef","name":"x","attributes":[{"key":"deep","value":)" +
          value + "}]}]}]}]}");
  write_lines(dir / "rank-1.otlp.jsonl", lines);
  const std::string file = (dir / "rank-1.otlp.jsonl").string();
  for (const std::string& command :
       {"check " + dir.string(), "summary " + dir.string(),
        "timeline " + dir.string() + " -o " + (base_ / "deep.html").string(),
        "export " + dir.string() + " --perfetto " + (base_ / "deep-perfetto.json").string(),
        "export " + dir.string() + " --jaeger " + (base_ / "deep-jaeger.json").string()}) {
    Result r = run(lens(command));
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output.substr(0, 2000);
    EXPECT_TRUE(contains(r.output, file + ":2: not an OTLP/JSON request: nested deeper than 64"))
        << command << "\n"
        << r.output.substr(0, 2000);
  }
  // upload skips the line, says so, and sends the rest (here to a closed port).
  Result up =
      run(lens("upload " + file + " --endpoint http://127.0.0.1:9/v1/traces --max-attempts 1"));
  EXPECT_EQ(up.exit_code, 1) << up.output.substr(0, 2000);
  EXPECT_TRUE(contains(up.output, file + ":2: skipped, not an OTLP/JSON request: nested deeper"))
      << up.output.substr(0, 2000);
}

TEST_F(LensCli, LineLongerThanTheLimitIsBadInput) {
  fs::path dir = copy("long-line");
  {
    std::ofstream out(dir / "rank-2.otlp.jsonl", std::ios::app | std::ios::binary);
    const std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 65; ++i) out << chunk;  // 65 MiB, no newline
  }
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output.substr(0, 2000);
  EXPECT_TRUE(contains(r.output, "rank-2.otlp.jsonl:")) << r.output.substr(0, 2000);
  EXPECT_TRUE(contains(r.output, "the line is longer than 67108864 bytes (the reader's limit)"))
      << r.output.substr(0, 2000);
}

TEST_F(LensCli, IdsInEitherCaseAndOmittedDefaultsAreRead) {
  fs::path dir = copy("uppercase");
  for (int rank = 0; rank < 4; ++rank) {
    const fs::path f = dir / ("rank-" + std::to_string(rank) + ".otlp.jsonl");
    edit_spans(f, [](json& s) {
      auto upper = [](json& v) {
        std::string t = v;
        for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        v = t;
      };
      upper(s["traceId"]);
      upper(s["spanId"]);
      if (s.contains("parentSpanId")) upper(s["parentSpanId"]);
      for (auto& l : s["links"]) {
        upper(l["traceId"]);
        upper(l["spanId"]);
      }
      if (s["links"].empty()) s.erase("links");  // proto3 JSON leaves empty arrays out
      return true;
    });
    auto lines = read_lines(f);
    lines.push_back(R"({"resourceSpans":[{"resource":{"attributes":[]}}]})");  // no scopeSpans
    lines.push_back("{}");                                                     // no resourceSpans
    write_lines(f, lines);
  }
  Result r = run(lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "4 ranks, 2 steps")) << r.output;
}

TEST_F(LensCli, NumbersAndIdsAreParsedStrictly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("startTimeUnixNano":"12abc")", "startTimeUnixNano is not an integer"},
      {R"("parentSpanId":"0123")", "parentSpanId '0123' is not 16 hex digits"},
      {R"("spanId":"00000000000000000")", "spanId '00000000000000000' is not 16 hex digits"},
  };
  for (const auto& [field, message] : cases) {
    fs::path dir = copy("strict");
    auto lines = read_lines(dir / "rank-3.otlp.jsonl");
    lines.push_back(
        R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef","name":"x",)" +
        field + "}]}]}]}");
    if (field.starts_with(R"("spanId")"))
      lines.back() =
          R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef",)" +
          field + "}]}]}]}";
    write_lines(dir / "rank-3.otlp.jsonl", lines);
    Result r = run(lens("check " + dir.string()));
    EXPECT_EQ(r.exit_code, 2) << field << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "rank-3.otlp.jsonl:" + std::to_string(lines.size()) + ":"))
        << field << "\n"
        << r.output;
    EXPECT_TRUE(contains(r.output, message)) << field << "\n" << r.output;
  }
}

TEST_F(LensCli, OutOfMemoryEndsAsExitTwoWithAMessage) {
  fs::path dir = copy("huge-line");
  {
    // One valid 40 MB line: its parsed form needs several times that.
    std::ofstream out(dir / "rank-0.otlp.jsonl", std::ios::app | std::ios::binary);
    out << R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef","name":"x","attributes":[)";
    for (int i = 0; i < 500000; ++i)
      out << (i ? "," : "") << R"({"key":"k)" << i << R"(","value":{"intValue":"1"}})";
    out << "]}]}]}]}\n";
  }
  // Under a 300 MB address-space limit the line cannot be parsed.
  Result r = run("ulimit -v 300000; " + lens("check " + dir.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output.substr(0, 2000);
  EXPECT_TRUE(contains(r.output, "rank-0.otlp.jsonl:")) << r.output.substr(0, 2000);
  EXPECT_TRUE(contains(r.output, ": out of memory (")) << r.output.substr(0, 2000);
}

// --- timeline and exports ---

TEST_F(LensCli, TimelineKeepsLongNamesWholeAndRefusesAnEmptyRange) {
  fs::path dir = copy("long-name");
  const std::string name = "megatron.custom." + std::string(3000, 'n');
  edit_spans(dir / "rank-0.otlp.jsonl", [&](json& s) {
    if (s["name"] == "megatron.optimizer.step") s["name"] = name;
    return true;
  });
  const fs::path html = base_ / "long-name.html";
  Result r = run(lens("timeline " + dir.string() + " -o " + html.string() + " --steps 0-1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(page, "data-detail=\"" + name + " | rank 0 | step ")) << "name cut short";
  EXPECT_TRUE(contains(page, "</svg>"));

  const fs::path none = base_ / "none.html";
  Result e = run(lens("timeline " + run_dir_.string() + " -o " + none.string() + " --steps 5-6"));
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_TRUE(contains(e.output, "no step in --steps 5-6 (the run has steps 0-1)")) << e.output;
  EXPECT_FALSE(fs::exists(none));
  EXPECT_EQ(
      run(lens("timeline " + run_dir_.string() + " -o " + none.string() + " --steps 3x")).exit_code,
      2);
}

TEST_F(LensCli, PerfettoFlowsBindToTheirSlices) {
  const fs::path out = base_ / "perfetto-flows.json";
  Result r = run(lens("export " + run_dir_.string() + " --perfetto " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  json j = json::parse(in);
  EXPECT_GT(std::stoll(j["otherData"]["lens.time_origin_unix_ns"].get<std::string>()),
            1600000000LL * 1000000000);
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;  // (pid, tid)
  double first = 1e300;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") {
      slices[{e["pid"], e["tid"]}].push_back(
          {e["ts"], e["ts"].get<double>() + e["dur"].get<double>()});
      first = std::min(first, e["ts"].get<double>());
    }
  EXPECT_EQ(first, 0.0);  // rebased to the run's first span
  int flows = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "s" && e["ph"] != "f") continue;
    ++flows;
    const double ts = e["ts"];
    bool bound = false;
    for (const auto& [from, to] : slices[{e["pid"], e["tid"]}]) bound |= from <= ts && ts <= to;
    EXPECT_TRUE(bound) << e.dump();
  }
  EXPECT_GT(flows, 0);
}

TEST_F(LensCli, JaegerExportWritesEachTraceOnceWithExactDurationsAndStatus) {
  fs::path dir = copy("jaeger-late");
  // A span of step 0 that reaches the file only after the last step (as a
  // span that ends late does), and a failed span.
  auto lines = read_lines(dir / "rank-1.otlp.jsonl");
  std::string late;
  std::vector<std::string> kept;
  for (const auto& l : lines) {
    json j = json::parse(l);
    bool moved = false;
    for (auto& rs : j["resourceSpans"])
      for (auto& ss : rs["scopeSpans"]) {
        json rest = json::array();
        for (auto& span : ss["spans"]) {
          if (late.empty() && !moved && span["name"] == "megatron.microbatch.forward") {
            json one = j;
            one["resourceSpans"] = json::array({rs});
            one["resourceSpans"][0]["scopeSpans"] = json::array({ss});
            one["resourceSpans"][0]["scopeSpans"][0]["spans"] = json::array({span});
            late = one.dump();
            moved = true;
            continue;
          }
          if (span["name"] == "megatron.optimizer.step")
            span["status"] = {{"code", 2}, {"message", "boom"}};
          rest.push_back(span);
        }
        ss["spans"] = rest;
      }
    kept.push_back(j.dump());
  }
  ASSERT_FALSE(late.empty());
  kept.push_back(late);
  write_lines(dir / "rank-1.otlp.jsonl", kept);

  // What the files say, span by span: start and end in nanoseconds.
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> times;
  std::size_t spans = 0;
  for (const auto& e : fs::directory_iterator(dir))
    for (const auto& l : read_lines(e.path()))
      for (const json line = json::parse(l); const auto& rs : line["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& s : ss["spans"]) {
            times[s["spanId"].get<std::string>()] = {
                std::stoll(s["startTimeUnixNano"].get<std::string>()),
                std::stoll(s["endTimeUnixNano"].get<std::string>())};
            ++spans;
          }

  const fs::path out = base_ / "jaeger-late.json";
  // Raw clocks: the times as the files have them.
  Result r = run(lens("export " + dir.string() + " --jaeger " + out.string() + " --raw-clock"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  json j = json::parse(in);
  std::set<std::string> trace_ids;
  std::size_t written = 0;
  int errors = 0;
  for (const auto& trace : j["data"]) {
    EXPECT_TRUE(trace_ids.insert(trace["traceID"]).second)
        << "trace " << trace["traceID"] << " twice";
    for (const auto& s : trace["spans"]) {
      ++written;
      ASSERT_TRUE(times.count(s["spanID"].get<std::string>())) << s.dump();
      const auto [start, end] = times.at(s["spanID"].get<std::string>());
      EXPECT_EQ(s["startTime"].get<std::int64_t>(), start / 1000);
      EXPECT_EQ(s["startTime"].get<std::int64_t>() + s["duration"].get<std::int64_t>(), end / 1000);
      for (const auto& t : s["tags"])
        if (t["key"] == "error") {
          EXPECT_EQ(t["value"], true);
          EXPECT_EQ(s["operationName"], "megatron.optimizer.step");
          ++errors;
        }
    }
  }
  EXPECT_EQ(written, spans);
  EXPECT_EQ(errors, 2);  // rank 1's optimizer step of each of the 2 steps
}

// A run whose ranks' clocks are skewed by the test aid (milliseconds of
// offset, tens of ppm of drift): the recorded samples find the injected
// skew, the raw views show receives before their sends, and the aligned
// ones (summary, Jaeger and Perfetto exports) show none.
class ClockAlignmentCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("lens-clock-test-" + std::to_string(getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_);
    Result r = run(std::string(LENS_TRAIN_BIN) +
                   " --pp 4 --microbatches 4 --steps 4 --layers 4 --hidden 32 --microbatch-size 8"
                   " --otel-enabled=true --otel-span-groups per_step,microbatch"
                   " --test-clock-offsets-us 0,-7000,2000,-9000"
                   " --test-clock-drift-ppm 0,40,-30,20 --trace-dir " +
                   (base_ / "traces").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const auto& e : fs::directory_iterator(base_ / "traces")) run_dir_ = e.path();
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }
  static std::string lens(const std::string& args) { return std::string(LENS_BIN) + " " + args; }

  // Per step and rank, the first send_forward's start and the first
  // recv_forward's end (µs), from a Jaeger export; then how many of the
  // stage pairs (r-1 sends, r receives) have the receive ending first.
  static int receives_before_sends(const json& jaeger) {
    std::map<std::pair<std::int64_t, int>, std::int64_t> send_start, recv_end;
    for (const auto& trace : jaeger["data"]) {
      std::int64_t step = -1;
      for (const auto& s : trace["spans"])
        if (s["operationName"] == "megatron.train_step")
          for (const auto& t : s["tags"])
            if (t["key"] == "dl.step") step = t["value"].get<std::int64_t>();  // typed
      if (step < 0) continue;
      for (const auto& s : trace["spans"]) {
        const int rank = std::stoi(s["processID"].get<std::string>().substr(1));
        const std::int64_t start = s["startTime"], end = start + s["duration"].get<std::int64_t>();
        const auto key = std::pair{step, rank};
        if (s["operationName"] == "megatron.p2p.send_forward" &&
            (!send_start.count(key) || start < send_start[key]))
          send_start[key] = start;
        if (s["operationName"] == "megatron.p2p.recv_forward" &&
            (!recv_end.count(key) || end < recv_end[key]))
          recv_end[key] = end;
      }
    }
    int before = 0, pairs = 0;
    for (const auto& [key, end] : recv_end)
      if (auto it = send_start.find({key.first, key.second - 1}); it != send_start.end()) {
        ++pairs;
        if (end < it->second) ++before;
      }
    EXPECT_EQ(pairs, 4 * 3) << "4 steps, 3 stage pairs";
    return before;
  }

  static fs::path base_;
  static fs::path run_dir_;
};

fs::path ClockAlignmentCli::base_;
fs::path ClockAlignmentCli::run_dir_;

TEST_F(ClockAlignmentCli, SamplesFindTheInjectedSkewWithinTheirUncertainty) {
  const std::vector<double> offset_us = {0, -7000, 2000, -9000}, drift_ppm = {0, 40, -30, 20};
  std::map<int, std::vector<json>> samples;
  for (const auto& e : fs::directory_iterator(run_dir_))
    for (const auto& l : read_lines(e.path()))
      for (const json line = json::parse(l); const auto& rs : line["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& s : ss["spans"])
            if (s["name"] == "lens.clock_sync")
              samples[static_cast<int>(attr_int(s, "dl.rank"))].push_back(s);
  ASSERT_EQ(samples.size(), 4u);
  for (auto& [rank, list] : samples) {
    ASSERT_EQ(list.size(), 2u) << "rank " << rank << ": at the first step and at the end";
    for (const auto& s : list) {
      EXPECT_EQ(attr_int(s, "lens.clock.reference_rank"), 0);
      // Drift since the telemetry started: the run lasts seconds, so the
      // drift moves the truth by well under the bound; it is counted anyway
      // from the first sample.
      const double since_s = static_cast<double>(attr_int(s, "lens.clock.local_time_ns") -
                                                 attr_int(list[0], "lens.clock.local_time_ns")) /
                             1e9;
      const double truth_ns =
          (offset_us[0] - offset_us[rank]) * 1e3 + (drift_ppm[0] - drift_ppm[rank]) * 1e3 * since_s;
      const double bound_ns =
          std::max<double>(50'000, static_cast<double>(attr_int(s, "lens.clock.uncertainty_ns")));
      EXPECT_LE(std::abs(static_cast<double>(attr_int(s, "lens.clock.offset_ns")) - truth_ns),
                bound_ns)
          << "rank " << rank << ": " << s.dump();
    }
  }
}

TEST_F(ClockAlignmentCli, RawViewsShowReceivesBeforeSendsAndAlignedOnesNone) {
  Result raw = run(lens("summary " + run_dir_.string() + " --raw-clock"));
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(raw.output, m,
                                std::regex(R"(causality: (\d+) of (\d+) receives end before)")))
      << raw.output;
  EXPECT_GT(std::stoi(m[1]), 0) << raw.output;
  EXPECT_GT(std::stoi(m[2]), 0) << raw.output;

  // Aligned, a receive can still look early by up to the two ranks'
  // uncertainties (on an idle machine none does; under a loaded test run
  // some do): what the causality pass moves stays within that.
  Result aligned = run(lens("summary " + run_dir_.string()));
  ASSERT_EQ(aligned.exit_code, 0) << aligned.output;
  ASSERT_TRUE(std::regex_search(
      aligned.output, m,
      std::regex(
          R"(clock: aligned to rank 0 by 8 samples of 4 ranks \(uncertainty up to ([0-9.]+) us\); causality: (\d+) of (\d+) receives moved after their send \(by up to ([0-9.]+) us\))")))
      << aligned.output;
  EXPECT_LE(std::stod(m[4]), 2 * std::stod(m[1])) << aligned.output;
  EXPECT_LT(std::stoi(m[2]), std::stoi(m[3])) << aligned.output;

  for (const bool raw_clock : {true, false}) {
    const fs::path out = base_ / (raw_clock ? "raw.json" : "aligned.json");
    Result r = run(lens("export " + run_dir_.string() + " --jaeger " + out.string() +
                        (raw_clock ? " --raw-clock" : "")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out);
    const int before = receives_before_sends(json::parse(in));
    if (raw_clock)
      EXPECT_GT(before, 0);
    else
      EXPECT_EQ(before, 0);
  }

  const fs::path perfetto = base_ / "aligned.perfetto.json";
  Result r = run(lens("export " + run_dir_.string() + " --perfetto " + perfetto.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(perfetto);
  const json trace = json::parse(in);
  EXPECT_EQ(trace["otherData"]["lens.clock"], "aligned to rank 0");
  // Every rank's first recv_forward slice ends after the previous stage's
  // first send_forward began, on the shared axis.
  std::map<int, double> first_send, first_recv_end;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int rank = e["pid"];
    const double ts = e["ts"], end = ts + e["dur"].get<double>();
    if (e["name"] == "megatron.p2p.send_forward" &&
        (!first_send.count(rank) || ts < first_send[rank]))
      first_send[rank] = ts;
    if (e["name"] == "megatron.p2p.recv_forward" &&
        (!first_recv_end.count(rank) || end < first_recv_end[rank]))
      first_recv_end[rank] = end;
  }
  for (int rank = 1; rank < 4; ++rank)
    EXPECT_GE(first_recv_end[rank], first_send[rank - 1]) << "rank " << rank;
}

// A copy of the run with each line rewritten by `edit` (its resource's
// dl.rank and its spans), for the tampered-run tests.
fs::path tampered_copy(const fs::path& run_dir, const fs::path& out,
                       const std::function<void(std::int64_t, json&)>& edit) {
  fs::remove_all(out);
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(run_dir)) {
    std::ofstream o(out / e.path().filename());
    for (const auto& l : read_lines(e.path())) {
      json line = json::parse(l);
      for (auto& rs : line["resourceSpans"]) {
        std::int64_t rank = -1;
        for (const auto& a : rs["resource"]["attributes"])
          if (a["key"] == "dl.rank") rank = std::stoll(a["value"]["intValue"].get<std::string>());
        for (auto& ss : rs["scopeSpans"]) edit(rank, ss["spans"]);
      }
      o << line.dump() << "\n";
    }
  }
  return out;
}

TEST_F(ClockAlignmentCli, ARankWithoutSamplesIsReportedUnalignedInEveryView) {
  // Rank 3's clock samples removed: its spans cannot be put on rank 0's
  // clock, and every view says so instead of mixing its clock in silently.
  const fs::path dir =
      tampered_copy(run_dir_, base_ / "no-samples-rank3", [](std::int64_t rank, json& spans) {
        if (rank != 3) return;
        json kept = json::array();
        for (auto& s : spans)
          if (s["name"] != "lens.clock_sync") kept.push_back(s);
        spans = kept;
      });
  const std::string warning =
      "WARNING: rank(s) 3 have no clock samples of their process and stay on their own clock";
  for (const char* view : {"summary", "analyze"}) {
    Result r = run(lens(std::string(view) + " " + dir.string()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(warning), std::string::npos) << view << ":\n" << r.output;
    EXPECT_NE(r.output.find("by 6 samples of 3 ranks"), std::string::npos) << r.output;
    Result j = run(lens(std::string(view) + " " + dir.string() + " --json"));
    ASSERT_EQ(j.exit_code, 0) << j.output;
    EXPECT_EQ(json::parse(j.output)["clock"]["unaligned_ranks"], json::array({3})) << view;
  }
  Result timeline =
      run(lens("timeline " + dir.string() + " -o " + (base_ / "no-samples.html").string()));
  ASSERT_EQ(timeline.exit_code, 0) << timeline.output;
  EXPECT_NE(timeline.output.find(warning), std::string::npos) << timeline.output;
  // The run as recorded has none.
  Result clean = run(lens("summary " + run_dir_.string() + " --json"));
  EXPECT_EQ(json::parse(clean.output)["clock"]["unaligned_ranks"], json::array());
}

TEST_F(ClockAlignmentCli, SpansShiftedBeyondTheSamplesAreAClockErrorNamingBothRanks) {
  // Rank 2's spans (not its samples) shifted 5 ms early: far beyond the
  // samples' uncertainty (tens of µs here). Its receives from rank 1 now
  // end before rank 1's sends began; the causality pass must not hide that
  // by moving them, and names the ranks and the size.
  const std::int64_t shift_ns = 5'000'000;
  const fs::path dir =
      tampered_copy(run_dir_, base_ / "shifted-rank2", [&](std::int64_t rank, json& spans) {
        if (rank != 2) return;
        for (auto& s : spans) {
          if (s["name"] == "lens.clock_sync") continue;
          for (const char* key : {"startTimeUnixNano", "endTimeUnixNano"})
            s[key] = std::to_string(std::stoll(s[key].get<std::string>()) - shift_ns);
        }
      });
  Result table = run(lens("analyze " + dir.string()));
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("CLOCK ERROR: "), std::string::npos) << table.output;
  Result r = run(lens("analyze " + dir.string() + " --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json clock = json::parse(r.output)["clock"];
  ASSERT_GT(clock["clock_errors"].get<int>(), 0) << clock.dump(1);
  bool forward_named = false;
  for (const auto& v : clock["clock_error_list"]) {
    EXPECT_EQ(v["receiver_rank"] == 2 || v["sender_rank"] == 2, true) << v.dump();
    EXPECT_GT(v["early_us"].get<double>(), v["bound_us"].get<double>()) << v.dump();
    if (v["sender_rank"] == 1 && v["receiver_rank"] == 2) {
      forward_named = true;
      // Early by the shift, less what the receive had to spare, give or
      // take the alignment's own error (at most the bound).
      EXPECT_LE(v["early_us"].get<double>(), shift_ns / 1e3 + v["bound_us"].get<double>())
          << v.dump();
    }
  }
  EXPECT_TRUE(forward_named) << clock.dump(1);
  EXPECT_GT(clock["impossible_edges"].get<int>(), 0) << "the analysis counts what stays impossible";
  // The untouched run has none.
  Result clean = run(lens("analyze " + run_dir_.string() + " --json"));
  EXPECT_EQ(json::parse(clean.output)["clock"]["clock_errors"], 0) << clean.output;
}

// The stragglers an analysis names at `ratio` or more. The runs' injected
// slowdowns are 3x (they read 2.5x and up); with 3-4 ranks on a busy 2-core
// machine, noise alone has been named at 1.53x for 3 steps in a row
// (bench/README.md, "lens_cli under load"). So "no straggler" is judged
// where a 3x effect would show: none at 2x or more.
int stragglers_at_least(const json& a, double ratio) {
  int n = 0;
  for (const auto& s : a["stragglers"]) n += s["ratio"].get<double>() >= ratio ? 1 : 0;
  return n;
}

// The straggler the analysis names at `rank`, or null.
const json* straggler_at(const json& a, int rank) {
  for (const auto& s : a["stragglers"])
    if (s["rank"] == rank) return &s;
  return nullptr;
}

// lens analyze and lens diff over trainer runs of 3 stages: one balanced
// (with --layers 5 every stage has two linear layers, the last one's head
// included), one with stage 1 made 3x slower by the fault injection from
// the start (imbalance: the stage's, not a straggler), one with it 3x
// slower from step 4 (a straggler since step 4), and a 2-replica run with
// stage 1 slowed in replica 1 only (a straggler against its peer).
// Every injected effect is 3x against thresholds of 1.25x-1.5x, and the
// balanced run is judged only on what a 3x effect would show, so a busy
// 2-core machine cannot flip a verdict; they were repeated with a
// `yes > /dev/null` loop busy on the other core (the command and how far
// it got: bench/README.md, "lens_cli under load").
// Trainer runs made once per suite (each Suite its own), analysed by name.
template <typename Suite>
class TrainerRuns : public ::testing::Test {
 protected:
  // Runs lens-train with each (name, arguments), traced with the per_step and
  // microbatch groups, under a folder named after `prefix` and this process.
  static void make_runs(const std::string& prefix,
                        const std::vector<std::pair<std::string, std::string>>& runs,
                        const std::string& env = {}) {
    base_ = fs::temp_directory_path() / (prefix + std::to_string(getpid()));
    fs::remove_all(base_);
    for (const auto& [name, args] : runs) {
      Result r = run(env + LENS_TRAIN_BIN + args +
                     " --otel-enabled=true --otel-span-groups per_step,microbatch --trace-dir " +
                     (base_ / name).string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
      for (const auto& e : fs::directory_iterator(base_ / name)) dirs_[name] = e.path();
    }
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }
  static std::string lens(const std::string& args) { return std::string(LENS_BIN) + " " + args; }
  static json analysis(const std::string& name) {
    Result r = run(lens("analyze " + dirs_.at(name).string() + " --json"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json::parse(r.output);
  }
  static const json& stage(const json& a, int s, int replica = 0, int tensor = 0) {
    for (const auto& st : a["stages"])
      if (st["stage"] == s && st["replica"] == replica && st["tensor"] == tensor) return st;
    throw std::runtime_error("no stage " + std::to_string(s));
  }
  static inline fs::path base_;
  static inline std::map<std::string, fs::path> dirs_;
};

class AnalyzeCli : public TrainerRuns<AnalyzeCli> {
 protected:
  static void SetUpTestSuite() {
    const std::string three_stages =
        " --pp 3 --layers 5 --microbatches 8 --steps 8 --hidden 256 --microbatch-size 32"
        " --test-compute-ms 20";
    make_runs("lens-analyze-test-",
              {{"balanced", three_stages},
               {"slow", three_stages + " --slow-stage 1 --slow-factor 3"},
               {"mid", three_stages + " --slow-stage 1 --slow-factor 3 --slow-from-step 4"},
               {"replica",
                " --pp 2 --dp 2 --layers 4 --microbatches 4 --steps 6 --hidden 256 "
                "--microbatch-size 32 --test-compute-ms 20 --slow-stage 1 --slow-replica 1 "
                "--slow-factor 3"},
               // The demo's layout, stage 1 held 10 ms after each of its
               // passes at steps 4 and 7: 80 ms more in those steps.
               {"slow-ms",
                " --pp 4 --layers 4 --microbatches 4 --steps 10 --hidden 64 --microbatch-size 8 "
                "--slow-stage 1 --slow-ms 10 --slow-steps 4,7"}});
  }
};

TEST_F(AnalyzeCli, AStageSlowFromTheStartIsImbalanceWithTheLargestCriticalShare) {
  const json slow = analysis("slow");
  EXPECT_EQ(slow["steps"], 8);
  EXPECT_EQ(stragglers_at_least(slow, 2.0), 0) << slow.dump(1);
  for (const auto& st : slow["stragglers"]) EXPECT_NE(st["stage"], 1) << slow.dump(1);
  ASSERT_FALSE(slow["imbalance"].empty()) << slow.dump(1);
  EXPECT_EQ(slow["imbalance"][0]["stage"], 1) << slow.dump(1);
  EXPECT_GE(slow["imbalance"][0]["ratio"].get<double>(), 2.0) << slow.dump(1);
  EXPECT_LT(slow["imbalance"][0]["gain_ms"].get<double>(), 0) << "the step would be shorter";
  for (int s : {0, 2})
    EXPECT_GT(stage(slow, 1)["critical_share_p50"].get<double>(),
              stage(slow, s)["critical_share_p50"].get<double>())
        << "stage " << s << ": " << slow.dump(1);
  // The stage after it waits for it, measured at its receives.
  const json balanced = analysis("balanced");
  EXPECT_GT(stage(slow, 2)["late_sender_p50_ms"].get<double>(),
            2 * stage(balanced, 2)["late_sender_p50_ms"].get<double>());

  Result table = run(lens("analyze " + dirs_.at("slow").string()));
  EXPECT_NE(table.output.find("imbalance: stage 1 (rank 1)"), std::string::npos) << table.output;
  EXPECT_EQ(table.output.find("straggler: rank 1 "), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("clock: aligned to rank 0"), std::string::npos) << table.output;
}

TEST_F(AnalyzeCli, ABalancedRunNamesNoStragglerAndDiffNamesTheSlowedStage) {
  const json balanced = analysis("balanced");
  EXPECT_EQ(stragglers_at_least(balanced, 2.0), 0) << balanced.dump(1);
  // The last stage also computes the head and the loss (about 1.3x-1.5x):
  // reported as imbalance or not, it is no straggler. Stage 1 does no more
  // work; judged where a 3x effect would show (on a busy 2-core machine its
  // computes, which overlap both neighbours', can read up to ~1.6x).
  for (const auto& im : balanced["imbalance"])
    if (im["stage"] == 1) {
      EXPECT_LT(im["ratio"].get<double>(), 2.0) << balanced.dump(1);
    }
  EXPECT_LT(stage(balanced, 1)["relative"].get<double>(), 2.0) << balanced.dump(1);
  Result diff =
      run(lens("diff " + dirs_.at("balanced").string() + " " + dirs_.at("slow").string()));
  ASSERT_EQ(diff.exit_code, 0) << diff.output;
  EXPECT_NE(diff.output.find("most changed: stage 1"), std::string::npos) << diff.output;
}

TEST_F(AnalyzeCli, ASlowdownThatBeginsMidRunIsAStragglerSinceThatStep) {
  const json mid = analysis("mid");
  // The slowed rank, and no other at a 3x effect's ratio.
  ASSERT_EQ(stragglers_at_least(mid, 2.0), 1) << mid.dump(1);
  const json* found = straggler_at(mid, 1);
  ASSERT_NE(found, nullptr) << mid.dump(1);
  const json& s = *found;
  EXPECT_EQ(s["since_step"], 4);
  EXPECT_EQ(s["against"], "own_baseline");
  EXPECT_GE(s["ratio"].get<double>(), 2.0);
  EXPECT_LT(s["gain_ms"].get<double>(), 0);
  // Its first steps were balanced: if a busy machine makes them read as
  // imbalance (the middle stage's computes overlap both neighbours'), it is
  // at a ratio far below the slowdown's.
  for (const auto& im : mid["imbalance"])
    if (im["stage"] == 1) {
      EXPECT_LT(im["ratio"].get<double>(), 0.75 * s["ratio"].get<double>()) << mid.dump(1);
    }
  // Per step, the what-if of stage 1 at its baseline: nothing to gain
  // before step 4 (it is at its baseline), a large part of the step after
  // (a 3x slowdown of one stage of three). Medians over the steps of each
  // side, so one noisy step cannot flip it.
  std::vector<double> before, after;
  for (const auto& w : mid["what_if"])
    if (w["stage"] == 1)
      (w["step"].get<int>() < 4 ? before : after)
          .push_back(w["gain_at_baseline_ms"].get<double>() / w["step_ms"].get<double>());
  ASSERT_EQ(before.size(), 4u) << mid["what_if"].dump(1);
  ASSERT_EQ(after.size(), 4u);
  const auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  EXPECT_GT(median_of(before), -0.1) << mid["what_if"].dump(1);
  EXPECT_LT(median_of(after), -0.2) << mid["what_if"].dump(1);
}

TEST_F(AnalyzeCli, ARankSlowerThanItsPeerInTheOtherReplicaIsTheStraggler) {
  const json a = analysis("replica");
  ASSERT_EQ(stragglers_at_least(a, 2.0), 1) << a.dump(1);
  const json* found = straggler_at(a, 3);
  ASSERT_NE(found, nullptr) << a.dump(1);
  const json& s = *found;
  EXPECT_EQ(s["stage"], 1);
  EXPECT_EQ(s["replica"], 1);
  // Slow from the start; the first step also carries one-time costs both
  // replicas share (allocation, first calls), which on a busy machine can
  // bring its ratio under the threshold, so the run may be named from step 1.
  EXPECT_LE(s["since_step"].get<int>(), 1);
  EXPECT_EQ(s["against"], "peers");
  // Stage 1 also holds the head and the loss, so it may read as imbalance,
  // but at the healthy replica's ratio, not the slowed rank's.
  const double slowed = stage(a, 1, 1)["relative"].get<double>();
  for (const auto& im : a["imbalance"])
    if (im["stage"] == 1) {
      EXPECT_LT(im["ratio"].get<double>(), 0.75 * slowed) << a.dump(1);
    }

  // Its cost: replica 0 waits for it at the gradient sync. Replica 1 is
  // last there in most steps (all but a noisy first one, say), so the
  // path runs through it and the straggler holds a large share of it.
  const double step = a["step_p50_ms"].get<double>();
  for (int st = 0; st < 2; ++st) {
    EXPECT_GT(stage(a, st, 0)["sync_wait_p50_ms"].get<double>(), 0.25 * step) << a.dump(1);
    EXPECT_LT(stage(a, st, 1)["sync_wait_p50_ms"].get<double>(), 0.1 * step) << a.dump(1);
  }
  ASSERT_TRUE(s["others_sync_wait_ms"].is_number()) << s.dump();
  EXPECT_GT(s["others_sync_wait_ms"].get<double>(), 0.25 * step);
  // Where they waited: the trainer's sync is a blocking all-reduce, so on
  // both stages inside it.
  std::vector<int> waited_stages;
  for (const auto& at : s["others_sync_wait_at"]) {
    EXPECT_EQ(at["at"], "megatron.grads.all_reduce") << s.dump();
    for (const auto& st : at["stages"]) waited_stages.push_back(st.get<int>());
  }
  EXPECT_EQ(waited_stages, (std::vector<int>{0, 1})) << s.dump();
  int set_by_1 = 0;
  for (const auto& st : a["set_by"]) set_by_1 += st["replica"] == 1 ? 1 : 0;
  EXPECT_GE(set_by_1, 4) << a["set_by"].dump();
  EXPECT_GT(s["critical_share_p50"].get<double>(), 0.3) << s.dump();
  EXPECT_FALSE(a["variability"]["variable"].get<bool>()) << a["variability"].dump();
}

// lens analyze over 2-replica runs (pp 2 x dp 2): stage 1 slowed 3x in both
// replicas (the stage's, with both ranks, and each replica's path shows
// it); every microbatch's compute scaled by a seeded factor in [1, 5], the
// same on every stage (variable work, no straggler); and a balanced run
// (none of these). Effects are 3x and up against thresholds of 1.25x-1.5x
// and a correlation of 0.5; repeated under load with the others
// (bench/README.md, "lens_cli under load").
class DataParallelCli : public TrainerRuns<DataParallelCli> {
 protected:
  static void SetUpTestSuite() {
    const std::string layout =
        " --pp 2 --dp 2 --layers 4 --microbatches 8 --steps 6 --hidden 128 --microbatch-size 32"
        " --test-compute-ms 20";
    make_runs("lens-dp-test-", {{"both", layout + " --slow-stage 1 --slow-factor 3"},
                                {"jitter", layout + " --microbatch-jitter 5"},
                                {"balanced", layout}});
  }
};

TEST_F(DataParallelCli, AStageSlowInEveryReplicaIsTheStagesWithBothRanks) {
  const json a = analysis("both");
  EXPECT_EQ(stragglers_at_least(a, 2.0), 0) << a["stragglers"].dump(1);
  bool named = false;
  for (const auto& im : a["imbalance"])
    if (im["stage"] == 1) {
      named = true;
      EXPECT_EQ(im["ranks"], json::array({2, 3})) << im.dump();
      EXPECT_GE(im["ratio"].get<double>(), 2.0) << im.dump();
    }
  EXPECT_TRUE(named) << a.dump(1);
  // Neither replica reads 0%: each stage 1 holds most of its own replica's
  // path.
  for (int replica = 0; replica < 2; ++replica)
    EXPECT_GT(stage(a, 1, replica)["critical_share_p50"].get<double>(), 0.4)
        << "replica " << replica << ": " << a.dump(1);
  EXPECT_FALSE(a["variability"]["variable"].get<bool>()) << a["variability"].dump();
}

TEST_F(DataParallelCli, WorkThatVariesByMicrobatchIsItsOwnVerdictNotAStraggler) {
  const json a = analysis("jitter");
  const json& v = a["variability"];
  EXPECT_TRUE(v["variable"].get<bool>()) << v.dump(1);
  // The factor alone gives p90/p10 = (1 + 4 x 0.9) / (1 + 4 x 0.1) = 3.3.
  EXPECT_GE(v["spread"].get<double>(), 2.0) << v.dump(1);
  EXPECT_GE(v["correlation"].get<double>(), 0.7) << v.dump(1);
  ASSERT_EQ(v["stages"].size(), 2u);
  for (const auto& st : v["stages"]) {
    EXPECT_EQ(st["microbatches"], 6 * 8 * 2) << "every step, microbatch and replica";
    EXPECT_GE(st["max_over_min"].get<double>(), 2.0) << st.dump();
    EXPECT_GE(st["p95_ms"].get<double>(), st["p50_ms"].get<double>());
  }
  EXPECT_EQ(stragglers_at_least(a, 2.0), 0) << a["stragglers"].dump(1);
  Result table = run(lens("analyze " + dirs_.at("jitter").string()));
  EXPECT_NE(table.output.find("variable work: microbatches differ in cost alike on every stage"),
            std::string::npos)
      << table.output;
}

TEST_F(DataParallelCli, ABalancedRunHasNoStragglerNoVariableWorkAndShortSyncWaits) {
  const json a = analysis("balanced");
  EXPECT_EQ(stragglers_at_least(a, 2.0), 0) << a["stragglers"].dump(1);
  EXPECT_FALSE(a["variability"]["variable"].get<bool>()) << a["variability"].dump();
  // Judged only where a 3x effect would show: no rank waits at the sync for
  // half the step.
  const double step = a["step_p50_ms"].get<double>();
  for (const auto& st : a["stages"])
    EXPECT_LT(st["sync_wait_p50_ms"].get<double>(), 0.5 * step) << st.dump();
  ASSERT_EQ(a["set_by"].size(), 6u);
}

// Device time end to end: lens-train's stages compute on the simulated GPU
// (--test-simulated-device 4: the device runs 4 times the host's compute,
// after the host has launched it), their forward and backward spans timed on
// the device through the simulated CUDA runtime named in LENS_CUDA_RUNTIME.
// The spans keep the host's launch times as attributes, so one run is its
// own baseline: the device's durations are several times the launches', and
// what lens analyze calls compute is the device's.
class DeviceTimeCli : public TrainerRuns<DeviceTimeCli> {
 protected:
  static void SetUpTestSuite() {
    make_runs("lens-device-test-",
              {{"device",
                " --pp 2 --layers 4 --microbatches 4 --steps 4 --hidden 128 "
                "--microbatch-size 32 --test-simulated-device 4"}},
              std::string("LENS_CUDA_RUNTIME=") + LENS_SIMULATED_CUDA_RUNTIME + " ");
  }
};

TEST_F(DeviceTimeCli, ComputeSpansAreTheDevicesAndTheAnalysisReadsThem) {
  const fs::path dir = dirs_.at("device");
  ASSERT_EQ(run(lens("check " + dir.string())).exit_code, 0);
  // Per rank: each pass's device duration against its launch's, and the
  // launches' total per step.
  // rank -> step's trace id -> its launches' total (ms)
  std::map<int, std::map<std::string, double>> launch_ms_of_step;
  std::vector<double> ratios;
  for (int rank : {0, 1}) {
    for (const auto& l : read_lines(dir / ("rank-" + std::to_string(rank) + ".otlp.jsonl"))) {
      const json line = json::parse(l);
      for (const auto& rs : line["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& span : ss["spans"]) {
            const std::string name = span["name"];
            if (name != "megatron.microbatch.forward" && name != "megatron.microbatch.backward")
              continue;
            std::int64_t host_start = -1, host_end = -1;
            for (const auto& a : span["attributes"]) {
              if (a["key"] == "lens.host.start_unix_ns")
                host_start = std::stoll(a["value"]["intValue"].get<std::string>());
              if (a["key"] == "lens.host.end_unix_ns")
                host_end = std::stoll(a["value"]["intValue"].get<std::string>());
            }
            ASSERT_GT(host_start, 0) << "timed on the device: " << span.dump();
            const double device =
                static_cast<double>(std::stoll(span["endTimeUnixNano"].get<std::string>()) -
                                    std::stoll(span["startTimeUnixNano"].get<std::string>()));
            const double host = static_cast<double>(host_end - host_start);
            ratios.push_back(device / std::max(host, 1.0));
            launch_ms_of_step[rank][span["traceId"].get<std::string>()] += host / 1e6;
          }
    }
  }
  ASSERT_EQ(ratios.size(), 2u * 2 * 4 * 4) << "2 ranks x (forward, backward) x 4 mb x 4 steps";
  std::sort(ratios.begin(), ratios.end());
  // The device ran 4x the launch after it: 5x the launch, 2.5x with room.
  EXPECT_GE(ratios[ratios.size() / 2], 2.5) << "median device / launch";
  // The launches per step, p50 over the steps as the analysis' compute is
  // (a busy machine slows a launch now and then: a mean would carry it).
  std::map<int, double> launch_ms;
  for (const auto& [rank, steps] : launch_ms_of_step) {
    std::vector<double> per_step;
    for (const auto& [trace, ms] : steps) per_step.push_back(ms);
    std::sort(per_step.begin(), per_step.end());
    launch_ms[rank] = per_step[(per_step.size() - 1) / 2];
  }
  const json a = analysis("device");
  for (int rank : {0, 1}) {
    const json& st = stage(a, rank);
    EXPECT_GE(st["compute_p50_ms"].get<double>(), 2.5 * launch_ms[rank])
        << "compute is the device's, not the launches' (" << launch_ms[rank]
        << " ms per step): " << st.dump();
  }
}

// Stragglers named while the job runs (lens-train --live-every 5): pp 2 x
// dp 2, rank 3 (stage 1, replica 1) slowed 8x from step 10, and the same
// run balanced. The slowed rank is named within two meetings of its
// slowdown, at 4x or more, with an event on rank 0's step span; nobody
// else, and nobody in the balanced run, at 3x or more. (The rule names
// 1.5x; 4 ranks sharing a 2-core machine with its other core busy reached
// 2.2x by noise alone, in 20 rounds: bench/README.md.)
struct LiveLine {
  int rank = -1;
  long step = -1;
  double factor = 0;
};
std::vector<LiveLine> live_lines(const std::string& output) {
  std::vector<LiveLine> lines;
  std::istringstream in(output);
  for (std::string l; std::getline(in, l);) {
    LiveLine x;
    if (std::sscanf(l.c_str(),
                    "lens-train: live: rank %d (stage %*d, replica %*d, tensor rank %*d) is a "
                    "straggler at step %ld: %lfx",
                    &x.rank, &x.step, &x.factor) == 3)
      lines.push_back(x);
  }
  return lines;
}

TEST(LiveStragglersCli, ASlowRankIsNamedAsItHappensAndABalancedRunNamesNobody) {
  const fs::path base = fs::temp_directory_path() / ("lens-live-test-" + std::to_string(getpid()));
  fs::remove_all(base);
  const std::string layout =
      std::string(LENS_TRAIN_BIN) +
      " --pp 2 --dp 2 --layers 4 --microbatches 4 --steps 30 --hidden 128 --microbatch-size 32 "
      "--test-compute-ms 6 --live-every 5 --otel-enabled=true --otel-span-groups per_step";
  Result slow = run(layout + " --slow-rank 3 --slow-factor 8 --slow-from-step 10 --trace-dir " +
                    (base / "slow").string());
  ASSERT_EQ(slow.exit_code, 0) << slow.output;
  const auto named = live_lines(slow.output);
  const LiveLine* found = nullptr;
  for (const auto& l : named)
    if (found == nullptr && l.rank == 3 && l.step >= 10 && l.factor >= 4) found = &l;
  ASSERT_NE(found, nullptr) << slow.output;
  EXPECT_LE(found->step, 10 + 2 * 5 + 4) << "within two meetings of the slowdown";
  for (const auto& l : named)
    EXPECT_TRUE(l.rank == 3 || l.factor < 3.0) << "rank " << l.rank << " at " << l.factor << "x";
  // The event is on rank 0's step span of that step.
  fs::path run_dir;
  for (const auto& e : fs::directory_iterator(base / "slow")) run_dir = e.path();
  bool event = false;
  for (const auto& l : read_lines(run_dir / "rank-0.otlp.jsonl")) {
    const json line = json::parse(l);
    for (const auto& rs : line["resourceSpans"])
      for (const auto& ss : rs["scopeSpans"])
        for (const auto& span : ss["spans"]) {
          if (span["name"] != "megatron.train_step" || !span.contains("events")) continue;
          for (const auto& e : span["events"])
            if (e["name"] == "lens.straggler") event = true;
        }
  }
  EXPECT_TRUE(event) << "a lens.straggler event on rank 0's step span";
  Result balanced = run(layout + " --trace-dir " + (base / "balanced").string());
  ASSERT_EQ(balanced.exit_code, 0) << balanced.output;
  for (const auto& l : live_lines(balanced.output)) EXPECT_LT(l.factor, 3.0) << balanced.output;
  fs::remove_all(base);
}

// Tail selection (docs/tail-selection.md): every step held, and at each
// meeting (every 10 steps) the ranks keep the slowest step of the window:
// 10% of the steps. Stage 1 is slowed 8x at 8 known steps, one per window
// at most and none in the first (the warm-up step may be slower than any),
// so that each is its window's slowest whatever the machine does.
// Kept steps must be the same, and whole, on every rank.
std::map<int, std::set<std::int64_t>> step_spans_by_rank(const fs::path& run_dir) {
  std::map<int, std::set<std::int64_t>> steps;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    if (!e.path().string().ends_with(".otlp.jsonl")) continue;
    for (const auto& l : read_lines(e.path())) {
      const json line = json::parse(l);
      for (const auto& rs : line["resourceSpans"]) {
        int rank = -1;
        for (const auto& a : rs["resource"]["attributes"])
          if (a["key"] == "dl.rank") rank = std::stoi(a["value"]["intValue"].get<std::string>());
        for (const auto& ss : rs["scopeSpans"])
          for (const auto& span : ss["spans"]) {
            if (span["name"] != "megatron.train_step") continue;
            for (const auto& a : span["attributes"])
              if (a["key"] == "dl.step")
                steps[rank].insert(std::stoll(a["value"]["intValue"].get<std::string>()));
          }
      }
    }
  }
  return steps;
}

// `lens summary --json`'s tail selection, and how many steps it kept at a
// slowdown's onset.
json summary_tail(const fs::path& run_dir) {
  Result r = run(std::string(LENS_BIN) + " summary --json " + run_dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output.substr(r.output.find('{')));
  return j.value("tail_selection", json::object());
}
std::size_t onsets(const json& tail) {
  std::size_t n = 0;
  for (const auto& [reason, count] : tail["kept_by_reason"].items())
    if (reason.starts_with("onset")) n += count.get<std::size_t>();
  return n;
}

TEST(TailSelectionCli, EverySlowStepIsKeptWholeOnEveryRankWithinTheBudget) {
  const fs::path base = fs::temp_directory_path() / ("lens-tail-test-" + std::to_string(getpid()));
  fs::remove_all(base);
  // Not in the first window: step 0, the warm-up, may be slower than any.
  // 30 ms a pass on 8 passes: a slow step stands out of what a busy machine
  // adds to a step (5 ms did not, with the other core busy).
  const std::set<std::int64_t> slow = {17, 23, 38, 61, 99, 120, 151, 188};
  Result r = run("env LENS_TAIL_SELECTION=1 LENS_TAIL_KEEP=1 " + std::string(LENS_TRAIN_BIN) +
                 " --pp 2 --layers 4 --microbatches 4 --steps 200 --hidden 128 --microbatch-size 32"
                 " --otel-enabled=true --otel-span-groups per_step --slow-stage 1 --slow-ms 30"
                 " --slow-steps 17,23,38,61,99,120,151,188 --trace-dir " +
                 (base / "traces").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tail selection: 200 steps held, "), std::string::npos) << r.output;
  fs::path run_dir;
  for (const auto& e : fs::directory_iterator(base / "traces")) run_dir = e.path();
  const auto kept = step_spans_by_rank(run_dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.at(0), kept.at(1)) << "the same steps on every rank";
  for (std::int64_t s : slow) EXPECT_TRUE(kept.at(0).count(s)) << "slow step " << s;
  // The budget, one step in ten, and besides it only where a rank's
  // slowdown began (none is injected: noise past 2.5x, if any, says so).
  const json tail = summary_tail(run_dir);
  EXPECT_EQ(tail["held"], 200);
  EXPECT_EQ(tail["meetings"], 20);
  EXPECT_EQ(tail["kept_by_reason"]["slowest"], 20);
  EXPECT_EQ(kept.at(0).size(), tail["kept"].size());
  EXPECT_EQ(kept.at(0).size(), 20u + onsets(tail));
  EXPECT_EQ(tail["not_selected"], 200 - static_cast<int>(kept.at(0).size()));
  // Whole: lens check finds every kept step one trace, every link resolved.
  Result check = run(std::string(LENS_BIN) + " check " + run_dir.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find(std::to_string(kept.at(0).size()) + " steps"), std::string::npos)
      << check.output;
  Result summary = run(std::string(LENS_BIN) + " summary " + run_dir.string());
  EXPECT_NE(summary.output.find("tail selection: 200 steps held, " +
                                std::to_string(kept.at(0).size()) + " kept ("),
            std::string::npos)
      << summary.output;
  fs::remove_all(base);
}

// The same choice in every replica and on every rank when the step
// contexts are derived, each pipeline is its own trace (pipeline scope) and
// the ranks' clocks are skewed: the decision reads durations only.
TEST(TailSelectionCli, DerivedContextsPipelineScopeAndSkewedClocksKeepTheSameSteps) {
  const fs::path base =
      fs::temp_directory_path() / ("lens-tail-scope-test-" + std::to_string(getpid()));
  fs::remove_all(base);
  Result r = run("env LENS_TAIL_SELECTION=1 LENS_TAIL_KEEP=1 LENS_TRACE_SCOPE=pipeline " +
                 std::string(LENS_TRAIN_BIN) +
                 " --pp 2 --dp 2 --layers 4 --microbatches 4 --steps 40 --hidden 128"
                 " --microbatch-size 32 --step-context derived --live-every 10"
                 " --test-clock-offsets-us 0,25000,-40000,90000"
                 " --otel-enabled=true --otel-span-groups per_step --slow-stage 1 --slow-replica 1"
                 " --slow-ms 30 --slow-steps 14,27 --trace-dir " +
                 (base / "traces").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::path run_dir;
  for (const auto& e : fs::directory_iterator(base / "traces")) run_dir = e.path();
  const auto kept = step_spans_by_rank(run_dir);
  ASSERT_EQ(kept.size(), 4u);
  for (int rank = 1; rank < 4; ++rank) EXPECT_EQ(kept.at(rank), kept.at(0)) << "rank " << rank;
  EXPECT_TRUE(kept.at(0).count(14) && kept.at(0).count(27)) << "the slow steps";
  EXPECT_EQ(kept.at(0).size(), 4u + onsets(summary_tail(run_dir))) << "one a window";
  Result check = run(std::string(LENS_BIN) + " check " + run_dir.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
  fs::remove_all(base);
}

// lens over tensor-parallel runs (pp 2 x tp 2: ranks 0, 1 stage 0's TP
// ranks, 2, 3 stage 1's), traced with per_step (its communication group
// holds the TP collectives) and microbatch: one with rank 3 (stage 1, TP rank 1) slowed 4x between
// its collectives, one balanced. The slowdown is 4x against a 1.5x threshold, and the balanced run
// is judged where a 4x effect would show; repeated under load with the others (bench/README.md,
// "lens_cli under load").
class TensorParallelCli : public TrainerRuns<TensorParallelCli> {
 protected:
  static void SetUpTestSuite() {
    const std::string layout =
        " --pp 2 --tp 2 --layers 4 --microbatches 4 --steps 6 --hidden 128 --microbatch-size 32";
    make_runs("lens-tp-test-",
              {{"slow-rank", layout + " --slow-rank 3 --slow-factor 4"}, {"balanced", layout}});
  }
};

TEST_F(TensorParallelCli, ASlowTpRankIsNamedByRankWithItsPeersWaitsAtTheCollectives) {
  const json a = analysis("slow-rank");
  EXPECT_EQ(a["tensor_parallel"], 2);
  ASSERT_EQ(stragglers_at_least(a, 2.0), 1) << a["stragglers"].dump(1);
  const json* found = straggler_at(a, 3);
  ASSERT_NE(found, nullptr) << a["stragglers"].dump(1);
  EXPECT_EQ((*found)["stage"], 1);
  EXPECT_EQ((*found)["tensor"], 1);
  EXPECT_EQ((*found)["replica"], 0);
  // Its peer (rank 2) waits for it at the collectives: most of what rank 3
  // computes (3 of every 4 parts of it are the injected wait).
  ASSERT_FALSE((*found)["peers_collective_wait_ms"].is_null()) << found->dump(1);
  const json& slow = stage(a, 1, 0, 1);
  const json& peer = stage(a, 1, 0, 0);
  EXPECT_GT((*found)["peers_collective_wait_ms"].get<double>(),
            0.5 * slow["compute_p50_ms"].get<double>())
      << a["stages"].dump(1);
  EXPECT_EQ(peer["collective_last_peer"], 1) << peer.dump(1);
  EXPECT_GT(peer["collective_wait_p50_ms"].get<double>(),
            2 * slow["collective_wait_p50_ms"].get<double>())
      << a["stages"].dump(1);
  // Compute is the rank's own: the slowed rank's, not its peer's, is large.
  EXPECT_GT(slow["compute_p50_ms"].get<double>(), 2 * peer["compute_p50_ms"].get<double>())
      << a["stages"].dump(1);
  Result table = run(lens("analyze " + dirs_.at("slow-rank").string()));
  EXPECT_NE(table.output.find("straggler: rank 3 (stage 1, replica 0, tensor rank 1)"),
            std::string::npos)
      << table.output;
  EXPECT_NE(table.output.find("its TP peers (stage 1, replica 0) wait"), std::string::npos)
      << table.output;
}

TEST_F(TensorParallelCli, ABalancedTpRunNamesNoStragglerAndItsColumnsAreMeasured) {
  const json a = analysis("balanced");
  EXPECT_EQ(stragglers_at_least(a, 2.0), 0) << a["stragglers"].dump(1);
  ASSERT_EQ(a["stages"].size(), 4u);
  for (const auto& st : a["stages"]) {
    for (const char* column : {"compute_p50_ms", "late_sender_p50_ms", "late_receiver_p50_ms",
                               "transfer_p50_ms", "collective_wait_p50_ms", "rest_p50_ms"})
      EXPECT_GE(st[column].get<double>(), 0) << column << ": " << st.dump();
    EXPECT_GT(st["compute_p50_ms"].get<double>(), 0) << st.dump();
  }
  // The path is no longer than the step.
  for (const auto& s : a["set_by"])
    EXPECT_LE(s["critical_path_ms"].get<double>(), s["step_ms"].get<double>() + 1e-6) << s.dump();
}

TEST_F(TensorParallelCli, CheckSummaryTimelineAndExportsShowEveryTpRank) {
  const std::string dir = dirs_.at("slow-rank").string();
  Result check = run(lens("check " + dir));
  EXPECT_EQ(check.exit_code, 0) << check.output;
  Result summary = run(lens("summary " + dir));
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_NE(summary.output.find("tp ms"), std::string::npos) << summary.output;
  const json sj = json::parse(run(lens("summary " + dir + " --json")).output);
  std::set<int> with_collectives;
  for (const auto& row : sj["rows"])
    if (row["collective_ms"].get<double>() > 0) with_collectives.insert(row["rank"].get<int>());
  EXPECT_EQ(with_collectives, (std::set<int>{0, 1, 2, 3}));
  // The timeline: a lane per rank, a stage's TP ranks side by side.
  const fs::path html = base_ / "tp-wave.html";
  Result timeline = run(lens("timeline " + dir + " -o " + html.string() + " --steps 2-3"));
  ASSERT_EQ(timeline.exit_code, 0) << timeline.output;
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::size_t> at;
  for (const char* lane : {"rank 0 · stage 0 · dp 0 tp 0", "rank 1 · stage 0 · dp 0 tp 1",
                           "rank 2 · stage 1 · dp 0 tp 0", "rank 3 · stage 1 · dp 0 tp 1"}) {
    at.push_back(page.find(lane));
    EXPECT_NE(at.back(), std::string::npos) << lane;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << "lanes in stage order";
  EXPECT_NE(page.find("wait at collective: for TP rank 1"), std::string::npos);
  // Both exports take it, naming each rank's TP rank.
  const fs::path perfetto = base_ / "tp-perfetto.json", jaeger = base_ / "tp-jaeger.json";
  ASSERT_EQ(run(lens("export " + dir + " --perfetto " + perfetto.string())).exit_code, 0);
  ASSERT_EQ(run(lens("export " + dir + " --jaeger " + jaeger.string())).exit_code, 0);
  std::ifstream pin(perfetto);
  const json pj = json::parse(pin);
  std::set<std::string> processes;
  for (const auto& e : pj["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
  EXPECT_TRUE(processes.count("rank 3 · stage 1 · dp 0 tp 1")) << json(processes).dump();
  std::ifstream jin(jaeger);
  const json jj = json::parse(jin);
  std::set<std::string> services;
  for (const auto& t : jj["data"])
    for (const auto& [id, p] : t["processes"].items()) services.insert(p["serviceName"]);
  EXPECT_TRUE(services.count("megatron-lm r3 s1 t1")) << json(services).dump();
}

TEST_F(AnalyzeCli, EveryRanksColumnsAddUpToItsStep) {
  for (const char* name : {"balanced", "slow"}) {
    const json a = analysis(name);
    for (const auto& st : a["stages"]) {
      EXPECT_EQ(st["unmatched_transfers"], 0) << name << ": " << st.dump();
      // p50s of each column do not add up exactly; each step's do (the
      // unit tests check that): here, that no column is negative and the
      // p2p columns are measured at all.
      for (const char* column : {"compute_p50_ms", "late_sender_p50_ms", "late_receiver_p50_ms",
                                 "transfer_p50_ms", "rest_p50_ms"})
        EXPECT_GE(st[column].get<double>(), 0) << name << " " << column;
      EXPECT_GT(st["transfer_p50_ms"].get<double>(), 0) << name << ": " << st.dump();
    }
  }
}

// Per step the columns add up to each stage's step span: in --per-step
// (printed to 3 decimals, so to 7 halves of the last digit) and in the
// --json per_step rows (exactly).
TEST_F(AnalyzeCli, PerStepEveryStagesColumnsAddUpToItsStepSpan) {
  const json a = analysis("slow-ms");
  ASSERT_EQ(a["per_step"].size(), 10u * 4u) << a.dump(1);
  std::int64_t previous = -1;
  for (const auto& row : a["per_step"]) {
    double sum = 0;
    for (const char* column : {"compute_ms", "late_sender_ms", "late_receiver_ms", "transfer_ms",
                               "collective_wait_ms", "sync_wait_ms", "rest_ms"})
      sum += row[column].get<double>();
    EXPECT_NEAR(sum, row["stage_step_ms"].get<double>(), 1e-6) << row.dump();
    EXPECT_GE(row["step"].get<std::int64_t>(), previous) << "in step order";
    previous = row["step"];
  }
  Result r = run(lens("analyze --per-step " + dirs_.at("slow-ms").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream text(r.output);
  std::string line;
  int rows = 0;
  while (std::getline(text, line)) {
    // "  step stage rank dp | step = compute late-snd late-rcv transfer sync rest"
    const auto bar = line.find(" | ");
    if (bar == std::string::npos || line.find("compute") != std::string::npos) continue;
    std::istringstream numbers(line.substr(bar + 3));
    double step = 0, part = 0, sum = 0;
    std::string equals;
    numbers >> step >> equals;
    ASSERT_EQ(equals, "=") << line;
    int parts = 0;
    while (numbers >> part) {
      sum += part;
      ++parts;
    }
    EXPECT_EQ(parts, 6) << line;
    EXPECT_NEAR(sum, step, 7 * 0.0005 + 1e-9) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 40) << r.output;
}

// --slow-ms adds a fixed delay the run's noise cannot hide: the slowed
// steps are longer than the run's other steps by at least half the 80 ms
// held (the rest the other stages' idle time may absorb), and twice their
// median.
TEST_F(AnalyzeCli, SlowMsMakesTheChosenStepsUnmistakablySlow) {
  const json a = analysis("slow-ms");
  std::map<std::int64_t, double> step_ms;
  for (const auto& row : a["set_by"]) step_ms[row["step"]] = row["step_ms"];
  ASSERT_EQ(step_ms.size(), 10u) << a.dump(1);
  std::vector<double> others;
  for (const auto& [step, ms] : step_ms)
    if (step != 0 && step != 4 && step != 7) others.push_back(ms);
  std::sort(others.begin(), others.end());
  const double median = others[others.size() / 2];
  for (std::int64_t slow : {4, 7})
    EXPECT_GT(step_ms.at(slow), std::max(median + 40, 2 * median))
        << "step " << slow << ", median " << median;
}

// A `lens report` page rendered in headless Chromium: what its script
// counted (charts drawn, canvases, waves, errors) and what its charts hold
// (#rendered: each chart's datasets as the page drew them).
struct RenderedReport {
  int charts = -1, canvases = -1, waves = -1, errors = -1;
  json drawn;
  std::string dom;
};

std::string html_unescape(std::string text) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&nbsp;", "\u00a0"}, {"&amp;", "&"}})
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + 1))
      text.replace(at, from.size(), to);
  return text;
}

// The unescaped text of the element that `open_tag` opens, up to the next
// tag ("" when there is none).
std::string element_text(const std::string& dom, const std::string& open_tag) {
  const std::size_t at = dom.find(open_tag);
  if (at == std::string::npos) return {};
  const std::size_t begin = at + open_tag.size();
  return html_unescape(dom.substr(begin, dom.find('<', begin) - begin));
}

RenderedReport render_in_chromium(const fs::path& html, const fs::path& profile) {
  RenderedReport out;
  Result dom =
      run("timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic "
          "--no-first-run --disable-background-networking --disable-component-update "
          "--disable-sync --user-data-dir=" +
          profile.string() + " --dump-dom file://" + html.string());
  EXPECT_EQ(dom.exit_code, 0) << dom.output.substr(0, 2000);
  out.dom = dom.output;
  std::smatch m;
  const std::size_t ready = dom.output.find("data-ready=");
  const std::string ready_text =
      ready == std::string::npos ? std::string() : dom.output.substr(ready, 80);
  if (!std::regex_search(
          ready_text, m,
          std::regex(R"re(data-ready="charts=(\d+) canvases=(\d+) waves=(\d+) errors=(\d+)")re"))) {
    ADD_FAILURE() << "the page's script did not finish: " << dom.output.substr(0, 2000);
    return out;
  }
  out.charts = std::stoi(m[1]);
  out.canvases = std::stoi(m[2]);
  out.waves = std::stoi(m[3]);
  out.errors = std::stoi(m[4]);
  // (std::regex recurses per character: the large elements found by hand.)
  const std::string drawn = element_text(dom.output, R"(<pre id="rendered" hidden="">)");
  if (!drawn.empty())
    out.drawn = json::parse(drawn);
  else
    ADD_FAILURE() << "no #rendered";
  return out;
}

void expect_near(double drawn, double expected, const std::string& what) {
  EXPECT_NEAR(drawn, expected, 1e-9 + 1e-9 * std::abs(expected)) << what;
}

// Every number a report's charts hold, against `lens analyze --json` of the
// same run (steps not bucketed).
void expect_report_holds_the_analysis(const json& drawn, const json& a) {
  // Step time per step, p50 and p95.
  const json& step = drawn["chart-step"]["datasets"];
  ASSERT_EQ(step[0]["data"].size(), a["set_by"].size());
  for (std::size_t i = 0; i < a["set_by"].size(); ++i) {
    EXPECT_EQ(step[0]["data"][i][0], a["set_by"][i]["step"]);
    expect_near(step[0]["data"][i][1], a["set_by"][i]["step_ms"], "step time " + std::to_string(i));
  }
  int lines = 0;
  for (const auto& d : step) {
    const std::string label = d["label"];
    const char* key = label.rfind("p50 ", 0) == 0   ? "step_p50_ms"
                      : label.rfind("p95 ", 0) == 0 ? "step_p95_ms"
                                                    : nullptr;
    if (key == nullptr) continue;
    ++lines;
    for (const auto& p : d["data"]) expect_near(p[1], a[key], label);
  }
  EXPECT_EQ(lines, 2) << "p50 and p95 marked";
  // A marker where each straggler began, and one per imbalanced stage.
  for (const auto& s : a["stragglers"]) {
    bool marked = false;
    for (const auto& d : step)
      marked |= d["label"].get<std::string>().find("straggler: rank " +
                                                   std::to_string(s["rank"].get<int>())) == 0 &&
                d["data"][0][0] == s["since_step"];
    EXPECT_TRUE(marked) << s.dump() << step.dump();
  }
  for (const auto& s : a["imbalance"]) {
    bool marked = false;
    for (const auto& d : step)
      marked |= d["label"].get<std::string>().find("imbalance: stage " +
                                                   std::to_string(s["stage"].get<int>())) == 0;
    EXPECT_TRUE(marked) << s.dump();
  }
  // Each stage's columns per step: compute as measured, and the four add
  // up to its step span.
  const json& stages = a["stages"];
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string id = "chart-stage-" + std::to_string(i);
    ASSERT_TRUE(drawn.contains(id)) << id;
    const json& sets = drawn[id]["datasets"];
    ASSERT_EQ(sets.size(), 4u);
    EXPECT_EQ(sets[0]["label"], "compute");
    std::size_t rows = 0;
    for (const auto& w : a["what_if"]) {
      if (w["stage"] != stages[i]["stage"] || w["replica"] != stages[i]["replica"] ||
          w["tensor"] != stages[i]["tensor"])
        continue;
      ASSERT_LT(rows, sets[0]["data"].size());
      EXPECT_EQ(sets[0]["data"][rows][0], w["step"]);
      expect_near(sets[0]["data"][rows][1], w["compute_ms"], id + " compute");
      double sum = 0;
      for (const auto& d : sets) sum += d["data"][rows][1].get<double>();
      EXPECT_NEAR(sum, w["stage_step_ms"].get<double>(), 1e-6) << id << " step " << w["step"];
      ++rows;
    }
    EXPECT_EQ(rows, sets[0]["data"].size()) << id;
    EXPECT_GT(rows, 0u) << id;
    // Its share of the critical path, p50 and p95.
    expect_near(drawn["chart-critical"]["datasets"][0]["data"][i],
                100 * stages[i]["critical_share_p50"].get<double>(), id + " critical p50");
    expect_near(drawn["chart-critical"]["datasets"][1]["data"][i],
                100 * stages[i]["critical_share_p95"].get<double>(), id + " critical p95");
  }
  // The bubble per step against the schedule's.
  const json& bubble = drawn["chart-bubble"]["datasets"];
  std::size_t b = 0;
  for (const auto& r : a["set_by"]) {
    if (r["bubble"].is_null()) continue;
    ASSERT_LT(b, bubble[0]["data"].size());
    expect_near(bubble[0]["data"][b++][1], r["bubble"], "bubble");
  }
  EXPECT_EQ(b, bubble[0]["data"].size());
  ASSERT_EQ(bubble.size(), 2u);
  for (const auto& p : bubble[1]["data"]) expect_near(p[1], a["theoretical_bubble"], "schedule");
  // Every aligned rank's clock, within the samples' largest uncertainty.
  EXPECT_EQ(drawn["chart-clock-offset"]["datasets"].size(), a["clock"]["ranks"]);
  for (const auto& d : drawn["chart-clock-uncertainty"]["datasets"]) {
    EXPECT_FALSE(d["data"].empty());
    for (const auto& p : d["data"]) {
      EXPECT_GE(p[1].get<double>(), 0);
      EXPECT_LE(p[1].get<double>(), a["clock"]["max_uncertainty_us"].get<double>() + 1e-6);
    }
  }
}

TEST_F(AnalyzeCli, TheReportDrawsEveryChartWithTheAnalysisNumbersInChromium) {
  if (std::system("command -v chromium > /dev/null") != 0) GTEST_SKIP() << "chromium not installed";
  for (const char* name : {"mid", "replica"}) {
    SCOPED_TRACE(name);
    const fs::path html = base_ / (std::string(name) + "-report.html");
    Result r = run(lens("report " + dirs_.at(name).string() + " -o " + html.string()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json a = analysis(name);
    // Self-contained: nothing loaded from elsewhere.
    std::ifstream in(html);
    const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(std::regex_search(page, std::regex(R"re((src|href)\s*=\s*["']?(https?:)?//)re")));
    const RenderedReport rendered = render_in_chromium(html, base_ / "chromium-profile");
    EXPECT_EQ(rendered.errors, 0) << "console errors";
    // Step time, one per stage, critical share, bubble, clock offset and
    // uncertainty; each drawn on its canvas.
    EXPECT_EQ(rendered.charts, 5 + static_cast<int>(a["stages"].size()));
    EXPECT_EQ(rendered.canvases, rendered.charts);
    EXPECT_EQ(rendered.waves, 2) << "the median step and the slowest";
    expect_report_holds_the_analysis(rendered.drawn, a);
    if (std::string(name) == "mid") {
      EXPECT_FALSE(a["stragglers"].empty()) << a.dump(1);
    }
    // The analyze table, as `lens analyze` prints it.
    Result table = run(lens("analyze " + dirs_.at(name).string()));
    EXPECT_EQ(element_text(rendered.dom, R"(<pre id="analyze">)"), table.output);
  }
}

TEST_F(AnalyzeCli, ARunWithoutComputeSpansSaysWhatToRecord) {
  const fs::path dir = base_ / "no-microbatch";
  Result r = run(std::string(LENS_TRAIN_BIN) +
                 " --pp 2 --steps 2 --otel-enabled=true --otel-span-groups per_step --trace-dir " +
                 dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::path run_dir;
  for (const auto& e : fs::directory_iterator(dir)) run_dir = e.path();
  Result a = run(lens("analyze " + run_dir.string()));
  EXPECT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("0 steps analysed"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("microbatch"), std::string::npos) << a.output;
}

// A 10,000-step run: its report is written within a 512 MiB address space
// (the run's files are over 100 MB; the analysis keeps a few figures per
// step and stage, the page two steps' spans), is small, and renders with
// every series bucketed to 1,000 points whose means are the analysis's.
TEST(LongRunReport, TenThousandStepsInBoundedMemoryAndTheChartsBucketed) {
  if (std::system("command -v chromium > /dev/null") != 0) GTEST_SKIP() << "chromium not installed";
  const fs::path base =
      fs::temp_directory_path() / ("lens-long-report-" + std::to_string(getpid()));
  fs::remove_all(base);
  Result r = run(std::string(LENS_TRAIN_BIN) +
                 " --pp 2 --microbatches 2 --steps 10000 --layers 2 --hidden 8 --microbatch-size 1"
                 " --otel-enabled=true --otel-span-groups per_step,microbatch --trace-dir " +
                 (base / "traces").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::path dir;
  for (const auto& e : fs::directory_iterator(base / "traces")) dir = e.path();
  const fs::path html = base / "report.html";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const std::string limit;  // sanitizers reserve address space of their own
#else
  const std::string limit = "ulimit -v 524288; ";
#endif
  Result report = run("bash -c '" + limit + LENS_BIN + " report " + dir.string() + " -o " +
                      html.string() + "'");
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("10000 steps, charts over steps by 10"), std::string::npos)
      << report.output;
  EXPECT_LT(fs::file_size(html), 1u << 20) << "a 10,000-step page under 1 MiB";
  const RenderedReport rendered = render_in_chromium(html, base / "chromium-profile");
  EXPECT_EQ(rendered.errors, 0);
  EXPECT_EQ(rendered.charts, 7) << "step, 2 stages, critical share, bubble, 2 clock charts";
  EXPECT_EQ(rendered.waves, 2);
  Result analyze = run(std::string(LENS_BIN) + " analyze --json " + dir.string());
  ASSERT_EQ(analyze.exit_code, 0);
  const json a = json::parse(analyze.output);
  ASSERT_EQ(a["set_by"].size(), 10000u);
  const json& step = rendered.drawn["chart-step"]["datasets"];
  ASSERT_EQ(step[0]["data"].size(), 1000u);
  ASSERT_EQ(step[1]["data"].size(), 1000u);  // each bucket's slowest step
  for (std::size_t k = 0; k < 1000; ++k) {
    double sum = 0, most = 0;
    for (std::size_t i = 10 * k; i < 10 * k + 10; ++i) {
      sum += a["set_by"][i]["step_ms"].get<double>();
      most = std::max(most, a["set_by"][i]["step_ms"].get<double>());
    }
    EXPECT_EQ(step[0]["data"][k][0], a["set_by"][10 * k]["step"]);
    EXPECT_NEAR(step[0]["data"][k][1].get<double>(), sum / 10, 1e-9 * sum) << k;
    EXPECT_NEAR(step[1]["data"][k][1].get<double>(), most, 1e-9 * most) << k;
  }
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(rendered.drawn["chart-stage-" + std::to_string(i)]["datasets"][0]["data"].size(),
              1000u);
  fs::remove_all(base);
}

// An interleaved run (--virtual-stages 2) with stage 1 slowed: lens check
// passes it, lens analyze names the slowed stage and puts the schedule's
// theoretical bubble beside the measured one, and the timeline tells the
// chunks apart.
TEST(InterleavedCli, CheckAnalyzeAndTimelineUnderstandChunks) {
  const fs::path base =
      fs::temp_directory_path() / ("lens-interleaved-test-" + std::to_string(getpid()));
  fs::remove_all(base);
  Result r = run(std::string(LENS_TRAIN_BIN) +
                 " --pp 2 --virtual-stages 2 --layers 4 --microbatches 4 --steps 4 --hidden 64"
                 " --microbatch-size 16 --otel-enabled=true --otel-span-groups all"
                 " --slow-stage 1 --slow-factor 3 --trace-dir " +
                 base.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::path dir;
  for (const auto& e : fs::directory_iterator(base)) dir = e.path();
  const std::string lens = std::string(LENS_BIN) + " ";
  Result check = run(lens + "check " + dir.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;

  Result analyze = run(lens + "analyze " + dir.string());
  ASSERT_EQ(analyze.exit_code, 0) << analyze.output;
  EXPECT_NE(analyze.output.find("pipeline: 2 stages of 2 chunks (interleaved), 4 microbatches"),
            std::string::npos)
      << analyze.output;
  EXPECT_NE(analyze.output.find("theoretical (P-1)/(VM+P-1) = 0.111"), std::string::npos)
      << analyze.output;
  EXPECT_NE(analyze.output.find("imbalance: stage 1 (rank 1)"), std::string::npos)
      << analyze.output;

  const fs::path html = base / "wave.html";
  Result timeline =
      run(lens + "timeline " + dir.string() + " -o " + html.string() + " --steps 0-1");
  ASSERT_EQ(timeline.exit_code, 0) << timeline.output;
  if (std::system("command -v chromium > /dev/null") != 0) GTEST_SKIP() << "chromium not installed";
  Result dom =
      run("timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic "
          "--no-first-run --disable-background-networking --disable-component-update "
          "--disable-sync --user-data-dir=" +
          (base / "chromium-profile").string() + " --dump-dom file://" + html.string());
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom.output, m, std::regex(R"re(lanes=(\d+) .* chunks=(\d+)")re")))
      << dom.output.substr(0, 2000);
  EXPECT_EQ(std::stoi(m[1]), 2);
  EXPECT_EQ(std::stoi(m[2]), 2) << "the two chunks drawn apart";
  fs::remove_all(base);
}

}  // namespace
