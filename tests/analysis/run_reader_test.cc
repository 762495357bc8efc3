// The run reader's limits and its reading of OTLP/JSON, table by table:
// lines past the length limit, nesting past the depth limit, ids in either
// case, proto3 defaults and enum names, strict numbers.
#include "run_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "json_depth.h"
#include "line_reader.h"

namespace lens::analysis {
namespace {

namespace fs = std::filesystem;

fs::path write_file(const std::string& name, const std::string& content) {
  const fs::path p = fs::temp_directory_path() /
                     ("lens-reader-" + std::to_string(getpid()) + "-" + name + ".otlp.jsonl");
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

TEST(LineReader, SplitsLinesAndRefusesOneOverTheLimit) {
  const fs::path p = write_file("lines", "ab\n\ncdef\n0123456789\nxyz");
  std::ifstream in(p, std::ios::binary);
  LineReader r(in, 8);
  std::string line;
  EXPECT_EQ(r.next(line), LineReader::Status::kLine);
  EXPECT_EQ(line, "ab");
  EXPECT_EQ(r.next(line), LineReader::Status::kLine);
  EXPECT_EQ(line, "");
  EXPECT_EQ(r.next(line), LineReader::Status::kLine);
  EXPECT_EQ(line, "cdef");
  EXPECT_EQ(r.bytes_read(), 9u);
  EXPECT_EQ(r.next(line), LineReader::Status::kTooLong);  // 10 bytes > 8
  fs::remove(p);
}

TEST(LineReader, LastLineWithoutNewlineAndLinesLongerThanItsBuffer) {
  std::string big(200000, 'x');  // longer than the reader's first buffer
  const fs::path p = write_file("big", big + "\n" + "tail");
  std::ifstream in(p, std::ios::binary);
  LineReader r(in);
  std::string line;
  EXPECT_EQ(r.next(line), LineReader::Status::kLine);
  EXPECT_EQ(line.size(), big.size());
  EXPECT_EQ(r.next(line), LineReader::Status::kUnterminated);
  EXPECT_EQ(line, "tail");
  EXPECT_EQ(r.next(line), LineReader::Status::kEnd);
  fs::remove(p);
}

TEST(LineReader, FileWithoutNewlinesStopsAtTheLimit) {
  const fs::path p = write_file("flat", std::string(5000, 'y'));
  std::ifstream in(p, std::ios::binary);
  LineReader r(in, 1000);
  std::string line;
  EXPECT_EQ(r.next(line), LineReader::Status::kTooLong);
  EXPECT_LE(line.size(), 1000u);
  fs::remove(p);
}

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_TRUE(json_depth_within("{}", 1));
  EXPECT_FALSE(json_depth_within("[{}]", 1));
  EXPECT_TRUE(json_depth_within(R"({"a":"[[[[[[","b":"\"{{{"})", 1));
  EXPECT_TRUE(json_depth_within(std::string(64, '[') + std::string(64, ']')));
  EXPECT_FALSE(json_depth_within(std::string(65, '[') + std::string(65, ']')));
  EXPECT_FALSE(json_depth_within(std::string(100000, '[')));  // no need to be valid JSON
}

std::string request(const std::string& span_fields, const std::string& resource = "") {
  return R"({"resourceSpans":[{"resource":{"attributes":[)" + resource +
         R"(]},"scopeSpans":[{"spans":[{)" + span_fields + "}]}]}]}\n";
}

RankFile read(const std::string& content) {
  const fs::path p = write_file("one", content);
  RankFileReader r(p);
  while (r.next_line()) {
  }
  fs::remove(p);
  return r.take();
}

TEST(RunReader, IdsInEitherCaseAreReadAsLowercaseAndAZeroParentIsNone) {
  const RankFile f = read(request(
      R"("traceId":"0123456789ABCDEF0123456789abcdef","spanId":"ABCDEF0123456789",)"
      R"("parentSpanId":"0000000000000000","links":[{"traceId":"FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF","spanId":"AAAAAAAAAAAAAAAA"}])"));
  ASSERT_EQ(f.spans.size(), 1u);
  EXPECT_EQ(f.spans[0].trace_id, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(f.spans[0].span_id, "abcdef0123456789");
  EXPECT_EQ(f.spans[0].parent_span_id, "");
  ASSERT_EQ(f.spans[0].links.size(), 1u);
  EXPECT_EQ(f.spans[0].links[0].second, "aaaaaaaaaaaaaaaa");
}

TEST(RunReader, Proto3DefaultsAndEnumNamesAreAccepted) {
  const RankFile f = read(
      "{}\n"
      R"({"resourceSpans":[{}]})"
      "\n" +
      request(
          R"("traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef",)"
          R"("kind":"SPAN_KIND_CLIENT","status":{"code":"STATUS_CODE_ERROR","message":"m"},)"
          R"("attributes":[{"key":"empty","value":{}},{"key":"d","value":{"doubleValue":"NaN"}}])",
          R"({"key":"dl.rank","value":{"intValue":3}})"));
  ASSERT_EQ(f.spans.size(), 1u);
  const SpanRow& s = f.spans[0];
  EXPECT_EQ(s.name, "");
  EXPECT_EQ(s.start_ns, 0);
  EXPECT_EQ(s.kind, 3);
  EXPECT_EQ(s.status_code, 2);
  EXPECT_EQ(s.status_message, "m");
  EXPECT_EQ(s.attributes.at("empty"), "");
  EXPECT_EQ(s.attributes.at("d"), "NaN");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(s.rank, 3);
}

// Each malformed line is a ReadError naming the file, the line and why.
TEST(RunReader, MalformedValuesAreErrorsNamingFileLineAndField) {
  const std::string ids =
      R"("traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef",)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {request(ids + R"("startTimeUnixNano":"12abc")"), "startTimeUnixNano is not an integer"},
      {request(ids + R"("endTimeUnixNano":"-5")"), "endTimeUnixNano is negative"},
      {request(ids + R"("startTimeUnixNano":1.5)"), "startTimeUnixNano is not an integer"},
      {request(R"("traceId":"0123456789abcdef0123456789abcdeg","spanId":"0123456789abcdef")"),
       "traceId '0123456789abcdef0123456789abcdeg' is not hex"},
      {request(R"("traceId":"00000000000000000000000000000000","spanId":"0123456789abcdef")"),
       "traceId is all zeros"},
      {request(R"("spanId":"0123456789abcdef")"), "a span has no traceId or spanId"},
      {request(ids + R"("parentSpanId":"xyz")"), "parentSpanId 'xyz' is not hex"},
      {request(ids + R"("links":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"12"}])"),
       "link spanId '12' is not 16 hex digits"},
      {request(ids + R"("attributes":[{"key":"a","value":{"intValue":"7x"}}])"),
       "intValue is not an integer"},
      {request(ids + R"("name":"x")", R"({"key":"dl.rank","value":{"stringValue":"one"}})"),
       "resource attribute dl.rank='one' is not a rank number"},
      {"[1,2]\n", "the line is not a JSON object"},
      {R"({"resourceSpans":{}})"
       "\n",
       "resourceSpans is not an array"},
      {"{" + std::string(70, '[') + std::string(70, ']') + "}\n", "nested deeper than 64 levels"},
  };
  for (const auto& [content, why] : cases) {
    const fs::path p = write_file("bad", "\n" + content);
    RankFileReader r(p);
    try {
      while (r.next_line()) {
      }
      ADD_FAILURE() << "read without error: " << content.substr(0, 200);
    } catch (const ReadError& e) {
      EXPECT_NE(std::string(e.what()).find(p.string() + ":2: not an OTLP/JSON request: " + why),
                std::string::npos)
          << e.what();
    }
    fs::remove(p);
  }
}

TEST(RunReader, LineOverTheLimitIsAnErrorNamingFileAndLine) {
  const fs::path p = write_file("long", "\n" + std::string(600, 'z') + "\n");
  RankFileReader r(p, 512);
  try {
    while (r.next_line()) {
    }
    ADD_FAILURE() << "no error";
  } catch (const ReadError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  p.string() + ":2: the line is longer than 512 bytes (the reader's limit)"),
              std::string::npos)
        << e.what();
  }
  fs::remove(p);
}

}  // namespace
}  // namespace lens::analysis
