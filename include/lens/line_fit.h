// A straight line through weighted points by least squares: the drift of a
// clock, where it is measured (clock_sync.h: ClockDriftFit) and where a
// run's samples are aligned (the analysis's clock alignment). One formula,
// so that a rank's drift reads the same in both.
//
// Thread safety: a value; not for concurrent use.
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>

namespace lens {

class WeightedLineFit {
 public:
  struct Line {
    double slope = 0;
    double intercept = 0;    // the line's value at x = 0
    double slope_error = 0;  // the slope's standard error, with each weight as 1 / variance
  };

  // A point; `weight` > 0 (1 / its variance). Keep x near 0 (measure it
  // from the first point): the sums of squares stay well conditioned.
  void add(double x, double y, double weight) {
    ++points_;
    sw_ += weight;
    sx_ += weight * x;
    sy_ += weight * y;
    sxx_ += weight * x * x;
    sxy_ += weight * x * y;
  }
  std::size_t points() const { return points_; }
  // The weighted mean of y (the best constant); 0 without points.
  double mean() const { return points_ == 0 ? 0 : sy_ / sw_; }
  // The line, once two points at different x say one.
  std::optional<Line> line() const {
    if (points_ < 2) return std::nullopt;
    const double denominator = sw_ * sxx_ - sx_ * sx_;
    if (!(denominator > 0)) return std::nullopt;  // every point at one x
    Line l;
    l.slope = (sw_ * sxy_ - sx_ * sy_) / denominator;
    l.intercept = (sy_ - l.slope * sx_) / sw_;
    l.slope_error = std::sqrt(sw_ / denominator);
    return l;
  }

 private:
  std::size_t points_ = 0;
  double sw_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

}  // namespace lens
