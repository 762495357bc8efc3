// ClockDriftFit: offset over local time by weighted least squares
// (clock_sync.h), with the analysis's line (line_fit.h).
#include <algorithm>
#include <cmath>

#include "lens/clock_sync.h"

namespace lens {

namespace {
// The least uncertainty a sample is weighed by (ns).
constexpr double kMinWeightNs = 1000;
}  // namespace

void ClockDriftFit::add(const ClockSample& sample) {
  if (line_.points() == 0) origin_ns_ = sample.local_time_ns;
  // Seconds since the first sample and ns of offset, as the analysis fits.
  const double x = static_cast<double>(sample.local_time_ns - origin_ns_) * 1e-9;
  const double y = static_cast<double>(sample.offset_ns);
  const double u = std::max(static_cast<double>(sample.uncertainty_ns), kMinWeightNs);
  line_.add(x, y, 1.0 / (u * u));
}

std::optional<double> ClockDriftFit::drift_ppm() const {
  const auto line = line_.line();
  if (!line) return std::nullopt;  // fewer than two samples, or all at one time
  // The slope's standard error, in ppm, with each sample's uncertainty as
  // its error: samples milliseconds apart say little about drift. ns per s
  // is 1e-3 ppm.
  if (line->slope_error * 1e-3 > kMaxDriftErrorPpm) return std::nullopt;
  return line->slope * 1e-3;
}

}  // namespace lens
