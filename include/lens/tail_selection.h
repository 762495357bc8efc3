/// \file
/// TailSelector: which held steps the ranks keep (docs/tail-selection.md).
///
/// At each meeting every rank brings its time of each step of the window;
/// every rank runs the same selector over the same gathered figures, so the
/// choice is the same everywhere with no further collective:
///   - the `keep` slowest steps of the window, by their end-to-end time
///     (the slowest rank's time of the step: the step ends when its last
///     rank does; ties to the earlier step);
///   - for each rank whose window median is 2.5 times its first window's
///     while its previous window's was not (a slowdown that has just begun),
///     the first step of the window at 2.5 times or more: where it began
///     (kept beside the `keep` slowest: the budget is theirs, an onset is
///     rare and worth its step);
///   - a baseline: each step whose hash of (run key, step) falls in the
///     lowest `baseline_percent` percent, ordinary steps to compare with.
/// The rest are not selected. A rank's clock does not enter: the times are
/// durations on each rank's own clock.
///
/// Thread safety: one selector per training loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lens {

struct TailChoice {
  std::vector<std::uint64_t> keep;  ///< ascending
  std::vector<std::uint64_t> drop;  ///< ascending
  struct Kept {
    std::uint64_t step = 0;
    std::string reason;  ///< "slowest", "onset of rank R", "baseline"
    double seconds = 0;  ///< its end-to-end time
  };
  std::vector<Kept> kept;  ///< by step; a step kept for two reasons names the first
};

class TailSelector {
 public:
  TailSelector(std::uint32_t keep, std::uint32_t baseline_percent, std::uint64_t run_key);

  /// `steps`: the window's step numbers; `seconds[r][i]`: rank r's time of
  /// steps[i] (NaN or negative: not known, never chosen by it). Ranks with
  /// fewer entries than steps are read as not knowing the rest.
  TailChoice choose(const std::vector<std::uint64_t>& steps,
                    const std::vector<std::vector<double>>& seconds);

 private:
  std::uint32_t keep_;
  std::uint32_t baseline_percent_;
  std::uint64_t run_key_;
  std::vector<double> first_median_;  // per rank: its first window's
  std::vector<bool> slowed_;          // per rank: its last window was slowed
};

}  // namespace lens
