// StepBudget: LENS_STEP_BUDGET as the source's own token bucket or as a
// schedule every deciding rank computes alike (step_budget.h).
#include "lens/step_budget.h"

#include <algorithm>
#include <cmath>

namespace lens {

bool StepBudget::decide(std::int64_t now_ns, bool sampler_keeps) {
  if (per_minute_ == 0) return sampler_keeps;
  if (shared_) {
    // Integers only: every rank given the same rate decides alike.
    const std::uint64_t cap = std::uint64_t{per_minute_} * kMicro;
    micro_tokens_ = std::min(cap, micro_tokens_ + std::min(rate_, cap));
    if (!sampler_keeps || micro_tokens_ < kMicro) return false;
    micro_tokens_ -= kMicro;
    return true;
  }
  if (last_ns_ >= 0 && now_ns > last_ns_) {
    tokens_ = std::min<double>(
        per_minute_, tokens_ + static_cast<double>(now_ns - last_ns_) * per_minute_ / 60e9);
  }
  last_ns_ = now_ns;
  if (!sampler_keeps || tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

std::uint64_t StepBudget::rate_for(std::uint32_t per_minute, std::uint64_t steps,
                                   std::int64_t elapsed_ns) {
  if (per_minute == 0 || steps == 0 || elapsed_ns <= 0) return 0;
  // Tokens per step = per_minute x (minutes per step), in micro-tokens.
  const double rate = static_cast<double>(per_minute) * static_cast<double>(kMicro) *
                      (static_cast<double>(elapsed_ns) / 60e9) / static_cast<double>(steps);
  const double cap = static_cast<double>(per_minute) * static_cast<double>(kMicro);
  return static_cast<std::uint64_t>(std::llround(std::clamp(rate, 0.0, cap)));
}

}  // namespace lens
