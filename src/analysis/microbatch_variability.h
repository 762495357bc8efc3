// MicrobatchVariability: whether the work itself varies by microbatch
// (sequence lengths, say) rather than by rank (docs/analysis.md, "Work that
// varies by microbatch").
//
// Noise on a rank (preemption, a busy host) makes one rank's microbatch
// slow; work that varies by microbatch makes that microbatch slow on every
// stage of its replica. So, per stage, each microbatch's compute (forward
// and backward together) is taken against the median microbatch of the
// same stage and step ("relative cost"), and the verdict needs both:
// - spread: the median over stages of the p90 / p10 of relative cost is at
//   least kVariabilitySpread;
// - shared: the relative costs of one microbatch on two stages of its
//   replica correlate (Pearson, of their logarithms, the mean over stage
//   pairs) by at least kVariabilityCorrelation.
// It also says how often the replica that set the step (the last at the
// gradient sync) changed from one step to the next: with variable work it
// changes; with a straggler it does not.
//
// Thread safety: a value; one thread adds.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "step_analysis.h"

namespace lens::analysis {

inline constexpr double kVariabilitySpread = 2.0;
inline constexpr double kVariabilityCorrelation = 0.7;

struct StageSpread {
  int stage = -1;
  std::size_t microbatches = 0;  // computes seen, over steps and replicas
  double p50_ms = 0, p95_ms = 0, max_over_min = 0;
  double relative_p90_p10 = 0;  // of each microbatch against its step's median on the stage
};

struct Variability {
  std::vector<StageSpread> stages;
  double spread = 0;          // median over stages of relative_p90_p10
  double correlation = 0;     // mean over stage pairs; 0 with one stage
  double setter_changes = 0;  // share of steps whose setting replica differs from the step before
  bool variable = false;      // the verdict: spread and correlation both at their thresholds
};

class MicrobatchVariability {
 public:
  // One step's microbatch costs, and the replica that set it.
  void add(const std::vector<MicrobatchCost>& costs, int setter);
  Variability finish() const;

 private:
  std::map<int, std::vector<double>> cost_ms_;   // stage -> every microbatch's cost
  std::map<int, std::vector<double>> relative_;  // stage -> relative costs
  // Per stage pair (a < b): sums for the correlation of log relative costs.
  struct Sums {
    double n = 0, x = 0, y = 0, xx = 0, yy = 0, xy = 0;
  };
  std::map<std::pair<int, int>, Sums> pairs_;
  // A step's working room, kept between steps.
  struct LogRelative {
    int replica, tensor;
    std::int64_t microbatch;
    int stage;
    double value;
  };
  std::vector<const MicrobatchCost*> by_stage_;
  std::vector<LogRelative> log_relative_;
  std::optional<int> last_setter_;
  std::size_t steps_ = 0, changes_ = 0;
};

}  // namespace lens::analysis
