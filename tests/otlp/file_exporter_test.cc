#include "lens/file_exporter.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lens/telemetry.h"
#include "remote_context.h"
#include "test_env.h"

namespace lens {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class FileExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lens-file-exporter-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<json> read_lines(const std::filesystem::path& file) {
    std::vector<json> lines;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) lines.push_back(json::parse(line));
    return lines;
  }

  std::filesystem::path dir_;
};

bool is_lower_hex(const std::string& s, std::size_t length) {
  if (s.size() != length) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Every object key in the document is lowerCamelCase (no '_', starts lower).
void expect_lower_camel_keys(const json& j, const std::string& path = "") {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      EXPECT_FALSE(k.empty());
      EXPECT_TRUE(std::islower(static_cast<unsigned char>(k[0]))) << path << "/" << k;
      EXPECT_EQ(k.find('_'), std::string::npos) << path << "/" << k;
      expect_lower_camel_keys(it.value(), path + "/" + k);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) expect_lower_camel_keys(v, path + "[]");
  }
}

TEST_F(FileExporterTest, WritesOneOtlpJsonRequestPerLineFieldByField) {
  TelemetryOptions opts;
  opts.enabled = true;
  opts.span_groups = "all";
  opts.run_id = "filetest";
  opts.trace_dir = dir_.string();
  opts.rank = 1;
  opts.world_size = 2;
  auto telemetry = Telemetry::create(opts, testing::fake_env({}));
  ASSERT_NE(telemetry, nullptr);
  const std::filesystem::path file = dir_ / "filetest" / "rank-1.otlp.jsonl";
  EXPECT_EQ(telemetry->trace_file(), file.string());

  Tracer tracer = telemetry->tracer("nemo.lens", "0.1.0");
  const SpanContext target = testing::remote_context("rojo=1");

  SpanContext parent_ctx, child_ctx;
  std::int64_t child_start = 0, child_end = 0;
  {
    StartOptions step_opts;
    step_opts.kind = SpanKind::kServer;
    Span step = tracer.start_span(SpanGroup::kStep, "megatron.train_step", step_opts);
    parent_ctx = step.context();
    CurrentSpanScope scope(step);
    Span linked = tracer.start_span(SpanGroup::kCommunication, "megatron.pp.recv_forward.linked");
    child_ctx = linked.context();
    linked.set_attribute("dl.pipeline_parallel.rank", 1);
    linked.set_attribute("dl.microbatch_id", std::int64_t{1} << 40);
    linked.set_attribute("ratio", 0.25);
    linked.set_attribute("ok", true);
    linked.set_attribute("quote", "a \"quoted\" \\ line\nbreak \xce\xbb");
    linked.set_attribute("strings", AttributeValue(std::vector<std::string>{"x", "y"}));
    linked.set_attribute("flags", AttributeValue(std::vector<bool>{true, false}));
    linked.add_link(target, {{"link.kind", "pp-step"}});
    linked.add_event("received", {{"bytes", 4096}});
    linked.set_status(StatusCode::kError, "late");
  }
  ASSERT_TRUE(telemetry->flush(10s));
  telemetry.reset();

  auto lines = read_lines(file);
  ASSERT_EQ(lines.size(), 1u);  // both spans in one batch, one request
  const json& req = lines[0];
  expect_lower_camel_keys(req);
  ASSERT_EQ(req["resourceSpans"].size(), 1u);
  const json& rs = req["resourceSpans"][0];

  std::map<std::string, json> resource;
  for (const auto& kv : rs["resource"]["attributes"]) resource[kv["key"]] = kv["value"];
  EXPECT_EQ(resource["service.name"]["stringValue"], "megatron-lm");
  EXPECT_EQ(resource["nemo.run.id"]["stringValue"], "filetest");
  EXPECT_EQ(resource["dl.rank"]["intValue"], "1");
  EXPECT_EQ(resource["dl.world_size"]["intValue"], "2");
  EXPECT_EQ(resource["service.instance.id"]["stringValue"], "filetest-rank1");

  ASSERT_EQ(rs["scopeSpans"].size(), 1u);
  EXPECT_EQ(rs["scopeSpans"][0]["scope"]["name"], "nemo.lens");
  EXPECT_EQ(rs["scopeSpans"][0]["scope"]["version"], "0.1.0");
  const json& spans = rs["scopeSpans"][0]["spans"];
  ASSERT_EQ(spans.size(), 2u);
  const json& linked = spans[0];  // ends first
  const json& step = spans[1];

  EXPECT_EQ(step["name"], "megatron.train_step");
  EXPECT_EQ(step["kind"], 2);
  EXPECT_TRUE(is_lower_hex(step["traceId"], 32));
  EXPECT_TRUE(is_lower_hex(step["spanId"], 16));
  EXPECT_EQ(step["traceId"], parent_ctx.trace_id.to_hex());
  EXPECT_EQ(step["spanId"], parent_ctx.span_id.to_hex());
  EXPECT_FALSE(step.contains("parentSpanId"));
  EXPECT_EQ(step["flags"], 0x101);

  EXPECT_EQ(linked["name"], "megatron.pp.recv_forward.linked");
  EXPECT_EQ(linked["kind"], 1);
  EXPECT_EQ(linked["traceId"], parent_ctx.trace_id.to_hex());
  EXPECT_EQ(linked["spanId"], child_ctx.span_id.to_hex());
  EXPECT_EQ(linked["parentSpanId"], parent_ctx.span_id.to_hex());
  ASSERT_TRUE(linked["startTimeUnixNano"].is_string());
  ASSERT_TRUE(linked["endTimeUnixNano"].is_string());
  child_start = std::stoll(linked["startTimeUnixNano"].get<std::string>());
  child_end = std::stoll(linked["endTimeUnixNano"].get<std::string>());
  EXPECT_GT(child_start, 1'600'000'000'000'000'000LL);
  EXPECT_GE(child_end, child_start);

  std::map<std::string, json> attrs;
  for (const auto& kv : linked["attributes"]) attrs[kv["key"]] = kv["value"];
  EXPECT_EQ(attrs["dl.pipeline_parallel.rank"]["intValue"], "1");
  EXPECT_EQ(attrs["dl.microbatch_id"]["intValue"], "1099511627776");
  EXPECT_EQ(attrs["ratio"]["doubleValue"], 0.25);
  EXPECT_EQ(attrs["ok"]["boolValue"], true);
  EXPECT_EQ(attrs["quote"]["stringValue"], "a \"quoted\" \\ line\nbreak \xce\xbb");
  EXPECT_EQ(attrs["strings"]["arrayValue"]["values"][1]["stringValue"], "y");
  EXPECT_EQ(attrs["flags"]["arrayValue"]["values"][0]["boolValue"], true);
  EXPECT_EQ(linked["droppedAttributesCount"], 0);

  ASSERT_EQ(linked["links"].size(), 1u);
  const json& link = linked["links"][0];
  EXPECT_EQ(link["traceId"], target.trace_id.to_hex());
  EXPECT_EQ(link["spanId"], target.span_id.to_hex());
  EXPECT_EQ(link["traceState"], "rojo=1");
  EXPECT_EQ(link["flags"], 0x301);  // sampled, remote known, remote
  EXPECT_EQ(link["attributes"][0]["key"], "link.kind");
  EXPECT_EQ(link["attributes"][0]["value"]["stringValue"], "pp-step");

  ASSERT_EQ(linked["events"].size(), 1u);
  EXPECT_EQ(linked["events"][0]["name"], "received");
  EXPECT_TRUE(linked["events"][0]["timeUnixNano"].is_string());
  EXPECT_EQ(linked["events"][0]["attributes"][0]["value"]["intValue"], "4096");

  EXPECT_EQ(linked["status"]["code"], 2);
  EXPECT_EQ(linked["status"]["message"], "late");
}

TEST_F(FileExporterTest, AppendsOneLinePerExportCall) {
  std::filesystem::path file = dir_ / "nested" / "out.jsonl";
  OtlpJsonFileExporter exporter(file);
  SpanRecord a;
  a.name = "a";
  a.context.trace_id = IdGenerator::new_trace_id();
  a.context.span_id = IdGenerator::new_span_id();
  const SpanRecord* batch[] = {&a};
  Resource r;
  r.set("service.name", std::string("svc"));
  EXPECT_EQ(exporter.export_spans(r, batch), ExportResult::kSuccess);
  EXPECT_EQ(exporter.export_spans(r, batch), ExportResult::kSuccess);
  exporter.shutdown(1s);
  EXPECT_EQ(exporter.written_lines(), 2u);
  auto lines = read_lines(file);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"], "a");
  // After shutdown, exports fail instead of writing to a closed descriptor.
  EXPECT_EQ(exporter.export_spans(r, batch), ExportResult::kFailure);
}

TEST_F(FileExporterTest, ReopeningAFileWithATornLastLineStartsOnAFreshLine) {
  // A rank killed mid-write left half a line; the requeued job (same run id)
  // appends to the same file.
  std::filesystem::create_directories(dir_);
  const std::filesystem::path file = dir_ / "rank-0.otlp.jsonl";
  std::ofstream(file, std::ios::binary) << "{\"resourceSpans\":[]}\n{\"resourceSpans\":[{\"sco";
  SpanRecord a;
  a.name = "after";
  a.context.trace_id = IdGenerator::new_trace_id();
  a.context.span_id = IdGenerator::new_span_id();
  const SpanRecord* batch[] = {&a};
  {
    OtlpJsonFileExporter exporter(file);
    EXPECT_EQ(exporter.export_spans(Resource(), batch), ExportResult::kSuccess);
    exporter.shutdown(1s);
  }
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "{\"resourceSpans\":[{\"sco");  // the torn bytes, a line of their own
  EXPECT_EQ(json::parse(lines[2])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"],
            "after");
}

TEST_F(FileExporterTest, WriteFailureIsReportedNotThrown) {
  // /dev/full accepts open and fails every write with ENOSPC.
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  OtlpJsonFileExporter exporter("/dev/full");
  SpanRecord a;
  a.name = "a";
  const SpanRecord* batch[] = {&a};
  EXPECT_EQ(exporter.export_spans(Resource(), batch), ExportResult::kFailure);
  EXPECT_EQ(exporter.failed_writes(), 1u);
}

// A file that fills up (a file size limit stands for a full disk: write(2)
// gives up part way through a line, then fails): the exporter fails those
// exports without throwing, cuts the partial line off again, and once there
// is room again it goes on appending whole lines. Runs in a child process,
// because the size limit applies to the whole process.
TEST_F(FileExporterTest, FillingUpKeepsWholeLinesAndRecoversWhenThereIsRoomAgain) {
  std::filesystem::create_directories(dir_);
  const std::filesystem::path file = dir_ / "full.jsonl";
  constexpr rlim_t kLimit = 7000;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal, as ENOSPC would be
    OtlpJsonFileExporter exporter(file);
    std::vector<SpanRecord> records(3);
    std::vector<const SpanRecord*> batch;
    for (auto& r : records) {
      r.name = "megatron.microbatch.forward";
      r.context.trace_id = IdGenerator::new_trace_id();
      r.context.span_id = IdGenerator::new_span_id();
      r.attributes.push_back({"dl.microbatch_id", std::int64_t{7}});
      batch.push_back(&r);
    }
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    const rlimit small{kLimit, limit.rlim_max};
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) ::_exit(250);
    int ok = 0, failed = 0;
    for (int i = 0; i < 20; ++i)
      (exporter.export_spans(Resource(), batch) == ExportResult::kSuccess ? ok : failed)++;
    if (ok == 0 || failed == 0 || exporter.failed_writes() != static_cast<std::uint64_t>(failed))
      ::_exit(251);
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(252);  // room again
    if (exporter.export_spans(Resource(), batch) != ExportResult::kSuccess) ::_exit(253);
    exporter.shutdown(1s);
    ::_exit(ok + 1);  // the number of whole lines the file must hold
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  const int expected_lines = WEXITSTATUS(status);
  ASSERT_LT(expected_lines, 250) << "child failed at step " << expected_lines;
  ASSERT_GE(expected_lines, 2);

  std::ifstream in(file);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    json j = json::parse(line);  // throws on a torn line
    EXPECT_EQ(j["resourceSpans"][0]["scopeSpans"][0]["spans"].size(), 3u);
  }
  EXPECT_EQ(lines, expected_lines);
}

}  // namespace
}  // namespace lens
