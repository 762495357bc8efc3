/// \file
/// StepBudget: LENS_STEP_BUDGET, the steps kept per minute, as the source's
/// own token bucket or as a schedule every deciding rank computes alike.
///
/// Thread safety: a value owned by one training loop.
#pragma once

#include <cstdint>

namespace lens {

/// LENS_STEP_BUDGET: at most `per_minute` kept steps per minute (0: no
/// budget), as a token bucket that starts full.
///
/// A budget is either the source's own (refilled by the steady clock: in
/// `world` scope with `broadcast` step contexts the source decides alone and
/// its decision travels in the frame), or shared: refilled by a rate in
/// micro-tokens per step that global rank 0 measures and every deciding rank
/// is given alike (set_shared_rate), so every rank and every replica that
/// decides a step decides it the same way with integer arithmetic alone
/// (`derived` step contexts, and `pipeline` scope where each replica's
/// source decides). A shared budget starts with no refill: the first
/// `per_minute` steps are kept until the first rate arrives.
class StepBudget {
 public:
  explicit StepBudget(std::uint32_t per_minute = 0, bool shared = false)
      : per_minute_(per_minute),
        shared_(shared),
        tokens_(static_cast<double>(per_minute)),
        micro_tokens_(std::uint64_t{per_minute} * kMicro) {}
  /// One step's decision at `now_ns` (a steady clock reading; unused when
  /// shared): refills, then, if `sampler_keeps`, takes a token if one is left.
  /// Call it once per step, in step order, on every deciding rank.
  bool decide(std::int64_t now_ns, bool sampler_keeps = true);
  /// The refill per step of a shared budget, from global rank 0.
  void set_shared_rate(std::uint64_t micro_tokens_per_step) { rate_ = micro_tokens_per_step; }
  std::uint64_t shared_rate() const { return rate_; }
  bool shared() const { return shared_; }
  std::uint32_t per_minute() const { return per_minute_; }
  /// The rate that refills `per_minute` tokens a minute when `steps` steps
  /// took `elapsed_ns`; 0 when nothing was measured.
  static std::uint64_t rate_for(std::uint32_t per_minute, std::uint64_t steps,
                                std::int64_t elapsed_ns);
  static constexpr std::uint64_t kMicro = 1000000;

 private:
  std::uint32_t per_minute_;
  bool shared_;
  double tokens_;
  std::int64_t last_ns_ = -1;
  std::uint64_t micro_tokens_;
  std::uint64_t rate_ = 0;
};

}  // namespace lens
