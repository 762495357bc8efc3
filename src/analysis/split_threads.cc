// The split of partial_analysis.h over threads (split_threads.h).
#include "split_threads.h"

#include <algorithm>
#include <atomic>
#include <exception>

#include "clock_alignment.h"
#include "partial_analysis.h"
#include "per_file.h"
#include "run_import.h"
#include "step_stream.h"

namespace lens::analysis {
namespace {

// Each stream reads with one thread while the ranges run (they are the
// threads); afterwards, as lens --threads chose.
class OneThreadEach {
 public:
  OneThreadEach() : chosen_(read_threads_chosen() ? default_read_threads() : 0) {
    set_default_read_threads(1);
  }
  ~OneThreadEach() { set_default_read_threads(chosen_); }
  OneThreadEach(const OneThreadEach&) = delete;
  OneThreadEach& operator=(const OneThreadEach&) = delete;

 private:
  int chosen_;
};

// The ranges' reading as one progress line: the bytes every range has read
// over the run's bytes, said from one thread (range 0's) only, and
// held short of the whole (ranges read a line or two twice) until the end.
class PartsProgress {
 public:
  PartsProgress(std::size_t parts, ReadProgress report)
      : read_(parts), report_(std::move(report)) {}
  ReadProgress of(std::size_t part) {
    if (!report_) return {};
    return [this, part](std::uintmax_t bytes, std::uintmax_t total) {
      read_[part].store(bytes, std::memory_order_relaxed);
      total_.store(total, std::memory_order_relaxed);
      if (part != 0) return;
      std::uintmax_t sum = 0;
      for (const auto& r : read_) sum += r.load(std::memory_order_relaxed);
      if (total > 0) report_(std::min(sum, total - 1), total);
    };
  }
  void done() {
    const std::uintmax_t total = total_.load();
    if (report_ && total > 0) report_(total, total);
  }

 private:
  std::vector<std::atomic<std::uintmax_t>> read_;
  std::atomic<std::uintmax_t> total_{0};
  ReadProgress report_;
};

struct Split {
  StepIndex index;
  std::vector<StepRange> ranges;
  ClockAlignment clock;
};

// The index, the ranges and (unless raw_clock) the clock, as one stream
// reads it; nullopt where the split does not apply.
std::optional<Split> split_run(const OpenedRun& run, bool raw_clock, int threads) {
  if (threads < 2 || !is_lens_layout(run.input()) || run.files().size() == 0) return std::nullopt;
  Split s;
  // Without a saved index, each file is read once for both its index and
  // its clock samples (the samples added in file order, and the first
  // file's error the clock pass would raise raised, after the checks
  // below, as one stream would meet them).
  std::optional<ClockAlignment> clock;
  std::exception_ptr clock_error;
  if (auto saved = saved_step_index(run)) {
    s.index = std::move(*saved);
  } else if (raw_clock) {
    s.index = join_index_shares(
        run,
        in_order(static_cast<std::size_t>(threads), threads,
                 [&](std::size_t share) { return index_share(run, static_cast<int>(share), threads); }),
        false);
  } else {
    std::vector<IndexAndClockShare> shares =
        in_order(static_cast<std::size_t>(threads), threads, [&](std::size_t share) {
          return index_and_clock_share(run, static_cast<int>(share), threads);
        });
    std::vector<StepIndex> indexes;
    for (auto& share : shares) indexes.push_back(std::move(share.index));
    s.index = join_index_shares(run, std::move(indexes), false);
    // File i is share i mod k's (i / k)-th.
    const std::size_t k = shares.size();
    clock.emplace();
    for (std::size_t i = 0; i < s.index.files.size(); ++i) {
      const IndexAndClockShare& share = shares[i % k];
      if (share.errors[i / k] && !clock_error) clock_error = share.errors[i / k];
      for (const auto& sample : share.samples[i / k]) clock->add(sample);
    }
  }
  const std::size_t steps = s.index.steps().size();
  if (steps < 2 || !cuts_cleanly(s.index)) return std::nullopt;  // one stream reads it
  s.ranges = split_steps(s.index, static_cast<int>(std::min<std::size_t>(
                                      steps, static_cast<std::size_t>(threads))));
  if (clock_error) std::rethrow_exception(clock_error);
  if (!raw_clock) s.clock = clock ? std::move(*clock) : read_clock_alignment(run);
  return s;
}

// The ranges' parts, each made by `part` on a thread of its own, in order.
template <typename Part>
std::vector<std::string> parts_of(const Split& s, Part&& part) {
  OneThreadEach one;
  return in_order(s.ranges.size(), static_cast<int>(s.ranges.size()), part);
}

// analyze's and summary's split: the parts `part` makes of each range on
// threads of their own, merged by `merge` (which says the files' warnings
// and whether the spans of no step repeat one); nullopt where the split
// does not apply or a cut could see less than one stream (a repeat, spans
// left out), and then nothing is said.
template <typename Result, typename Part, typename Merge>
std::optional<Result> split_and_merge(const OpenedRun& run, bool raw_clock, int threads,
                                      std::vector<std::string>* warnings,
                                      const ReadProgress& progress, Part&& part, Merge&& merge) {
  const std::optional<Split> s = split_run(run, raw_clock, threads);
  if (!s) return std::nullopt;
  PartsProgress read(s->ranges.size(), progress);
  const std::vector<std::string> parts =
      parts_of(*s, [&](std::size_t i) { return part(*s, s->ranges[i], read.of(i)); });
  read.done();
  std::vector<std::string> said;
  bool repeats = false;
  Result merged = merge(*s, parts, &said, &repeats);
  if (repeats || merged.left_out.late + merged.left_out.duplicates > 0) return std::nullopt;
  if (warnings) warnings->insert(warnings->end(), said.begin(), said.end());
  return merged;
}

}  // namespace

std::optional<Analysis> analyze_on_threads(const OpenedRun& run, bool raw_clock, int threads,
                                           std::vector<std::string>* warnings,
                                           const ReadProgress& progress,
                                           bool keep_critical_path) {
  return split_and_merge<Analysis>(
      run, raw_clock, threads, warnings, progress,
      [&](const Split& s, StepRange range, const ReadProgress& read) {
        return analyze_part(run, s.index, range, s.clock, keep_critical_path, read);
      },
      [&](const Split& s, const std::vector<std::string>& parts, std::vector<std::string>* said,
          bool* repeats) {
        return merge_parts(parts, s.clock, raw_clock, keep_critical_path, said, repeats);
      });
}

Analysis analyze_on_threads_or_one_stream(const OpenedRun& run, const AnalyzeOptions& options,
                                          int threads, std::vector<std::string>* warnings) {
  if (std::optional<Analysis> a = analyze_on_threads(run, options.raw_clock, threads, warnings,
                                                     options.progress, options.keep_critical_path))
    return std::move(*a);
  return analyze_run(run, options, warnings);
}

std::optional<Summary> summary_on_threads(const OpenedRun& run, bool raw_clock, int threads,
                                          std::vector<std::string>* warnings,
                                          const ReadProgress& progress) {
  return split_and_merge<Summary>(
      run, raw_clock, threads, warnings, progress,
      [&](const Split& s, StepRange range, const ReadProgress& read) {
        return summary_part(run, s.index, range, s.clock, read);
      },
      [&](const Split& s, const std::vector<std::string>& parts, std::vector<std::string>* said,
          bool* repeats) { return merge_summary_parts(parts, s.clock, raw_clock, said, repeats); });
}

std::optional<CheckResult> check_on_threads(const OpenedRun& run, int threads,
                                            const ReadProgress& progress) {
  // Start times are compared on the run's clock samples (check_dir).
  const std::optional<Split> s = split_run(run, false, threads);
  if (!s) return std::nullopt;
  const StartOrder order = start_order_of(run, s->clock);
  PartsProgress read(s->ranges.size(), progress);
  const std::vector<std::string> parts = parts_of(*s, [&](std::size_t i) {
    return check_part(run, s->index, s->ranges[i], order, read.of(i));
  });
  read.done();
  bool repeats = false;
  CheckResult r = merge_check_parts(parts, run, order, &repeats);
  if (repeats || r.late.late + r.late.duplicates > 0 || !r.violations.empty()) return std::nullopt;
  return r;
}

}  // namespace lens::analysis
