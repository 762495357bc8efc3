// StepBudget: the source rank's token bucket of sampled steps
// (LENS_STEP_BUDGET; step_context.h).
#include <algorithm>

#include "lens/step_context.h"

namespace lens {

bool StepBudget::take(std::int64_t now_ns) {
  if (per_minute_ == 0) return true;
  if (last_ns_ >= 0 && now_ns > last_ns_) {
    tokens_ = std::min<double>(
        per_minute_, tokens_ + static_cast<double>(now_ns - last_ns_) * per_minute_ / 60e9);
  }
  last_ns_ = now_ns;
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

}  // namespace lens
