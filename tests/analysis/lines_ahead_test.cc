// LinesAhead: files taken a line at a time in a seeded random order, their
// lines parsed ahead by 0 to 3 workers, give what each file's
// RankFileReader gives alone: the same rows, resource fields (as they change
// and change back), line numbers, bytes and end, and a malformed line's
// ReadError at that line; and a caller that stops early stops the workers. per_file: the files read side
// by side give what reading them in turn gives.
#include "lines_ahead.h"
#include "per_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace lens::analysis {
namespace {

namespace fs = std::filesystem;

std::string hex(std::uint64_t v, int digits) {
  static const char* d = "0123456789abcdef";
  std::string s(static_cast<std::size_t>(digits), '0');
  for (int i = digits - 1; i >= 0 && v != 0; --i, v >>= 4)
    s[static_cast<std::size_t>(i)] = d[v & 15];
  return s;
}

// A line of `spans` spans of rank `rank`, its resource naming `pid`.
std::string line(int rank, int pid, int first, int spans) {
  std::string out =
      R"({"resourceSpans":[{"resource":{"attributes":[{"key":"dl.rank","value":{"intValue":")" +
      std::to_string(rank) + R"("}},{"key":"process.pid","value":{"intValue":")" +
      std::to_string(pid) + R"("}}]},"scopeSpans":[{"spans":[)";
  for (int s = 0; s < spans; ++s) {
    const int id = first + s;
    out += (s ? "," : "") + std::string(R"({"traceId":")") + hex(1000 + id / 7, 32) +
           R"(","spanId":")" + hex(5000 + id, 16) + R"(","name":"span.)" +
           std::to_string(id % 5) + R"(","startTimeUnixNano":")" + std::to_string(id * 10) +
           R"(","endTimeUnixNano":")" + std::to_string(id * 10 + 5) +
           R"(","attributes":[{"key":"dl.step","value":{"intValue":")" + std::to_string(id / 7) +
           R"("}}]})";
  }
  return out + "]}]}]}";
}

class LinesAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lens-lines-ahead-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::mt19937 rng(53);
    for (int rank = 0; rank < 5; ++rank) {
      std::string text;
      const int lines = 5 + static_cast<int>(rng() % 40);
      for (int l = 0; l < lines; ++l) {
        if (rng() % 9 == 0) text += "\n";  // an empty line
        // Restarts: the resource changes, and back (a line whose resource
        // is the line before's carries no fields of its own).
        const int pid = l < lines / 3 ? 100 : l < 2 * lines / 3 ? 200 : 100;
        text += line(rank, pid, l * 50, 1 + static_cast<int>(rng() % 12)) + "\n";
      }
      if (rank == 3) text += "{\"resourceSpans\": [ x\n" + line(rank, 200, 9999, 2) + "\n";
      if (rank == 4) text += line(rank, 200, 9000, 3).substr(0, 80);  // cut short: skipped
      paths_.push_back(dir_ / ("rank-" + std::to_string(rank) + ".otlp.jsonl"));
      std::ofstream(paths_.back(), std::ios::binary) << text;
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Everything a caller sees of file i's next line, as text.
  static std::string take(LinesAhead& lines, std::size_t i) {
    std::string out;
    try {
      out = lines.next_line(i) ? "line " : "end ";
    } catch (const ReadError& e) {
      return std::string("error ") + e.what();
    }
    RankFile& f = lines.file(i);
    out += std::to_string(lines.line_number(i)) + " " + std::to_string(lines.bytes_read(i)) +
           (lines.done(i) ? " done" : "") + " rank " + std::to_string(f.rank) + " process " +
           std::to_string(f.process) + " lines " + std::to_string(f.lines) + " warnings " +
           std::to_string(f.warnings.size()) + " resource";
    for (const auto& [key, text] : f.resource) out += " " + key + "=" + text;
    out += ":";
    for (const SpanRow& s : f.spans)
      out += " " + s.span_id + "/" + s.name + "/" + std::string(*s.attributes.text("dl.step"));
    f.spans.clear();  // as the stream moves them out
    return out;
  }

  // Each file's lines taken in a random order of files, until each ends.
  std::vector<std::vector<std::string>> read_all(int workers, unsigned seed) {
    std::vector<std::unique_ptr<RankFileReader>> readers;
    for (const auto& p : paths_) readers.push_back(std::make_unique<RankFileReader>(p));
    LinesAhead lines(std::move(readers), workers);
    std::vector<std::vector<std::string>> seen(paths_.size());
    std::vector<bool> over(paths_.size(), false);
    std::mt19937 rng(seed);
    for (;;) {
      std::vector<std::size_t> open;
      for (std::size_t i = 0; i < over.size(); ++i)
        if (!over[i]) open.push_back(i);
      if (open.empty()) break;
      const std::size_t i = open[rng() % open.size()];
      seen[i].push_back(take(lines, i));
      over[i] = lines.done(i) || seen[i].back().rfind("error", 0) == 0;
    }
    return seen;
  }

  fs::path dir_;
  std::vector<fs::path> paths_;
};

TEST_F(LinesAheadTest, AnyWorkersAnyOrderGiveWhatEachReaderGivesAlone) {
  const auto alone = read_all(0, 1);
  ASSERT_EQ(alone.size(), 5u);
  EXPECT_EQ(alone[3].back().rfind("error ", 0), 0u) << alone[3].back();
  // The error names the bad line: the number of newlines before it, plus one.
  std::ifstream in(paths_[3], std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t bad = text.find("{\"resourceSpans\": [ x");
  const auto number =
      std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n') + 1;
  EXPECT_NE(alone[3].back().find("rank-3.otlp.jsonl:" + std::to_string(number) + ": "),
            std::string::npos)
      << alone[3].back();
  EXPECT_NE(alone[4].back().find("warnings 1"), std::string::npos) << alone[4].back();
  for (int workers : {1, 2, 3})
    for (unsigned seed : {2u, 3u, 4u}) EXPECT_EQ(read_all(workers, seed), alone) << workers;
}

TEST_F(LinesAheadTest, ACallerThatStopsEarlyStopsTheWorkers) {
  for (int round = 0; round < 20; ++round) {
    std::vector<std::unique_ptr<RankFileReader>> readers;
    for (const auto& p : paths_) readers.push_back(std::make_unique<RankFileReader>(p));
    LinesAhead lines(std::move(readers), 3);
    EXPECT_EQ(take(lines, 1).rfind("line 1 ", 0), 0u);
    // The destructor joins the workers mid-read.
  }
}

// per_file: results in file order on any number of threads, and the first
// failing file's error in that order, whichever thread met it first.
TEST_F(LinesAheadTest, PerFileGivesResultsAndTheFirstErrorInFileOrder) {
  const auto count_lines = [](const fs::path& p) {
    RankFileReader reader(p);
    std::size_t spans = 0;
    while (reader.next_line()) spans += reader.file().spans.size();
    return std::to_string(reader.line_number()) + ":" + std::to_string(spans);
  };
  std::vector<fs::path> good = paths_;
  good.erase(good.begin() + 3);  // the file with a malformed line
  const auto one = per_file(good, 1, count_lines);
  ASSERT_EQ(one.size(), good.size());
  for (int threads : {2, 3, 8}) EXPECT_EQ(per_file(good, threads, count_lines), one);
  // Files 1 and 3 both fail: file 1's error, on any number of threads.
  const auto failing = [&](const fs::path& p) -> std::string {
    if (p == paths_[1]) throw ReadError("first");
    return count_lines(p);  // paths_[3] throws its own ReadError
  };
  for (int threads : {1, 2, 5}) {
    try {
      per_file(paths_, threads, failing);
      ADD_FAILURE() << "no error on " << threads << " threads";
    } catch (const ReadError& e) {
      EXPECT_STREQ(e.what(), "first") << threads;
    }
  }
  EXPECT_TRUE(per_file(std::vector<fs::path>{}, 4, count_lines).empty());
}

}  // namespace
}  // namespace lens::analysis
