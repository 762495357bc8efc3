// The split of partial_analysis.h over threads (split_threads.h).
#include "split_threads.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <thread>

#include "partial_analysis.h"
#include "run_import.h"
#include "step_stream.h"

namespace lens::analysis {
namespace {

// each(0) .. each(n - 1), each on a thread of its own (0 on the caller's);
// their results in that order. The exception of the lowest index that
// threw is rethrown once all have ended.
std::vector<std::string> on_threads(int n, const std::function<std::string(int)>& each) {
  const auto count = static_cast<std::size_t>(std::max(n, 1));
  std::vector<std::string> out(count);
  std::vector<std::exception_ptr> errors(count);
  const auto run = [&](std::size_t i) {
    try {
      out[i] = each(static_cast<int>(i));
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < count; ++i) {
    try {
      threads.emplace_back(run, i);
    } catch (...) {
      run(i);  // no thread to be had: run it here
    }
  }
  run(0);
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

// Each stream reads with one thread while the ranges run (they are the
// threads), as lens --threads chose before after.
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
// over the run's bytes, said from the caller's thread (range 0's) only, and
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

// The index, the ranges and (unless raw_clock) the clock; nullopt where the
// split does not apply.
std::optional<Split> split_run(const OpenedRun& run, bool raw_clock, int threads) {
  if (threads < 2 || !is_lens_layout(run.input()) || run.files().size() == 0) return std::nullopt;
  Split s;
  if (auto saved = saved_step_index(run)) {
    s.index = std::move(*saved);
  } else {
    std::vector<StepIndex> shares;
    for (const std::string& bytes : on_threads(threads, [&](int share) {
           return to_bytes(index_share(run, share, threads));
         }))
      shares.push_back(step_index_from_bytes(bytes));
    s.index = join_index_shares(run, std::move(shares), false);
  }
  const std::size_t steps = s.index.steps().size();
  if (steps < 2) return std::nullopt;
  if (!cuts_cleanly(s.index)) return std::nullopt;  // one stream reads it
  const int parts = static_cast<int>(std::min<std::size_t>(steps, static_cast<std::size_t>(threads)));
  s.ranges = split_steps(s.index, parts);
  if (!raw_clock)
    s.clock = clock_from_samples(join_clock_samples(on_threads(
        threads, [&](int share) { return clock_samples_share(run, share, threads); })));
  return s;
}

}  // namespace

std::optional<Analysis> analyze_on_threads(const OpenedRun& run, bool raw_clock, int threads,
                                           std::vector<std::string>* warnings,
                                           const ReadProgress& progress) {
  OneThreadEach one;
  const std::optional<Split> s = split_run(run, raw_clock, threads);
  if (!s) return std::nullopt;
  PartsProgress read(s->ranges.size(), progress);
  const std::vector<std::string> parts =
      on_threads(static_cast<int>(s->ranges.size()), [&](int i) {
        const auto at = static_cast<std::size_t>(i);
        return analyze_part(run, s->index, s->ranges[at], s->clock, false, read.of(at));
      });
  read.done();
  std::vector<std::string> said;
  bool repeats = false;
  Analysis a = merge_parts(parts, s->clock, raw_clock, false, &said, &repeats);
  if (repeats || a.left_out.late + a.left_out.duplicates > 0) return std::nullopt;
  if (warnings) warnings->insert(warnings->end(), said.begin(), said.end());
  return a;
}

std::optional<CheckResult> check_on_threads(const OpenedRun& run, int threads,
                                            const ReadProgress& progress) {
  OneThreadEach one;
  // Start times are compared on the run's clock samples (check_dir).
  const std::optional<Split> s = split_run(run, false, threads);
  if (!s) return std::nullopt;
  const StartOrder order = start_order_of(run, s->clock);
  PartsProgress read(s->ranges.size(), progress);
  const std::vector<std::string> parts =
      on_threads(static_cast<int>(s->ranges.size()), [&](int i) {
        const auto at = static_cast<std::size_t>(i);
        return check_part(run, s->index, s->ranges[at], order, read.of(at));
      });
  read.done();
  bool repeats = false;
  CheckResult r = merge_check_parts(parts, run, order, &repeats);
  if (repeats || r.late.late + r.late.duplicates > 0 || !r.violations.empty()) return std::nullopt;
  return r;
}

}  // namespace lens::analysis
