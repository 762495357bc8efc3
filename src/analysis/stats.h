// The order statistics the analysis shares: percentiles over a run's steps
// (nearest rank, so a figure is always one that was measured) and the
// midpoint median of a handful of values.
//
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace lens::analysis {

// Nearest-rank percentile (p in [0, 1]); 0 for no values.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

// percentile(v, 0.5): the lower middle value for an even count.
inline double p50(std::vector<double> v) { return percentile(std::move(v), 0.5); }

// The middle value, or the mean of the two middle values for an even count;
// 0 for no values.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

}  // namespace lens::analysis
