// Which held steps the ranks keep (lens/tail_selection.h).
#include "lens/tail_selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "splitmix.h"

namespace lens {
namespace {

// A rank's window median this many times its first window's: a slowdown
// (above the 2.2x a crowded machine's noise has reached in window medians,
// bench/README.md).
constexpr double kSlowed = 2.5;

bool known(double v) { return std::isfinite(v) && v >= 0; }

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !known(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TailSelector::TailSelector(std::uint32_t keep, std::uint32_t baseline_percent,
                           std::uint64_t run_key)
    : keep_(keep),
      baseline_percent_(std::min<std::uint32_t>(baseline_percent, 100)),
      run_key_(run_key) {}

TailChoice TailSelector::choose(const std::vector<std::uint64_t>& steps,
                                const std::vector<std::vector<double>>& seconds) {
  const std::size_t n = steps.size();
  const auto at = [&](std::size_t r, std::size_t i) {
    return i < seconds[r].size() ? seconds[r][i] : NAN;
  };
  // End to end: the slowest rank's time of each step.
  std::vector<double> end_to_end(n, NAN);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t r = 0; r < seconds.size(); ++r)
      if (known(at(r, i)) && !(at(r, i) <= end_to_end[i])) end_to_end[i] = at(r, i);

  std::vector<std::string> reason(n);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const double x = known(end_to_end[a]) ? end_to_end[a] : -1;
    const double y = known(end_to_end[b]) ? end_to_end[b] : -1;
    return x > y;
  });
  for (std::size_t k = 0; k < order.size() && k < keep_; ++k)
    if (known(end_to_end[order[k]])) reason[order[k]] = "slowest";

  // A slowdown that has just begun, per rank, against its first window.
  if (first_median_.size() < seconds.size()) {
    first_median_.resize(seconds.size(), NAN);
    slowed_.resize(seconds.size(), false);
  }
  for (std::size_t r = 0; r < seconds.size(); ++r) {
    std::vector<double> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = at(r, i);
    const double m = median(mine);
    if (!known(m)) continue;
    if (!known(first_median_[r])) {
      first_median_[r] = m;
      continue;
    }
    const double base = first_median_[r];
    const bool slowed = base > 0 && m >= kSlowed * base;
    if (slowed && !slowed_[r]) {
      for (std::size_t i = 0; i < n; ++i) {
        if (known(mine[i]) && mine[i] >= kSlowed * base) {
          if (reason[i].empty()) reason[i] = "onset of rank " + std::to_string(r);
          break;
        }
      }
    }
    slowed_[r] = slowed;
  }

  // The baseline: the same steps on every rank, from the run's key.
  for (std::size_t i = 0; i < n; ++i) {
    if (!reason[i].empty() || baseline_percent_ == 0) continue;
    const std::uint64_t h = detail::mix64(run_key_ ^ detail::mix64(steps[i] + 1));
    if (h % 100 < baseline_percent_) reason[i] = "baseline";
  }

  TailChoice choice;
  std::vector<std::size_t> by_step(n);
  std::iota(by_step.begin(), by_step.end(), 0);
  std::sort(by_step.begin(), by_step.end(),
            [&](std::size_t a, std::size_t b) { return steps[a] < steps[b]; });
  for (std::size_t i : by_step) {
    if (reason[i].empty()) {
      choice.drop.push_back(steps[i]);
    } else {
      choice.keep.push_back(steps[i]);
      choice.kept.push_back({steps[i], reason[i], end_to_end[i]});
    }
  }
  return choice;
}

}  // namespace lens
