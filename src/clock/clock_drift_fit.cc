// ClockDriftFit: offset over local time by weighted least squares
// (clock_sync.h).
#include <algorithm>
#include <cmath>

#include "lens/clock_sync.h"

namespace lens {

void ClockDriftFit::add(const ClockSample& sample) {
  if (n_ == 0) origin_ns_ = sample.local_time_ns;
  // Seconds since the first sample and µs of offset: sums of squares stay
  // far from double's limits over any run.
  const double x = static_cast<double>(sample.local_time_ns - origin_ns_) * 1e-9;
  const double y = static_cast<double>(sample.offset_ns) * 1e-3;
  const double u = std::max<double>(static_cast<double>(sample.uncertainty_ns) * 1e-3, 1.0);
  const double w = 1.0 / (u * u);
  ++n_;
  sw_ += w;
  sx_ += w * x;
  sy_ += w * y;
  sxx_ += w * x * x;
  sxy_ += w * x * y;
}

std::optional<double> ClockDriftFit::drift_ppm() const {
  if (n_ < 2) return std::nullopt;
  const double denominator = sw_ * sxx_ - sx_ * sx_;
  if (!(denominator > 0)) return std::nullopt;  // samples at one time
  // The slope's standard error, in ppm, with each sample's uncertainty as
  // its error: samples milliseconds apart say little about drift.
  if (std::sqrt(sw_ / denominator) > kMaxDriftErrorPpm) return std::nullopt;
  return (sw_ * sxy_ - sx_ * sy_) / denominator;  // µs per s is ppm
}

}  // namespace lens
