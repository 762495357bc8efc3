// The run reader's limits and its reading of OTLP/JSON, table by table:
// lines past the length limit, nesting past the depth limit, ids in either
// case, proto3 defaults and enum names, strict numbers.
#include "run_reader.h"

#include <gtest/gtest.h>

#include <charconv>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <random>

#include "json_depth.h"
#include "line_reader.h"
#include "reference_request_parser.h"

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


// Lines handed out where they lie in the buffer, moved to its start at a
// refill, and gathered when longer than it: the same lines, byte counts and
// statuses as splitting the file's text, whatever the lengths (around the
// buffer's 64 KiB, past it, empty, a last line without newline), and the
// room after each line readable (a read past the buffer fails under ASan).
TEST(LineReader, LinesInAndAcrossItsBufferAreTheFileSplitAtNewlines) {
  std::mt19937_64 random(53);
  for (int round = 0; round < 40; ++round) {
    std::vector<std::string> lines;
    std::string text;
    const int count = 1 + static_cast<int>(random() % 30);
    for (int i = 0; i < count; ++i) {
      static const std::size_t kLengths[] = {0, 1, 63, 64, 65535, 65536, 65537, 131072};
      const std::size_t length = random() % 3 == 0 ? kLengths[random() % std::size(kLengths)]
                                                   : random() % 90000;
      std::string line(length, ' ');
      for (auto& c : line) c = static_cast<char>('a' + random() % 26);
      lines.push_back(line);
      text += line;
      // The last line ends without a newline half the time (an empty one
      // always has it: without, it is no line).
      if (i + 1 < count || line.empty() || random() % 2 == 0) text += '\n';
    }
    const bool last_terminated = text.back() == '\n';
    const fs::path p = write_file("split", text);
    std::ifstream in(p, std::ios::binary);
    LineReader r(in, kMaxLineBytes, 64);
    std::string gather;
    std::uintmax_t bytes = 0;
    for (int i = 0; i < count; ++i) {
      std::string_view line;
      const LineReader::Status status = r.next(line, gather);
      ASSERT_EQ(status, i + 1 < count || last_terminated ? LineReader::Status::kLine
                                                         : LineReader::Status::kUnterminated)
          << "round " << round << " line " << i;
      ASSERT_EQ(line, lines[i]) << "round " << round << " line " << i;
      volatile char past = line.data() == nullptr ? 0 : line.data()[line.size() + 63];
      (void)past;
      bytes += lines[i].size() + (status == LineReader::Status::kLine ? 1 : 0);
      EXPECT_EQ(r.bytes_read(), bytes);
    }
    std::string_view end;
    EXPECT_EQ(r.next(end, gather), LineReader::Status::kEnd) << "round " << round;
    EXPECT_EQ(r.bytes_read(), text.size());
    fs::remove(p);
  }
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
  EXPECT_EQ(s.attributes.text("empty"), "");
  EXPECT_EQ(s.attributes.text("d"), "NaN");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(s.rank, 3);
}

// A pass for spans of one name: lines without it are not parsed, and of a
// line with it only the spans so named become rows (a span of another name
// is not checked there; the pass that reads every span is).
TEST(RunReader, OnlySpansNamedKeepsThoseSpansAndSkipsTheRest) {
  const std::string wanted =
      R"({"traceId":"0123456789abcdef0123456789abcdef","spanId":"0000000000000001",)"
      R"("name":"lens.clock_sync","attributes":[{"key":"k","value":{"intValue":"7"}}]})";
  const std::string other_bad = R"({"traceId":"zz","spanId":"0000000000000002","name":"x"})";
  const std::string no_name =
      R"({"traceId":"0123456789abcdef0123456789abcdef","spanId":"0000000000000003"})";
  const std::string content =
      R"({"resourceSpans":[{"resource":{"attributes":[{"key":"dl.rank","value":{"intValue":2}}]},)"
      R"("scopeSpans":[{"spans":[)" + other_bad + "," + wanted + "," + no_name + "]}]}]}\n" +
      "not json, and without the name\n";
  const fs::path p = write_file("named", content);
  RankFileReader r(p);
  r.only_spans_named("lens.clock_sync");
  std::size_t lines = 0;
  while (r.next_line()) ++lines;
  EXPECT_EQ(lines, 1u);
  const RankFile f = r.take();
  fs::remove(p);
  ASSERT_EQ(f.spans.size(), 1u);
  EXPECT_EQ(f.spans[0].span_id, "0000000000000001");
  EXPECT_EQ(f.spans[0].attributes.text("k"), "7");
  EXPECT_EQ(f.spans[0].rank, 2);
  // Read whole, the same file's bad trace id is an error naming its line.
  const fs::path q = write_file("named-all", content);
  RankFileReader all(q);
  EXPECT_THROW(
      {
        while (all.next_line()) {
        }
      },
      ReadError);
  fs::remove(q);
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
      // Named lowercased up to the digit that is not hex, as read after it.
      {request(ids + R"("parentSpanId":"ABxCD")"), "parentSpanId 'abxCD' is not hex"},
      {request(ids + R"("parentSpanId":"ABCDEF")"), "parentSpanId 'abcdef' is not 16 hex digits"},
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
      {R"({"a":)" + std::string(70, '[') + std::string(70, ']') + "}\n",
       "nested deeper than 64 levels"},
      // Deep and malformed: the first fault met.
      {"{" + std::string(70, '[') + std::string(70, ']') + "}\n", "not JSON: "},
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

// strict_int reads eight digits at a time: it gives what from_chars does
// (the whole text one decimal int64, else nothing) on edge cases and on
// 200,000 random texts of digits, signs and other bytes, 0-24 long.
TEST(RunReader, StrictIntIsFromCharsOverTheWholeText) {
  const auto reference = [](std::string_view text) -> std::optional<std::int64_t> {
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) return std::nullopt;
    return v;
  };
  for (const std::string_view text :
       {"", "-", "0", "-0", "7", "007", "12abc", "+5", " 5", "5 ", "1765000000123456789",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808",
        "-9223372036854775809", "99999999999999999999", "0000000000000000000001",
        "12345678", "123456789012345678", "1234567/", "1234567:", "12345678:12345678",
        "\xff" "2345678", "--1", "1-"}) {
    EXPECT_EQ(strict_int(text), reference(text)) << text;
  }
  std::mt19937_64 random(20261207);
  std::string bytes = "0123456789012345678901234567890123456789-+ ./:a";
  bytes += '\0';
  bytes += '\xff';
  for (int i = 0; i < 200000; ++i) {
    std::string text(random() % 25, '0');
    for (char& c : text) c = bytes[random() % bytes.size()];
    if (random() % 4 == 0 && !text.empty()) text[0] = '-';
    ASSERT_EQ(strict_int(text), reference(text)) << text;
  }
}

// ---- the On-Demand parser against the DOM reference ----------------------

// What a parse gave: the rows and resource fields, or that it failed.
std::string described(const RankFile& f);

std::string outcome(void (*parse)(RankFile&, const std::string&), const std::string& line) {
  RankFile f;
  try {
    parse(f, line);
  } catch (const std::exception&) {
    return "error";
  }
  return described(f);
}

// A file's rows and resource fields as text.
std::string described(const RankFile& f) {
  std::string out = std::to_string(f.rank) + "|" + std::to_string(f.world_size) + "|" +
                    f.run_id + "|" + f.service_name + "|" + f.trace_scope + "|" +
                    f.export_filter + "|" + std::to_string(f.replica) + "|" +
                    std::to_string(f.tensor_rank) + "|" + std::to_string(f.process) + "\n";
  for (const auto& [k, v] : f.resource) out += "r " + k + "=" + v + " " + f.resource_types.at(k) + "\n";
  for (const SpanRow& s : f.spans) {
    out += "s " + std::to_string(s.rank) + " " + std::to_string(s.process) + " " + s.trace_id +
           " " + s.span_id + " " + s.parent_span_id + " " + s.name + " " +
           std::to_string(s.start_ns) + " " + std::to_string(s.end_ns) + " " +
           std::to_string(s.kind) + " " + std::to_string(s.status_code) + " " + s.status_message +
           "\n";
    for (const Attributes::Entry a : s.attributes)
      out += "  a " + std::string(a.key) + "=" + std::string(a.text) + " " + a.type + "\n";
    for (const auto& [t, id] : s.links) out += "  l " + t + " " + id + "\n";
  }
  return out;
}

std::vector<std::string> corpus_lines() {
  std::vector<std::string> lines;
  for (const auto& e : fs::directory_iterator(LENS_READER_CORPUS)) {
    std::ifstream in(e.path(), std::ios::binary);
    for (std::string l; std::getline(in, l);)
      if (!l.empty() && l.size() < (1u << 20)) lines.push_back(l);
  }
  const std::string ids =
      R"("traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef")";
  // Every value type, members in unusual orders, escapes, proto3 defaults.
  for (const std::string& span : {
           ids + R"(,"attributes":[{"value":{"intValue":"7"},"key":"v first"}])",
           ids + R"(,"attributes":[{"key":"s","value":{"stringValue":"caf\u00e9 \"q\" \\ \n"}}])",
           ids + R"(,"attributes":[{"key":"b","value":{"boolValue":true}},{"key":"d","value":{"doubleValue":0.1}}])",
           ids + R"(,"attributes":[{"key":"d","value":{"doubleValue":1e300}},{"key":"n","value":{"doubleValue":-3}}])",
           ids + R"(,"attributes":[{"key":"inf","value":{"doubleValue":"-Infinity"}},{"key":"x","value":{"bytesValue":"AAEC"}}])",
           ids + R"(,"attributes":[{"key":"a","value":{"arrayValue":{"values":[{"intValue":"1"},{"stringValue":"z"}]}}}])",
           ids + R"(,"attributes":[{"key":"kv","value":{"kvlistValue":{"values":[{"value":{"intValue":"2"},"key":"k"}]}}}])",
           ids + R"(,"attributes":[{"key":"both","value":{"intValue":"1","stringValue":"s"}},{"key":"bad int","value":{"stringValue":"s","intValue":"x"}}])",
           ids + R"(,"attributes":[{"key":"dup","value":{"intValue":"1"}},{"key":"dup","value":{"intValue":"2"}},{"key":null},7,{}])",
           ids + R"(,"attributes":[{"key":"u","value":{"unknownValue":{"b":1,"a":2}}},{"key":"e","value":{}}])",
           ids + R"(,"name":null,"kind":"7","status":{"message":null,"code":2},"status2":[1,{"x":[]}])",
           ids + R"(,"links":[{"spanId":"0123456789ABCDEF","traceId":"0123456789ABCDEF0123456789ABCDEF","attributes":[]}],"links2":1)",
           ids + R"(,"startTimeUnixNano":12,"endTimeUnixNano":"13","events":[{"name":"e","timeUnixNano":"1"}])",
           R"("endTimeUnixNano":"9",)" + ids + R"(,"parentSpanId":"","name":"n\u0041")",
       }) {
    lines.push_back(R"({"resourceSpans":[{"resource":{"attributes":[{"key":"dl.rank","value":{"intValue":"2"}}]},"scopeSpans":[{"spans":[{)" + span + "}]}]}]}");
    // The resource after its spans.
    lines.push_back(R"({"resourceSpans":[{"scopeSpans":[{"scope":{},"spans":[{)" + span +
                    R"(}]}],"resource":{"attributes":[{"key":"dl.rank","value":{"intValue":3}},{"key":"host.name","value":{"stringValue":"h"}}]}}]})");
  }
  for (const char* odd : {"{}", "[]", "null", "{\"resourceSpans\":null}", "{\"resourceSpans\":{}}",
                          "{\"resourceSpans\":[1,\"x\",null,{}]}", "{\"other\":[1,2]}",
                          "{\"resourceSpans\":[{\"resource\":5,\"scopeSpans\":[7,{\"spans\":null}]}]}"})
    lines.push_back(odd);
  return lines;
}

// Successive lines of one file: a line's resource is applied over what
// the lines before it set (the parser skips one that is the same as the
// last it applied), and a line that fails half-way leaves what it set.
// Read line after line into one RankFile by each parser, the two files
// agree after every line: over lines whose resources repeat, change,
// lose a key, come back, fail in their rank or in a later attribute, and
// 3,000 seeded sequences of them and of their mutations.
TEST(RunReader, SuccessiveLinesOfAFileAreReadAsTheDomReferenceReadsThem) {
  const auto line_with = [](const std::string& resource_attributes) {
    return R"({"resourceSpans":[{"resource":{"attributes":[)" + resource_attributes +
           R"(]},"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef","name":"s"}]}]}]})";
  };
  const std::string rank2 = R"({"key":"dl.rank","value":{"intValue":"2"}})";
  const std::string rank3 = R"({"key":"dl.rank","value":{"intValue":"3"}})";
  const std::string host = R"({"key":"host.name","value":{"stringValue":"node-a"}})";
  const std::string host_b = R"({"key":"host.name","value":{"stringValue":"node-b"}})";
  const std::string pid = R"({"key":"process.pid","value":{"intValue":"41"}})";
  const std::string pid_text = R"({"key":"process.pid","value":{"stringValue":"41"}})";
  const std::string world = R"({"key":"dl.world_size","value":{"intValue":"4"}})";
  const std::string bad_rank = R"({"key":"dl.rank","value":{"stringValue":"two"}})";
  const std::string bad_value = R"({"key":"process.pid","value":{"intValue":"x"}})";
  const std::vector<std::string> lines = {
      line_with(rank2 + "," + host + "," + pid),
      line_with(rank2 + "," + host + "," + pid),
      line_with(rank2 + "," + host_b + "," + pid),         // a value changed
      line_with(rank2 + "," + host + "," + pid),           // and back
      line_with(host + "," + pid),                         // a key left out
      line_with(rank2 + "," + host + "," + pid + "," + world),
      line_with(rank2 + "," + host + "," + pid_text),      // the same text, another type
      line_with(rank3 + "," + host + "," + pid),
      line_with(host + "," + bad_rank),                    // fails in take_resource
      line_with(rank3 + "," + host + "," + pid),
      line_with(world + "," + bad_value),                  // fails after a type is set
      line_with(rank3 + "," + host + "," + pid),
      line_with(""),
      line_with(""),
      R"({"resourceSpans":[{"scopeSpans":[]}]})",
      R"({"resourceSpans":[{"resource":{"attributes":[)" + rank2 + R"(]}},{"resource":{"attributes":[)" +
          rank3 + R"(]}}]})",  // two resources in one line
      line_with(rank3),
  };
  const auto read_both = [](const std::vector<std::string>& sequence) {
    RankFile mine, reference;
    for (const std::string& line : sequence) {
      bool failed = false, reference_failed = false;
      try {
        parse_request(mine, line);
      } catch (const std::exception&) {
        failed = true;
      }
      try {
        parse_request_reference(reference, line);
      } catch (const std::exception&) {
        reference_failed = true;
      }
      if (reference_failed && !failed) return;  // the reference refuses what the parser reads
      ASSERT_EQ(failed, reference_failed) << line;
      ASSERT_EQ(described(mine), described(reference)) << line;
      mine.spans.clear();
      reference.spans.clear();
    }
  };
  read_both(lines);
  std::mt19937_64 random(20261207);
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::string> sequence;
    for (int n = 0; n < 6; ++n) {
      std::string l = lines[random() % lines.size()];
      if (random() % 4 == 0 && !l.empty()) l[random() % l.size()] = "{}[]\":,0x9 "[random() % 11];
      sequence.push_back(std::move(l));
    }
    read_both(sequence);
  }
}

// Every line the DOM reference reads, the On-Demand parser reads the same
// (rows, attributes as text and type, resource fields, rank and process);
// every line it refuses, the parser refuses too. Then the same over
// 20,000 seeded mutations of those lines (bytes changed, cut, dropped,
// repeated).
TEST(RunReader, TheParserReadsEveryLineAsTheDomReferenceDoes) {
  const std::vector<std::string> lines = corpus_lines();
  ASSERT_GT(lines.size(), 30u);
  std::size_t both_read = 0, lenient = 0;
  const auto compare = [&](const std::string& line) {
    const std::string want = outcome(&parse_request_reference, line);
    const std::string got = outcome(&parse_request, line);
    if (want == "error") {
      if (got != "error") ++lenient;
      return;
    }
    ++both_read;
    ASSERT_EQ(got, want) << line.substr(0, 2000);
  };
  for (const auto& l : lines) compare(l);
  EXPECT_GT(both_read, 30u);
  std::mt19937_64 random(20261204);
  const std::string alphabet = "{}[]\":,0123456789abcdefxyzEe.-+ \\tnul";
  for (int i = 0; i < 20000; ++i) {
    std::string m = lines[random() % lines.size()];
    const int edits = 1 + static_cast<int>(random() % 3);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const std::size_t at = random() % m.size();
      switch (random() % 4) {
        case 0: m[at] = alphabet[random() % alphabet.size()]; break;
        case 1: m.resize(at); break;
        case 2: m.erase(at, 1 + random() % 8); break;
        default: m.insert(at, m.substr(at, 1 + random() % 16)); break;
      }
    }
    compare(m);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // simdjson's DOM validates the whole line, as the reference did.
  EXPECT_EQ(lenient, 0u);
  std::printf("both read: %zu lines; read by the parser only: %zu\n", both_read, lenient);
}

}  // namespace
}  // namespace lens::analysis
