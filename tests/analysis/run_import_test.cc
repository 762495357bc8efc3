// The import of other layouts (run_import.h), table by table: protobuf
// records built byte by byte from the OTLP field numbers, each malformation
// a ReadError naming the file and offset; base64 ids; Jaeger and Tempo
// wrappers; other services' batches; a rank's batches put back in order.
#include "opened_run.h"
#include "run_import.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "run_reader.h"

namespace lens::analysis {
namespace {

namespace fs = std::filesystem;

// ---- a protobuf writer, by hand ----
std::string varint(std::uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  return out + static_cast<char>(v);
}
std::string tag(int field, int wire) {
  return varint((static_cast<std::uint64_t>(field) << 3) | wire);
}
std::string len_field(int field, const std::string& bytes) {
  return tag(field, 2) + varint(bytes.size()) + bytes;
}
std::string fixed64_field(int field, std::uint64_t v) {
  std::string out = tag(field, 1);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}
std::string int_attribute(const std::string& key, std::int64_t v) {
  return len_field(1, key) + len_field(2, tag(3, 0) + varint(static_cast<std::uint64_t>(v)));
}
std::string bytes_of(std::uint64_t hi, std::uint64_t lo, int n) {
  std::string out;
  for (int i = 7; i >= 0; --i) out += static_cast<char>((hi >> (8 * i)) & 0xFF);
  if (n == 16)
    for (int i = 7; i >= 0; --i) out += static_cast<char>((lo >> (8 * i)) & 0xFF);
  return out;
}
// A request with one resource of `rank` and one span ending at `end`.
std::string request(int rank, std::uint64_t span, std::uint64_t end) {
  const std::string s = len_field(1, bytes_of(0x1111, 0x2222, 16)) +
                        len_field(2, bytes_of(span, 0, 8)) + len_field(5, "work") +
                        fixed64_field(7, end - 10) + fixed64_field(8, end) +
                        len_field(9, int_attribute("dl.microbatch_id", 1));
  const std::string resource = len_field(1, int_attribute("dl.rank", rank));
  return len_field(1, len_field(1, resource) + len_field(2, len_field(2, s)));
}
std::string prefixed(const std::string& record) {
  const auto n = static_cast<std::uint32_t>(record.size());
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)} +
         record;
}
std::string zstd(const std::string& bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 1));
  return out;
}

class RunImport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lens-import-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "in");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path input(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / "in" / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // The error importing `p` gives ("" when none).
  std::string error_of(const fs::path& p) {
    try {
      import_run(p, dir_ / ("out-" + p.filename().string()));
    } catch (const ReadError& e) {
      return e.what();
    }
    return {};
  }
  std::vector<SpanRow> spans_of_rank(const fs::path& out, int rank) {
    RankFileReader r(out / ("rank-" + std::to_string(rank) + ".otlp.jsonl"));
    while (r.next_line()) {
    }
    return r.take().spans;
  }
  fs::path dir_;
};

TEST_F(RunImport, ProtobufRecordsGoToTheirRanksInTheOrderTheirSpansEnded) {
  // Arrival order: rank 1's later batch first, then rank 0's, then rank 1's earlier.
  const fs::path p =
      input("traces.pb", prefixed(request(1, 0xB2, 2000)) + prefixed(zstd(request(0, 0xA1, 1500))) +
                             prefixed(request(1, 0xB1, 1000)));
  const ImportStats stats = import_run(p, dir_ / "out");
  EXPECT_EQ(stats.records, 3u);
  EXPECT_EQ(stats.batches, 3u);
  EXPECT_EQ(stats.spans, 3u);
  const auto rank1 = spans_of_rank(dir_ / "out", 1);
  ASSERT_EQ(rank1.size(), 2u);
  EXPECT_EQ(rank1[0].span_id, "00000000000000b1");
  EXPECT_EQ(rank1[1].span_id, "00000000000000b2");
  EXPECT_EQ(rank1[0].trace_id, "00000000000011110000000000002222");
  EXPECT_EQ(rank1[0].attributes.text("dl.microbatch_id"), "1");
  EXPECT_EQ(rank1[0].end_ns, 1000);
  ASSERT_EQ(spans_of_rank(dir_ / "out", 0).size(), 1u);
}

TEST_F(RunImport, EveryMalformedRecordNamesTheFileAndItsOffset) {
  const std::string good = prefixed(request(0, 0xA1, 1500));
  const std::string at = ": offset " + std::to_string(good.size()) + ": ";
  std::string frame = zstd(request(0, 0xA2, 1600));
  frame.resize(frame.size() - 4);
  struct Case {
    const char* name;
    std::string bytes;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"past-end", good + std::string("\x00\x10\x00\x00", 4) + "xy",
       "runs past the end of the file"},
      {"cut-prefix", good + std::string("\x00\x00", 2), "a length prefix cut short (2 of 4 bytes)"},
      {"group", good + prefixed(std::string("\x0b\x0c", 2)), "wire type 3"},
      {"bad-varint", good + prefixed(std::string(11, '\xff')), "a varint"},
      {"length-past-message", good + prefixed(tag(1, 2) + varint(100) + "ab"),
       "a length runs past the end of its message"},
      {"truncated-zstd", good + prefixed(frame), "zstd"},
      {"bad-id",
       good + prefixed(len_field(
                  1, len_field(1, len_field(1, int_attribute("dl.rank", 0))) +
                         len_field(2, len_field(2, len_field(1, "abc") +
                                                       len_field(2, bytes_of(1, 0, 8)))))),
       "traceId"},
  };
  for (const auto& c : cases) {
    const fs::path p = input(std::string(c.name) + ".pb", c.bytes);
    const std::string e = error_of(p);
    EXPECT_NE(e.find(p.string() + at), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.name << ": " << e;
  }
}

TEST_F(RunImport, NestedValuesPastTheLimitAreAnError) {
  std::string value = tag(3, 0) + varint(1);
  for (int i = 0; i < 40; ++i) value = len_field(5, len_field(1, value));  // arrays in arrays
  const std::string attr = len_field(1, "deep") + len_field(2, value);
  const std::string span =
      len_field(1, bytes_of(1, 2, 16)) + len_field(2, bytes_of(3, 0, 8)) + len_field(9, attr);
  const std::string req = len_field(1, len_field(1, len_field(1, int_attribute("dl.rank", 0))) +
                                           len_field(2, len_field(2, span)));
  const std::string e = error_of(input("deep.pb", prefixed(req)));
  EXPECT_NE(e.find("nested deeper than 32"), std::string::npos) << e;
}

TEST_F(RunImport, JaegerAndTempoDocumentsWithBase64Ids) {
  // Trace id 0x00..01 / span id 0x..02 in base64 (proto3 JSON's bytes).
  const std::string span =
      R"({"traceId":"AAAAAAAAAAAAAAAAAAAAAQ==","spanId":"AAAAAAAAAAI=","name":"w",)"
      R"("startTimeUnixNano":"1","endTimeUnixNano":"2"})";
  const std::string resource = R"({"attributes":[{"key":"dl.rank","value":{"intValue":"2"}}]})";
  input("jaeger.json", R"({"result": {"resourceSpans": [{"resource": )" + resource +
                           R"(, "scopeSpans": [{"spans": [)" + span + "]}]}]}}");
  input("tempo.json", "{\n \"batches\": [{\"resource\": " + resource +
                          R"(, "instrumentationLibrarySpans": [{"spans": [)" + span + "]}]}]\n}\n");
  input("other.json",
        R"({"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[)" + span +
            "]}]}]}\n");
  input("notes.txt", "not traces");
  const ImportStats stats = import_run(dir_ / "in", dir_ / "out");
  EXPECT_EQ(stats.files, 3u) << "notes.txt passed over";
  EXPECT_EQ(stats.batches, 2u);
  EXPECT_EQ(stats.foreign_spans, 1u);
  ASSERT_EQ(stats.warnings.size(), 1u);
  const auto spans = spans_of_rank(dir_ / "out", 2);
  ASSERT_EQ(spans.size(), 2u);
  for (const auto& s : spans) {
    EXPECT_EQ(s.trace_id, "00000000000000000000000000000001");
    EXPECT_EQ(s.span_id, "0000000000000002");
  }
}

TEST_F(RunImport, AFolderOfRunsIsNotReadAsOneRun) {
  for (const char* run : {"run-a", "run-b"}) {
    fs::create_directories(dir_ / "in" / run);
    std::ofstream(dir_ / "in" / run / "rank-0.otlp.jsonl") << "\n";
  }
  const std::string e = error_of(dir_ / "in");
  EXPECT_NE(e.find("holds 2 runs in lens's layout (run-a, run-b): name one of them"),
            std::string::npos)
      << e;
}

TEST_F(RunImport, TracesOfSeveralRunsAreReadForTheOneNamedByItsRunId) {
  // Two runs' rank 0 in one file, told apart by nemo.lens.run_uuid and
  // nemo.run.id; a third batch carries no run id.
  const auto batch = [](const char* key, const char* run, const char* span) {
    std::string attrs = R"({"key":"dl.rank","value":{"intValue":"0"}})";
    if (key != nullptr)
      attrs += std::string(R"(,{"key":")") + key + R"(","value":{"stringValue":")" + run + R"("}})";
    return std::string(R"({"resourceSpans":[{"resource":{"attributes":[)") + attrs +
           R"(]},"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":")" +
           span + R"(","name":"work","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]})" + "\n";
  };
  const fs::path p = input("two-runs.json", batch("nemo.lens.run_uuid", "u-1", "00000000000000a1") +
                                                batch("nemo.run.id", "n-2", "00000000000000b1") +
                                                batch(nullptr, "", "00000000000000c1"));
  const std::string e = error_of(p);
  EXPECT_NE(e.find("the traces hold 2 runs by their run id (nemo.lens.run_uuid or nemo.run.id): "
                   "n-2 (1 spans), u-1 (1 spans); name one with --run ID"),
            std::string::npos)
      << e;
  ::setenv("LENS_RUN", "u-1", 1);
  const ImportStats stats = import_run(p, dir_ / "out-u-1");
  const auto spans = spans_of_rank(dir_ / "out-u-1", 0);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].span_id, "00000000000000a1");
  EXPECT_NE(std::find(stats.warnings.begin(), stats.warnings.end(),
                      "read run u-1 of the 2 runs the traces hold"),
            stats.warnings.end());
  ::setenv("LENS_RUN", "u-3", 1);
  EXPECT_NE(error_of(p).find("no run u-3 in the traces (runs: n-2, u-1)"), std::string::npos)
      << error_of(p);
  ::unsetenv("LENS_RUN");
}

TEST_F(RunImport, AJaegerV1DocumentIsRefusedNamingTheApiToAsk) {
  const fs::path p = input("v1.json", R"({"data":[{"traceID":"1","spans":[]}]})");
  EXPECT_NE(error_of(p).find("api_v3"), std::string::npos) << error_of(p);
}

TEST_F(RunImport, AWholeFileZstdStreamCutShortNamesItsOffset) {
  std::string lines;
  for (int i = 0; i < 50; ++i)
    lines +=
        R"({"resourceSpans":[{"resource":{"attributes":[{"key":"dl.rank","value":{"intValue":"0"}}]},"scopeSpans":[{"spans":[]}]}]})"
        "\n";
  std::string stream = zstd(lines);
  stream.resize(stream.size() - 3);
  const fs::path p = input("cut.json.zst", stream);
  const std::string e = error_of(p);
  EXPECT_NE(e.find(p.string() + ": offset "), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(RunImport, AnOpenedRunHoldsItsImportUntilItsLastCopyGoes) {
  const fs::path p = input("a.pb", prefixed(request(0, 0xA1, 100)));
  fs::path first_dir;
  {
    const OpenedRun first(p);
    EXPECT_TRUE(first.imported());
    EXPECT_EQ(first.input(), p);
    first_dir = first.dir();
    ASSERT_EQ(first.files().size(), 1u);
    EXPECT_EQ(first.files()[0], first_dir / "rank-0.otlp.jsonl");
    const OpenedRun copy = first;  // the same opening, not another import
    EXPECT_EQ(copy.dir(), first_dir);
    {
      const OpenedRun second(p);  // another opening: an import of its own
      EXPECT_NE(second.dir(), first_dir);
    }
    EXPECT_TRUE(fs::exists(first_dir)) << "kept while a copy lives";
  }
  EXPECT_FALSE(fs::exists(first_dir)) << "removed with the last copy";
  // The input changed: the next opening reads it as it is now.
  std::ofstream(p, std::ios::binary | std::ios::app) << prefixed(request(3, 0xA2, 200));
  const OpenedRun again(p);
  EXPECT_TRUE(fs::exists(again.dir() / "rank-3.otlp.jsonl"));
  // A message naming the import names the input, also after it went.
  EXPECT_EQ(name_imports(first_dir.string() + "/rank-0.otlp.jsonl:3"),
            p.string() + ": imported rank-0.otlp.jsonl:3");
  // lens's own layout is read where it is.
  std::ofstream(dir_ / "rank-0.otlp.jsonl") << "\n";
  const OpenedRun own(dir_);
  EXPECT_FALSE(own.imported());
  EXPECT_EQ(own.dir(), dir_);
  EXPECT_TRUE(own.import_warnings().empty());
}

TEST_F(RunImport, OpeningWhatHoldsNoRunIsAReadErrorNamingIt) {
  try {
    const OpenedRun run(dir_ / "missing");
    FAIL() << "opened a missing run";
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()), (dir_ / "missing").string() + ": no such file or directory");
  }
}

TEST_F(RunImport, AnImportLeftBehindByAProcessThatIsGoneIsRemoved) {
  // The sweep's folder is this test's own; in it, the import of a process
  // that cannot run (a pid above any pid_max), one of this process, one of
  // process 1 (alive) and folders not named as imports.
  const fs::path temp = dir_ / "tmp";
  const std::vector<std::string> kept = {"lens-import-" + std::to_string(getpid()) + "-1",
                                         "lens-import-1-3", "lens-import-x-1", "lens-import-",
                                         "other-2147483000-1"};
  for (const auto& name : kept) fs::create_directories(temp / name);
  fs::create_directories(temp / "lens-import-2147483000-7" / "inside");
  sweep_stale_imports(temp);
  EXPECT_FALSE(fs::exists(temp / "lens-import-2147483000-7"));
  for (const auto& name : kept) EXPECT_TRUE(fs::exists(temp / name)) << name;
}

}  // namespace
}  // namespace lens::analysis
