// Reading a run a step at a time (tools/step_stream.h) and the `lens`
// commands built on it, over runs written here line by line: windows come in
// step order with exactly that step's spans of every rank, they come before
// the files have been read to the end, and check, summary and the exports
// say what the whole-run, in-memory path says.
#include "step_stream.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "analyze.h"
#include "check.h"
#include "partial_analysis.h"
#include "run_reader.h"
#include "split_threads.h"
#include "summary.h"
#include "viewer_export.h"

namespace lens::analysis {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string hex_id(std::uint64_t v, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

json int_attr(const std::string& key, std::int64_t v) {
  return {{"key", key}, {"value", {{"intValue", std::to_string(v)}}}};
}

struct FakeSpan {
  std::string trace, span, parent, name;
  std::int64_t start = 0, end = 0;
  json attributes = json::array();
  json links = json::array();

  json to_json() const {
    json s = {{"traceId", trace},
              {"spanId", span},
              {"name", name},
              {"kind", 1},
              {"startTimeUnixNano", std::to_string(start)},
              {"endTimeUnixNano", std::to_string(end)},
              {"attributes", attributes},
              {"links", links}};
    if (!parent.empty()) s["parentSpanId"] = parent;
    return s;
  }
};

// A 1F1B-shaped run: per step and rank a step span, a forward and a backward
// span per microbatch and, on later stages, the linked receives; spans are
// listed in the order they end (children before their step span).
struct FakeRun {
  int ranks = 3, steps = 5, microbatches = 4;
  std::vector<std::vector<FakeSpan>> by_rank;  // in end order

  static std::string trace_of(int step) { return hex_id(0xabc000 + step, 32); }
  static std::string step_span_id(int step, int rank) {
    return hex_id(0x5000000 + step * 100 + rank, 16);
  }
  static std::string job_trace() { return hex_id(0xf00, 32); }
  static std::string job_span_id(int rank) { return hex_id(0x9000 + rank, 16); }

  // Clock samples (after make): ranks 1 and up a few µs off rank 0, each
  // rank's first span.
  void add_clock_samples() {
    for (int rank = 1; rank < ranks; ++rank) {
      FakeSpan sample{hex_id(0xc10c0 + rank, 32), hex_id(0xc10c0 + rank, 16), "",
                      "lens.clock_sync", 999'000'000, 999'000'100};
      const std::vector<std::pair<const char*, std::int64_t>> fields = {
          {"lens.clock.local_time_ns", 999'000'000}, {"lens.clock.offset_ns", 3000 * rank},
          {"lens.clock.uncertainty_ns", 400},        {"lens.clock.reference_rank", 0},
          {"lens.clock.exchanges", 8},               {"lens.clock.discarded", 0}};
      for (const auto& [key, value] : fields) sample.attributes.push_back(int_attr(key, value));
      by_rank[rank].insert(by_rank[rank].begin(), sample);
    }
  }

  void make() {
    by_rank.assign(ranks, {});
    std::uint64_t next_id = 1;
    for (int rank = 0; rank < ranks; ++rank) {
      std::int64_t t = 1'000'000'000;
      for (int step = 0; step < steps; ++step) {
        const std::string step_id = step_span_id(step, rank);
        const std::int64_t step_start = t;
        const int linked = rank == 0 ? 0
                                     : std::min(ranks - rank - 1, microbatches) +
                                           (microbatches > ranks - rank - 1 ? 1 : 0);
        for (int i = 0; i < linked; ++i) {
          FakeSpan l{
              trace_of(step), hex_id(next_id++, 16), step_id, "megatron.pp.recv_forward.linked", t,
              t + 10};
          l.attributes.push_back(int_attr("dl.pipeline_parallel.rank", rank));
          l.attributes.push_back(int_attr("dl.microbatch_id", i));
          l.links.push_back({{"traceId", trace_of(step)}, {"spanId", step_span_id(step, 0)}});
          by_rank[rank].push_back(l);
          t += 10;
        }
        for (int mb = 0; mb < microbatches; ++mb) {
          for (const char* name : {"megatron.microbatch.forward", "megatron.microbatch.backward"}) {
            FakeSpan s{trace_of(step), hex_id(next_id++, 16), step_id, name, t, t + 100};
            s.attributes.push_back(int_attr("dl.microbatch_id", mb));
            by_rank[rank].push_back(s);
            t += 120;
          }
        }
        FakeSpan step_span{trace_of(step), step_id, "", "megatron.train_step", step_start, t};
        step_span.attributes.push_back(int_attr("dl.step", step));
        step_span.attributes.push_back(int_attr("dl.pipeline_parallel.rank", rank));
        step_span.links.push_back({{"traceId", job_trace()}, {"spanId", job_span_id(rank)}});
        by_rank[rank].push_back(step_span);
        t += 50;
      }
      // One job trace: every step span links to its rank's job span, the
      // others' job spans to rank 0's.
      FakeSpan job{job_trace(), job_span_id(rank), "", "megatron.job", 1'000'000'000, t};
      if (rank != 0) job.links.push_back({{"traceId", job_trace()}, {"spanId", job_span_id(0)}});
      job.attributes.push_back(int_attr("dl.pipeline_parallel.size", ranks));
      job.attributes.push_back(int_attr("dl.num_microbatches", microbatches));
      by_rank[rank].push_back(job);
    }
  }

  std::size_t spans_per_step(int rank) const {
    const int linked = rank == 0 ? 0
                                 : std::min(ranks - rank - 1, microbatches) +
                                       (microbatches > ranks - rank - 1 ? 1 : 0);
    return 1 + 2 * microbatches + linked;
  }

  // Writes rank-<r>.otlp.jsonl files, `batch` spans a line.
  void write(const fs::path& dir, std::size_t batch) const {
    fs::create_directories(dir);
    for (int rank = 0; rank < ranks; ++rank) {
      std::ofstream out(dir / ("rank-" + std::to_string(rank) + ".otlp.jsonl"));
      const auto& spans = by_rank[rank];
      for (std::size_t i = 0; i < spans.size(); i += batch) {
        json list = json::array();
        for (std::size_t j = i; j < std::min(spans.size(), i + batch); ++j)
          list.push_back(spans[j].to_json());
        json resource = {{"attributes", json::array({int_attr("dl.rank", rank),
                                                     int_attr("dl.world_size", ranks),
                                                     {{"key", "nemo.run.id"},
                                                      {"value", {{"stringValue", "fake-run"}}}}})}};
        json line = {
            {"resourceSpans", json::array({{{"resource", resource},
                                            {"scopeSpans", json::array({{{"spans", list}}})}}})}};
        out << line.dump() << "\n";
      }
    }
  }
};

// The summary as `lens summary` makes it on one stream aligned by `clock`
// (its clock report and spans left out set).
Summary one_stream_summary(const fs::path& dir, const ClockAlignment& clock,
                           std::vector<std::string>* warnings) {
  ClockReport report = ClockReport::of(clock);
  LateSpans left_out;
  Summary summary = summarize_dir(dir, aligned_stream(clock, &report, &left_out), warnings);
  summary.clock = report;
  summary.left_out = left_out;
  return summary;
}

class StepStream : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lens-step-stream-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    run_.make();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> streamed_violations() {
    std::vector<std::string> out;
    for (const auto& v : check_dir(dir_).violations) out.push_back(format_violation(v));
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<std::string> in_memory_violations() {
    const analysis::Run run = read_run(dir_);
    std::vector<std::string> out;
    for (const auto& v : check_run(run, build_view(run))) out.push_back(format_violation(v));
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
  FakeRun run_;
};

TEST_F(StepStream, WindowsComeInStepOrderWithEveryRanksSpansOfThatStep) {
  run_.write(dir_, 7);  // lines cut across steps
  std::vector<std::int64_t> seen;
  analysis::Run rest = stream_steps(dir_, [&](StepWindow& w) {
    seen.push_back(w.step);
    ASSERT_EQ(w.run.files.size(), 3u);
    for (const auto& f : w.run.files) {
      EXPECT_EQ(f.spans.size(), run_.spans_per_step(f.rank))
          << "step " << w.step << " rank " << f.rank;
      for (const auto& s : f.spans)
        EXPECT_EQ(s.trace_id, FakeRun::trace_of(static_cast<int>(w.step)));
    }
  });
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  ASSERT_EQ(rest.files.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(rest.files[rank].rank, rank);
    EXPECT_EQ(rest.files[rank].world_size, 3);
    ASSERT_EQ(rest.files[rank].spans.size(), 1u);
    EXPECT_EQ(rest.files[rank].spans[0].name, "megatron.job");
  }
}

TEST_F(StepStream, StepsAreHandedOverLongBeforeTheFilesAreRead) {
  run_.steps = 60;
  run_.make();
  run_.write(dir_, 16);
  std::uintmax_t read = 0, total = 0, read_at_first_step = 0;
  StreamOptions o;
  o.threads = 1;  // progress and on_step on one thread: `read` is shared
  o.progress = [&](std::uintmax_t done, std::uintmax_t all) {
    read = done;
    total = all;
  };
  std::size_t largest_window = 0, windows = 0;
  stream_steps(
      dir_,
      [&](StepWindow& w) {
        if (windows++ == 0) read_at_first_step = read;
        largest_window = std::max(largest_window, w.run.span_count());
      },
      o);
  EXPECT_EQ(windows, 60u);
  EXPECT_EQ(read, total);
  EXPECT_GT(read_at_first_step, 0u);
  EXPECT_LT(read_at_first_step, total / 10) << "the first step waited for most of the files";
  EXPECT_EQ(largest_window,
            run_.spans_per_step(0) + run_.spans_per_step(1) + run_.spans_per_step(2));
}

TEST_F(StepStream, StopAfterStepStopsReading) {
  run_.steps = 40;
  run_.make();
  run_.write(dir_, 8);
  std::uintmax_t read = 0, total = 0;
  StreamOptions o;
  o.threads = 1;
  o.stop_after_step = 2;
  o.progress = [&](std::uintmax_t done, std::uintmax_t all) {
    read = done;
    total = all;
  };
  std::vector<std::int64_t> seen;
  stream_steps(
      dir_, [&](StepWindow& w) { seen.push_back(w.step); }, o);
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_LT(read, total / 4);
}

TEST_F(StepStream, ARankWithoutStepSpansDoesNotHoldTheOthersBack) {
  // Rank 2 recorded no step spans (its step group was off): its spans are
  // in no step, and the other ranks' steps still come, without rank 2.
  for (auto& s : run_.by_rank[2])
    if (s.name == "megatron.train_step") s.name = "megatron.something_else";
  run_.write(dir_, 5);
  std::size_t windows = 0;
  analysis::Run rest = stream_steps(dir_, [&](StepWindow& w) {
    ++windows;
    EXPECT_TRUE(w.run.files[2].spans.empty());
    EXPECT_EQ(w.run.files[0].spans.size(), run_.spans_per_step(0));
  });
  EXPECT_EQ(windows, 5u);
  EXPECT_EQ(rest.files[2].spans.size(), 5 * run_.spans_per_step(2) + 1);
}

TEST_F(StepStream, ASpanEndingJustAfterItsStepSpanStaysWithItsStep) {
  // Move step 1's first backward on rank 1 to just after its step span.
  auto& spans = run_.by_rank[1];
  auto step_span = std::find_if(spans.begin(), spans.end(), [](const FakeSpan& s) {
    return s.name == "megatron.train_step" && s.trace == FakeRun::trace_of(1);
  });
  auto child = std::find_if(spans.begin(), spans.end(), [](const FakeSpan& s) {
    return s.name == "megatron.microbatch.backward" && s.trace == FakeRun::trace_of(1);
  });
  ASSERT_LT(child, step_span);
  FakeSpan late = *child;
  spans.erase(child);
  step_span = std::find_if(spans.begin(), spans.end(), [](const FakeSpan& s) {
    return s.name == "megatron.train_step" && s.trace == FakeRun::trace_of(1);
  });
  spans.insert(step_span + 1, late);
  run_.write(dir_, 1000);  // one line per file: the late span is read with its step
  std::size_t in_step_1 = 0;
  stream_steps(dir_, [&](StepWindow& w) {
    if (w.step == 1) in_step_1 = w.run.files[1].spans.size();
  });
  EXPECT_EQ(in_step_1, run_.spans_per_step(1));
  EXPECT_EQ(streamed_violations(), std::vector<std::string>{});
}

TEST_F(StepStream, CheckFindsWhatTheInMemoryCheckFinds) {
  // A retargeted link on rank 1 (step 2), rank 2's trace id changed in
  // step 3, a linked span on stage 0 (step 4), and rank 2's linked spans
  // doubled in step 1 (the count grows and changes between steps).
  for (auto& s : run_.by_rank[1])
    if (s.trace == FakeRun::trace_of(2) && !s.links.empty())
      s.links[0]["spanId"] = "00000000deadbeef";
  for (auto& s : run_.by_rank[2])
    if (s.trace == FakeRun::trace_of(3)) s.trace = FakeRun::trace_of(99);
  FakeSpan wrong{FakeRun::trace_of(4),
                 hex_id(0x7777, 16),
                 FakeRun::step_span_id(4, 0),
                 "megatron.pp.recv_forward.linked",
                 1,
                 2};
  wrong.links.push_back(
      {{"traceId", FakeRun::trace_of(4)}, {"spanId", FakeRun::step_span_id(4, 0)}});
  auto& r0 = run_.by_rank[0];
  r0.insert(std::find_if(r0.begin(), r0.end(),
                         [](const FakeSpan& s) {
                           return s.name == "megatron.train_step" &&
                                  s.trace == FakeRun::trace_of(4);
                         }),
            wrong);
  auto& r2 = run_.by_rank[2];
  std::vector<FakeSpan> extra;
  for (const auto& s : r2)
    if (s.trace == FakeRun::trace_of(1) && s.name.ends_with(".linked")) {
      FakeSpan copy = s;
      copy.span = hex_id(0x8800 + extra.size(), 16);
      extra.push_back(copy);
    }
  r2.insert(r2.begin() + 1, extra.begin(), extra.end());  // before step 1's step span
  run_.write(dir_, 6);

  const auto streamed = streamed_violations();
  EXPECT_EQ(streamed, in_memory_violations());
  const auto has = [&](const std::string& text) {
    return std::any_of(streamed.begin(), streamed.end(),
                       [&](const std::string& v) { return v.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(
      has("step 2, rank 1: megatron.pp.recv_forward.linked links to span 00000000deadbeef"));
  EXPECT_TRUE(has("step 3, rank 2: trace id " + FakeRun::trace_of(99) + " differs"));
  EXPECT_TRUE(has("step 4, rank 0: a linked span on the first pipeline stage"));
  EXPECT_TRUE(has("step 1, rank 2: 2 linked spans, more than the 1"));
  EXPECT_TRUE(has("rank 2: the number of linked spans changes from step to step"));
}

TEST_F(StepStream, LinksOutOfTheirStepAreResolvedByASecondPass) {
  // Step 3's linked spans on rank 1 link to step 0's step span (a span of
  // the run, in another step) and rank 2's to rank 0's job span.
  for (auto& s : run_.by_rank[1])
    if (s.trace == FakeRun::trace_of(3) && !s.links.empty())
      s.links[0] = {{"traceId", FakeRun::trace_of(0)}, {"spanId", FakeRun::step_span_id(0, 0)}};
  for (auto& s : run_.by_rank[2])
    if (s.trace == FakeRun::trace_of(3) && !s.links.empty())
      s.links[0] = {{"traceId", hex_id(0xf00, 32)}, {"spanId", hex_id(0x9000, 16)}};
  run_.write(dir_, 4);
  const auto streamed = streamed_violations();
  EXPECT_EQ(streamed, in_memory_violations());
  for (const auto& v : streamed)
    EXPECT_EQ(v.find("which is not in the run"), std::string::npos) << v;
  // They do violate "links to rank 0's step span of its own step".
  EXPECT_FALSE(streamed.empty());
}

TEST_F(StepStream, SummaryMatchesTheInMemorySummary) {
  run_.write(dir_, 9);
  std::vector<std::string> warnings;
  const Summary streamed = summarize_dir(dir_, {}, &warnings);
  const Summary whole = summarize_run(build_view(read_run(dir_)));
  EXPECT_EQ(format_json(streamed), format_json(whole));
  EXPECT_EQ(streamed.pipeline_stages, 3);
  EXPECT_EQ(streamed.microbatches, 4);
  EXPECT_EQ(streamed.rows.size(), 15u);
  EXPECT_TRUE(warnings.empty());
}

TEST_F(StepStream, ExportsWriteEverySpanAndEveryLink) {
  run_.write(dir_, 11);
  std::size_t spans = 0, links = 0;
  for (const auto& r : run_.by_rank)
    for (const auto& s : r) {
      ++spans;
      links += s.links.size();
    }
  std::ostringstream perfetto, jaeger;
  const tools::ExportCounts p = tools::export_perfetto(dir_, perfetto);
  const tools::ExportCounts j = tools::export_jaeger(dir_, jaeger);
  EXPECT_EQ(p.spans, spans);
  EXPECT_EQ(p.links, links);
  EXPECT_EQ(j.spans, spans);

  const json pj = json::parse(perfetto.str());
  std::size_t complete = 0, starts = 0, ends = 0;
  for (const auto& e : pj["traceEvents"]) {
    complete += e["ph"] == "X";
    starts += e["ph"] == "s";
    ends += e["ph"] == "f";
  }
  EXPECT_EQ(complete, spans);
  EXPECT_EQ(starts, links);
  EXPECT_EQ(ends, links);

  const json jj = json::parse(jaeger.str());
  EXPECT_EQ(jj["data"].size(), 5u + 1u);  // a trace per step, and the job's
  std::size_t jaeger_spans = 0;
  for (const auto& t : jj["data"]) jaeger_spans += t["spans"].size();
  EXPECT_EQ(jaeger_spans, spans);
}

// What a view sees of a stream: each window's step and span ids, in order.
std::vector<std::string> windows_seen(const fs::path& dir, int threads, int stop_at = -1) {
  std::vector<std::string> seen;
  StreamOptions o;
  o.threads = threads;
  stream_steps(
      dir,
      [&](StepWindow& w) {
        if (w.step == stop_at) throw std::runtime_error("the view stopped");
        std::string ids = std::to_string(w.step) + ":";
        for (const auto& f : w.run.files)
          for (const auto& sp : f.spans) ids += " " + sp.span_id;
        seen.push_back(ids);
      },
      o);
  return seen;
}

TEST_F(StepStream, ReadingOnAThreadOfItsOwnHandsOverTheSameWindowsInOrder) {
  run_.steps = 30;
  run_.make();
  run_.write(dir_, 7);
  const auto one = windows_seen(dir_, 1);
  ASSERT_EQ(one.size(), 30u);
  EXPECT_EQ(windows_seen(dir_, 2), one);
  EXPECT_EQ(windows_seen(dir_, 8), one);
  // A view that stops stops the reading thread (no hang, its error out).
  EXPECT_THROW(windows_seen(dir_, 2, 3), std::runtime_error);
  // A malformed line: the windows before it first, then its ReadError.
  std::ofstream(dir_ / "rank-2.otlp.jsonl", std::ios::app) << "{\"resourceSpans\": [ x\n{}\n";
  std::vector<std::int64_t> before;
  StreamOptions o;
  o.threads = 2;
  EXPECT_THROW(stream_steps(
                   dir_, [&](StepWindow& w) { before.push_back(w.step); }, o),
               ReadError);
  EXPECT_EQ(before.size(), 30u) << "every window read before the bad line";
}

// The run split into contiguous step ranges (partial_analysis.h, what `lens
// analyze|summary|check` do under MPI), each range read on its own, the
// parts merged: every command says what one stream says, byte for byte,
// for 1 to 4 parts, on a run whose faults cross the ranges (a span
// repeated, a span arriving steps late, a step span in an earlier step's
// trace, a broken link) and with one span or six a line.
TEST_F(StepStream, SplitOverThreadsSaysWhatOneStreamSaysAndTellsItsProgress) {
  run_.steps = 8;
  run_.make();
  run_.write(dir_, 6);
  const auto said = [](const CheckResult& r) {
    std::string out;
    for (const auto& v : r.violations) out += format_violation(v) + "\n";
    for (const auto& w : r.warnings) out += "warning: " + w + "\n";
    return out + r.start_order + " " + std::to_string(r.steps) + " steps, " +
           std::to_string(r.spans) + " spans, " + std::to_string(r.files) + " files";
  };
  std::vector<std::string> one_warnings;
  const std::string one_check = said(check_dir(dir_));
  const std::string one_analysis = format_json(analyze_run(dir_, {}, &one_warnings));
  AnalyzeOptions with_path;
  with_path.keep_critical_path = true;
  std::vector<std::string> unused;
  const Analysis one_with_path = analyze_run(dir_, with_path, &unused);
  ASSERT_FALSE(one_with_path.critical_paths.empty());
  std::vector<std::string> one_summary_warnings;
  const std::string one_summary =
      format_json(one_stream_summary(dir_, read_clock_alignment(dir_), &one_summary_warnings));
  for (const int threads : {2, 3, 5}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<std::pair<std::uintmax_t, std::uintmax_t>> told;
    const ReadProgress progress = [&](std::uintmax_t done, std::uintmax_t total) {
      told.emplace_back(done, total);
    };
    const std::optional<CheckResult> check = check_on_threads(dir_, threads, progress);
    ASSERT_TRUE(check.has_value()) << "a clean run is split";
    EXPECT_EQ(said(*check), one_check);
    // Told from one thread, never back, the whole only at the end.
    ASSERT_FALSE(told.empty());
    const std::uintmax_t total = told.back().second;
    EXPECT_GT(total, 0u);
    EXPECT_EQ(told.back().first, total);
    for (std::size_t i = 1; i < told.size(); ++i) {
      EXPECT_GE(told[i].first, told[i - 1].first);
      if (i + 1 < told.size()) {
        EXPECT_LT(told[i].first, total);
      }
    }
    std::vector<std::string> warnings;
    const std::optional<Analysis> analysis = analyze_on_threads(dir_, false, threads, &warnings);
    ASSERT_TRUE(analysis.has_value());
    EXPECT_EQ(format_json(*analysis), one_analysis);
    EXPECT_EQ(warnings, one_warnings);
    // With every step's critical path (lens.analysis.analyze's).
    const std::optional<Analysis> with_path_split =
        analyze_on_threads(dir_, false, threads, &unused, {}, true);
    ASSERT_TRUE(with_path_split.has_value());
    EXPECT_EQ(format_json(*with_path_split), format_json(one_with_path));
    warnings.clear();
    const std::optional<Summary> summary_split = summary_on_threads(dir_, false, threads, &warnings);
    ASSERT_TRUE(summary_split.has_value());
    EXPECT_EQ(format_json(*summary_split), one_summary);
    EXPECT_EQ(warnings, one_summary_warnings);
    // A read-only command leaves the run as it was.
    EXPECT_FALSE(fs::exists(dir_ / ".lens-step-index"));
  }
  EXPECT_FALSE(check_on_threads(dir_, 1).has_value()) << "one thread reads one stream";
  // A batch delivered again: the cut could not see the repeat, one stream reads it.
  {
    std::ofstream out(dir_ / "rank-1.otlp.jsonl", std::ios::app);
    std::ifstream in(dir_ / "rank-1.otlp.jsonl");
    std::string first;
    std::getline(in, first);
    out << first << "\n";
  }
  EXPECT_FALSE(check_on_threads(dir_, 2).has_value());
  std::vector<std::string> warnings;
  EXPECT_FALSE(analyze_on_threads(dir_, false, 2, &warnings).has_value());
  EXPECT_FALSE(summary_on_threads(dir_, false, 2, &warnings).has_value());
  EXPECT_TRUE(warnings.empty()) << "nothing said by a split that was not used";
}

TEST_F(StepStream, SplitIntoPartsEveryCommandSaysWhatOneStreamSays) {
  run_.steps = 8;
  run_.make();
  auto& r1 = run_.by_rank[1];
  const auto step_span_at = [](std::vector<FakeSpan>& spans, int step) {
    return std::find_if(spans.begin(), spans.end(), [&](const FakeSpan& s) {
      return s.name == "megatron.train_step" && s.trace == FakeRun::trace_of(step);
    });
  };
  // Rank 1: a forward of step 5 again before step 5's step span (its first
  // copy read in the same range, whatever the split); a forward of step 1
  // arriving after step 6's step span.
  FakeSpan repeat = *(step_span_at(r1, 5) - 2);
  r1.insert(step_span_at(r1, 5), repeat);
  auto late_at = step_span_at(r1, 1) - 1;
  FakeSpan late = *late_at;
  r1.erase(late_at);
  r1.insert(step_span_at(r1, 6) + 1, late);
  // Rank 2: step 6's step span in step 1's trace; a broken link in step 3.
  step_span_at(run_.by_rank[2], 6)->trace = FakeRun::trace_of(1);
  for (auto& s : run_.by_rank[2])
    if (s.trace == FakeRun::trace_of(3) && !s.links.empty() && s.name.ends_with(".linked"))
      s.links[0]["spanId"] = "00000000deadbeef";
  run_.add_clock_samples();
  for (const std::size_t batch : {std::size_t{1}, std::size_t{6}}) {
    fs::remove_all(dir_);
    run_.write(dir_, batch);
    // The samples read in shares, as the processes of an MPI job read them.
    const std::string samples = clock_samples(dir_);
    for (int k = 2; k <= 4; ++k) {
      std::vector<std::string> shares;
      for (int i = 0; i < k; ++i) shares.push_back(clock_samples_share(dir_, i, k));
      EXPECT_EQ(join_clock_samples(shares), samples) << k << " shares";
    }
    const ClockAlignment clock = clock_from_samples(samples);
    ASSERT_FALSE(clock.empty());
    // One stream.
    const CheckResult one_check = check_dir(dir_);
    std::vector<std::string> summary_warnings;
    const Summary one_summary = one_stream_summary(dir_, clock, &summary_warnings);
    std::vector<std::string> analyze_warnings;
    const Analysis one_analysis = analyze_run(dir_, {}, &analyze_warnings);
    ASSERT_GT(one_check.late.late, 0u) << "the late span is found";
    ASSERT_GT(one_check.late.duplicates, 0u) << "the repeated span is found";
    const auto said = [](const CheckResult& r) {
      std::string out;
      for (const auto& v : r.violations) out += format_violation(v) + "\n";
      for (const auto& w : r.warnings) out += "warning: " + w + "\n";
      return out + r.start_order + " " + std::to_string(r.steps) + " steps, " +
             std::to_string(r.spans) + " spans, " + std::to_string(r.files) + " files, " +
             std::to_string(r.late.late) + " late, " + std::to_string(r.late.duplicates) +
             " repeated, " + r.late.describe();
    };
    EXPECT_NE(said(one_check).find("two steps share one trace"), std::string::npos);
    EXPECT_NE(said(one_check).find("00000000deadbeef"), std::string::npos);
    const StepIndex index = step_index(dir_);
    for (int k = 1; k <= 4; ++k) {  // built in shares, by k processes
      std::vector<StepIndex> shares;
      for (int i = 0; i < k; ++i) shares.push_back(index_share(dir_, i, k));
      EXPECT_EQ(to_bytes(join_index_shares(dir_, std::move(shares))), to_bytes(index));
    }
    ASSERT_TRUE(saved_step_index(dir_).has_value());
    for (int k = 1; k <= 4; ++k) {
      SCOPED_TRACE("batch " + std::to_string(batch) + ", " + std::to_string(k) + " parts");
      const auto ranges = split_steps(index, k);
      std::vector<std::string> checks, summaries, analyses;
      for (const StepRange& range : ranges) {
        checks.push_back(check_part(dir_, index, range, start_order_of(dir_, clock)));
        summaries.push_back(summary_part(dir_, index, range, clock));
        analyses.push_back(analyze_part(dir_, index, range, clock, false));
      }
      EXPECT_EQ(said(merge_check_parts(checks, dir_, start_order_of(dir_, clock))),
                said(one_check));
      std::vector<std::string> warnings;
      EXPECT_EQ(format_json(merge_summary_parts(summaries, clock, false, &warnings)),
                format_json(one_summary));
      EXPECT_EQ(warnings, summary_warnings);
      warnings.clear();
      EXPECT_EQ(format_json(merge_parts(analyses, clock, false, false, &warnings)),
                format_json(one_analysis));
      EXPECT_EQ(warnings, analyze_warnings);
    }
  }
}

TEST_F(StepStream, IndexAndClockInOneReadingAreTheIndexAndTheClockPass) {
  run_.steps = 8;
  run_.make();
  run_.add_clock_samples();
  run_.write(dir_, 3);
  const OpenedRun run(dir_);
  const std::string index = to_bytes(join_index_shares(run, {index_share(run, 0, 1)}, false));
  const auto said = [](const std::vector<SpanRow>& rows) {
    std::string out;
    for (const auto& r : rows)
      out += r.name + " " + r.span_id.str() + " " + std::to_string(r.rank) + " " +
             std::to_string(r.attributes.size()) + "\n";
    return out;
  };
  for (int k = 1; k <= 3; ++k) {
    SCOPED_TRACE(std::to_string(k) + " shares");
    std::vector<StepIndex> indexes;
    std::vector<IndexAndClockShare> shares;
    for (int i = 0; i < k; ++i) {
      shares.push_back(index_and_clock_share(run, i, k));
      indexes.push_back(shares.back().index);
    }
    EXPECT_EQ(to_bytes(join_index_shares(run, std::move(indexes), false)), index);
    std::size_t samples = 0;
    for (std::size_t f = 0; f < run.files().size(); ++f) {
      const IndexAndClockShare& share = shares[f % k];
      EXPECT_FALSE(share.errors[f / k]);
      EXPECT_EQ(said(share.samples[f / k]), said(read_file_clock_samples(run.files()[f])));
      samples += share.samples[f / k].size();
    }
    EXPECT_GT(samples, 0u) << "the run has clock samples";
  }
  // A clock sample's line broken: that file's error is the clock pass's,
  // the other files read as before.
  const fs::path broken = run.files()[1];
  std::vector<std::string> lines;
  {
    std::ifstream in(broken);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  std::size_t at = 0;
  while (at < lines.size() && lines[at].find("lens.clock_sync") == std::string::npos) ++at;
  ASSERT_LT(at, lines.size());
  lines[at].insert(lines[at].size() / 2, "\"oops");
  {
    std::ofstream out(broken);
    for (const auto& line : lines) out << line << "\n";
  }
  std::string pass_error;
  try {
    read_file_clock_samples(broken);
  } catch (const ReadError& e) {
    pass_error = e.what();
  }
  ASSERT_FALSE(pass_error.empty());
  const IndexAndClockShare share = index_and_clock_share(run, 0, 1);
  ASSERT_TRUE(share.errors[1]);
  try {
    std::rethrow_exception(share.errors[1]);
  } catch (const ReadError& e) {
    EXPECT_EQ(std::string(e.what()), pass_error);
  }
  EXPECT_FALSE(share.errors[0]);
  EXPECT_EQ(said(share.samples[0]), said(read_file_clock_samples(run.files()[0])));
}

TEST_F(StepStream, MalformedLineIsAReadErrorNamingFileAndLine) {
  run_.write(dir_, 10);
  {
    std::ofstream out(dir_ / "rank-1.otlp.jsonl", std::ios::app);
    out << "{\"resourceSpans\": [ not json\n";
    out << "{\"resourceSpans\": []}\n";
  }
  try {
    check_dir(dir_);
    FAIL() << "no ReadError";
  } catch (const ReadError& e) {
    EXPECT_NE(std::string(e.what()).find("rank-1.otlp.jsonl:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lens::analysis
