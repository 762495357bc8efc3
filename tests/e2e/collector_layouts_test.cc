// A trainer run rewritten as a collector, Jaeger or Tempo would hold it
// (every rank's batches shuffled into one file, a rotated set, the
// collector file exporter's length-prefixed protobuf, zstd per record and
// per file, Jaeger api_v3 and Tempo documents with base64 ids): `lens
// check` gives the same verdict and `lens analyze --json` the same figures
// as on lens's own layout; malformed length prefixes and truncated zstd
// frames are read errors naming the file and offset; two copies of the
// spans still fail the check. The formats are written here from the
// collector's README (4-byte big-endian length before each record) and the
// OTLP schema (tests/support/otlp_trace.proto), not by lens's importer.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "otlp_trace.pb.h"
#include "run_command.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = lens::testing::CommandResult;
namespace otlp = lens::test::otlp;

Result run(const std::string& command) {
  return lens::testing::run_command(
      command, fs::temp_directory_path() / ("lens-layouts-out-" + std::to_string(getpid())));
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

std::string bytes_of_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

void set_value(otlp::AnyValue* v, const json& j) {
  if (j.contains("stringValue")) v->set_string_value(j["stringValue"]);
  if (j.contains("intValue")) v->set_int_value(std::stoll(j["intValue"].get<std::string>()));
  if (j.contains("boolValue")) v->set_bool_value(j["boolValue"]);
  if (j.contains("doubleValue")) v->set_double_value(j["doubleValue"]);
}

void set_attributes(google::protobuf::RepeatedPtrField<otlp::KeyValue>* out, const json& attrs) {
  for (const auto& kv : attrs) {
    auto* a = out->Add();
    a->set_key(kv["key"]);
    set_value(a->mutable_value(), kv["value"]);
  }
}

// One OTLP JSON line as the protobuf ExportTraceServiceRequest it encodes.
std::string proto_of(const std::string& line) {
  const json j = json::parse(line);
  otlp::ExportTraceServiceRequest req;
  for (const auto& rs : j["resourceSpans"]) {
    auto* out = req.add_resource_spans();
    set_attributes(out->mutable_resource()->mutable_attributes(), rs["resource"]["attributes"]);
    for (const auto& ss : rs["scopeSpans"]) {
      auto* scope = out->add_scope_spans();
      for (const auto& s : ss["spans"]) {
        auto* span = scope->add_spans();
        span->set_trace_id(bytes_of_hex(s["traceId"]));
        span->set_span_id(bytes_of_hex(s["spanId"]));
        if (s.contains("parentSpanId")) span->set_parent_span_id(bytes_of_hex(s["parentSpanId"]));
        span->set_name(s["name"]);
        if (s.contains("kind"))
          span->set_kind(static_cast<otlp::Span::SpanKind>(s["kind"].get<int>()));
        span->set_start_time_unix_nano(std::stoull(s["startTimeUnixNano"].get<std::string>()));
        span->set_end_time_unix_nano(std::stoull(s["endTimeUnixNano"].get<std::string>()));
        if (s.contains("attributes")) set_attributes(span->mutable_attributes(), s["attributes"]);
        if (s.contains("links"))
          for (const auto& l : s["links"]) {
            auto* link = span->add_links();
            link->set_trace_id(bytes_of_hex(l["traceId"]));
            link->set_span_id(bytes_of_hex(l["spanId"]));
          }
        if (s.contains("status")) {
          if (s["status"].contains("code"))
            span->mutable_status()->set_code(
                static_cast<otlp::Status::StatusCode>(s["status"]["code"].get<int>()));
          if (s["status"].contains("message"))
            span->mutable_status()->set_message(s["status"]["message"]);
        }
      }
    }
  }
  return req.SerializeAsString();
}

std::string length_prefixed(const std::string& record) {
  const auto n = static_cast<std::uint32_t>(record.size());
  std::string out{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                  static_cast<char>(n)};
  return out + record;
}

std::string zstd(const std::string& bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// Every id of a request in base64, as proto3 JSON writes bytes.
void ids_to_base64(json& rs) {
  for (auto& ss : rs["scopeSpans"])
    for (auto& s : ss["spans"]) {
      for (const char* key : {"traceId", "spanId", "parentSpanId"})
        if (s.contains(key) && !s[key].get<std::string>().empty())
          s[key] = base64(bytes_of_hex(s[key]));
      if (s.contains("links"))
        for (auto& l : s["links"]) {
          l["traceId"] = base64(bytes_of_hex(l["traceId"]));
          l["spanId"] = base64(bytes_of_hex(l["spanId"]));
        }
    }
}

// Two analyses equal to a relative 1e-9 (the order spans are summed in may
// differ by layout).
void expect_same(const json& a, const json& b, const std::string& at) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    EXPECT_NEAR(x, y, 1e-9 * std::max(1.0, std::abs(y))) << at;
    return;
  }
  ASSERT_EQ(a.type(), b.type()) << at;
  if (a.is_object()) {
    ASSERT_EQ(a.size(), b.size()) << at;
    for (const auto& [k, v] : a.items()) {
      ASSERT_TRUE(b.contains(k)) << at << "." << k;
      expect_same(v, b[k], at + "." + k);
    }
  } else if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << at;
    for (std::size_t i = 0; i < a.size(); ++i)
      expect_same(a[i], b[i], at + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(a, b) << at;
  }
}

class CollectorLayouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("lens-layouts-" + std::to_string(getpid()));
    fs::remove_all(base_);
    Result r = run(std::string(LENS_TRAIN_BIN) +
                   " --pp 2 --dp 2 --layers 4 --microbatches 4 --steps 4 --hidden 32"
                   " --microbatch-size 8 --otel-enabled=true --otel-span-groups per_step,microbatch"
                   " --trace-dir " +
                   (base_ / "traces").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const auto& e : fs::directory_iterator(base_ / "traces")) run_dir_ = e.path();
    for (const auto& e : fs::directory_iterator(run_dir_))
      if (e.path().string().ends_with(".otlp.jsonl"))
        for (auto& l : lines_of(e.path())) lines_.push_back(std::move(l));
    // Arrival order at a collector: every rank's batches interleaved.
    std::mt19937 random(7);
    std::shuffle(lines_.begin(), lines_.end(), random);
    expected_ = analysis(run_dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }

  static std::string lens(const std::string& args) { return std::string(LENS_BIN) + " " + args; }
  static json analysis(const fs::path& input) {
    Result r = run(lens("analyze --json " + input.string()));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto start = r.output.find('{');
    return json::parse(r.output.substr(start == std::string::npos ? 0 : start));
  }
  // The same verdict and figures as the run in lens's layout.
  static void expect_as_the_original(const fs::path& input) {
    SCOPED_TRACE(input.string());
    Result check = run(lens("check " + input.string()));
    EXPECT_EQ(check.exit_code, 0) << check.output;
    EXPECT_NE(check.output.find("4 ranks, 4 steps"), std::string::npos) << check.output;
    EXPECT_NE(check.output.find("every step is one trace; every link resolves"), std::string::npos)
        << check.output;
    const json a = analysis(input);
    EXPECT_EQ(a["steps"], 4);
    expect_same(a, expected_, "analyze");
  }

  static inline fs::path base_, run_dir_;
  static inline std::vector<std::string> lines_;
  static inline json expected_;
};

TEST_F(CollectorLayouts, EveryRanksBatchesShuffledIntoOneFile) {
  std::string text;
  for (const auto& l : lines_) text += l + "\n";
  write(base_ / "shuffled" / "traces.json", text);
  expect_as_the_original(base_ / "shuffled" / "traces.json");  // the file
  expect_as_the_original(base_ / "shuffled");                  // its folder
}

TEST_F(CollectorLayouts, ARotatedSetOfFiles) {
  const fs::path dir = base_ / "rotated";
  const std::vector<std::string> names = {"traces-2026-12-03T05-02-14.173.json",
                                          "traces-2026-12-03T05-09-40.001.json", "traces.json"};
  std::vector<std::string> parts(names.size());
  for (std::size_t i = 0; i < lines_.size(); ++i)
    parts[i * names.size() / lines_.size()] += lines_[i] + "\n";
  for (std::size_t i = 0; i < names.size(); ++i) write(dir / names[i], parts[i]);
  write(dir / "README.txt", "passed over\n");
  expect_as_the_original(dir);
}

TEST_F(CollectorLayouts, LengthPrefixedProtobufPlainAndZstdPerRecord) {
  std::string plain, compressed, json_records;
  for (const auto& l : lines_) {
    plain += length_prefixed(proto_of(l));
    compressed += length_prefixed(zstd(proto_of(l)));
    json_records += length_prefixed(zstd(l));  // format: json with compression: zstd
  }
  write(base_ / "proto" / "traces.pb", plain);
  write(base_ / "proto-zstd" / "traces.pb.zst", compressed);
  write(base_ / "json-zstd" / "traces.json.zst", json_records);
  expect_as_the_original(base_ / "proto" / "traces.pb");
  expect_as_the_original(base_ / "proto-zstd");
  expect_as_the_original(base_ / "json-zstd");
}

TEST_F(CollectorLayouts, AWholeFileZstdStreamOfLinesOrRecords) {
  std::string text, records;
  for (const auto& l : lines_) {
    text += l + "\n";
    records += length_prefixed(proto_of(l));
  }
  write(base_ / "stream" / "traces.json.zst", zstd(text));
  write(base_ / "stream-proto" / "traces.pb.zst", zstd(records));
  expect_as_the_original(base_ / "stream" / "traces.json.zst");
  expect_as_the_original(base_ / "stream-proto");
}

// What a user saves from Jaeger's query API v3 (/api/v3/traces/<id>) and
// from Tempo (/api/traces/<id>): a document per trace, ids in base64.
TEST_F(CollectorLayouts, JaegerApiV3AndTempoDocumentsPerTrace) {
  std::map<std::string, json> by_trace;  // trace id -> resourceSpans
  for (const auto& l : lines_) {
    const json j = json::parse(l);
    for (const auto& rs : j["resourceSpans"])
      for (const auto& ss : rs["scopeSpans"])
        for (const auto& s : ss["spans"]) {
          json one = {{"resource", rs["resource"]}, {"scopeSpans", {{{"spans", {s}}}}}};
          by_trace[s["traceId"]].push_back(one);
        }
  }
  ASSERT_GT(by_trace.size(), 4u);
  for (auto& [trace, batches] : by_trace) {
    for (auto& rs : batches) ids_to_base64(rs);
    // api_v3: {"result": {"resourceSpans": [...]}}, pretty-printed.
    write(base_ / "jaeger" / (trace + ".json"),
          json{{"result", {{"resourceSpans", batches}}}}.dump(2));
    // Tempo: {"batches": [...]} with the older instrumentationLibrarySpans.
    json tempo = batches;
    for (auto& rs : tempo) {
      rs["instrumentationLibrarySpans"] = rs["scopeSpans"];
      rs.erase("scopeSpans");
    }
    write(base_ / "tempo" / (trace + ".json"), json{{"batches", tempo}}.dump());
  }
  expect_as_the_original(base_ / "jaeger");
  expect_as_the_original(base_ / "tempo");
}

TEST_F(CollectorLayouts, AnotherServicesBatchesAreLeftOutWithAWarning) {
  std::string text;
  for (const auto& l : lines_) text += l + "\n";
  text +=
      R"({"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"web"}}]},"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef","name":"GET /","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]})"
      "\n";
  write(base_ / "mixed" / "traces.json", text);
  expect_as_the_original(base_ / "mixed");
  Result r = run(lens("summary " + (base_ / "mixed").string()));
  EXPECT_NE(r.output.find("1 spans of resources without dl.rank"), std::string::npos) << r.output;
}

TEST_F(CollectorLayouts, TwoCopiesOfTheSameSpansStillFailTheCheck) {
  std::string text;
  for (const auto& l : lines_) text += l + "\n";
  write(base_ / "twice" / "traces.json", text);
  write(base_ / "twice" / "traces-2026-12-03T05-02-14.173.json", text);
  Result r = run(lens("check " + (base_ / "twice").string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL"), std::string::npos) << r.output;
  // Every message names the input as the user gave it, never the import's
  // temporary copy.
  EXPECT_NE(r.output.find((base_ / "twice").string() + ": imported rank-"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("lens-import-"), std::string::npos) << r.output;
}

TEST_F(CollectorLayouts, AnImportStoppedByASignalLeavesNoFolderBehind) {
  // A file large enough that its import is seen under way: the command is
  // stopped once its import folder exists.
  std::string text;
  for (const auto& l : lines_) text += l + "\n";
  std::string big;
  while (big.size() < (std::size_t{48} << 20)) big += text;
  write(base_ / "big" / "traces.json", big);
  const fs::path temp = base_ / "tmp";
  fs::create_directories(temp);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("TMPDIR", temp.c_str(), 1);
    const std::string input = (base_ / "big").string();
    ::execl(LENS_BIN, LENS_BIN, "check", input.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto imports = [&] {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(temp))
      if (e.path().filename().string().starts_with("lens-import-")) ++n;
    return n;
  };
  int status = 0;
  bool stopped = false;
  for (int i = 0; i < 6000; ++i) {  // at most a minute
    if (imports() > 0) {
      ::kill(child, SIGTERM);
      stopped = true;
      break;
    }
    if (::waitpid(child, &status, WNOHANG) == child) break;
    ::usleep(10000);
  }
  ASSERT_TRUE(stopped) << "the import folder was never seen";
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_EQ(imports(), 0u) << "the stopped command's import folder was left behind";
}

TEST_F(CollectorLayouts, MalformedPrefixesAndTruncatedFramesNameTheFileAndOffset) {
  const std::string first = length_prefixed(proto_of(lines_[0]));
  // A length prefix past the end of the file, after one good record.
  const fs::path past = base_ / "bad" / "past.pb";
  write(past, first + std::string("\x7f\xff\xff\xff", 4) + "short");
  Result r = run(lens("check " + past.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(past.string() + ": offset " + std::to_string(first.size()) +
                          ": a length prefix of 2147483647 bytes runs past the end of the file"),
            std::string::npos)
      << r.output;
  // A record whose zstd frame is cut short.
  std::string frame = zstd(proto_of(lines_[1]));
  frame.resize(frame.size() - 6);
  const fs::path cut = base_ / "bad" / "cut.pb.zst";
  write(cut, first + length_prefixed(frame));
  r = run(lens("analyze " + cut.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(cut.string() + ": offset " + std::to_string(first.size()) + ": "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("zstd"), std::string::npos) << r.output;
  // A whole-file stream cut short.
  std::string text;
  for (const auto& l : lines_) text += l + "\n";
  std::string stream = zstd(text);
  stream.resize(stream.size() / 2);
  const fs::path half = base_ / "bad" / "half.json.zst";
  write(half, stream);
  r = run(lens("summary " + half.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(half.string() + ": offset "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  // Protobuf that is not OTLP (a field of wire type 3, a group).
  const fs::path group = base_ / "bad" / "group.pb";
  write(group, length_prefixed(std::string("\x0b\x0c", 2)));
  r = run(lens("check " + group.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(group.string() + ": offset 0: not an OTLP protobuf message"),
            std::string::npos)
      << r.output;
}

}  // namespace
