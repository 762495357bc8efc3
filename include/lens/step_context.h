/// \file
/// A step's context: what the source rank of a step reserves before the step
/// span opens, how every rank opens its step span in it, and, in `pipeline`
/// scope, global rank 0's step context that every replica links to.
///
///   source:  StepCarrier c = reserve_step_context(telemetry, scope, rank, step, budget);
///   all:     (c travels in broadcast_trace_context)
///   all:     start.context = step_span_context(c, /*reserved_here=*/rank == source);
///
/// Thread safety: pure functions, except that StepBudget is a value owned by
/// one training loop.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "lens/carrier.h"
#include "lens/parallel_layout.h"
#include "lens/span_context.h"
#include "lens/span_record.h"
#include "lens/telemetry.h"

namespace lens {

/// Global rank 0's step context in `pipeline` scope, derived from the run's
/// shared key, its id and the step (the same on every rank). Its sampled
/// flag is left clear; the source applies the sampler.
SpanContext anchor_step_context(std::uint64_t run_key, std::string_view run_id, std::uint64_t step);

/// At most `per_minute` decisions of "keep" per 60 s (a token bucket that
/// starts full); 0 keeps everything. Used by a step's source rank
/// (LENS_STEP_BUDGET), whose decision travels in the frame.
class StepBudget {
 public:
  explicit StepBudget(std::uint32_t per_minute = 0)
      : per_minute_(per_minute), tokens_(per_minute) {}
  /// Takes a token if one is left at `now_ns` (a steady clock reading).
  bool take(std::int64_t now_ns);

 private:
  std::uint32_t per_minute_;
  double tokens_;
  std::int64_t last_ns_ = -1;
};

/// The context a step's source rank reserves and broadcasts for `step`: a
/// fresh trace id and span id (in `pipeline` scope, global rank 0 takes the
/// anchor's instead), and the sampled flag: the sampler's decision (in
/// `pipeline` scope on the anchor's trace id, so replicas are kept or
/// dropped together) and a token from `budget`.
StepCarrier reserve_step_context(const Telemetry& telemetry, TraceScope scope, int global_rank,
                                 std::uint64_t step, StepBudget& budget);

/// The context a rank's step span opens in (StartOptions::context): the
/// step's trace, flags and tracestate, and, on the rank that reserved it, the
/// reserved span id, so links to the source's step span resolve. Other
/// ranks' step spans are roots of the same trace with ids of their own.
SpanContext step_span_context(const StepCarrier& carrier, bool reserved_here);

/// Throws ConfigError unless `config` can run `pipeline` scope: the run key
/// must have been agreed at start-up (every replica derives global rank 0's
/// step context from it) and this rank's global rank known (global rank 0
/// takes the anchor). StepTrace and the Python package call it.
void require_pipeline_scope_settings(const Config& config);

/// In `pipeline` scope: the Link a step span in `carrier`'s trace carries to
/// global rank 0's step span; nullopt for global rank 0's own trace.
std::optional<SpanLink> global_rank_zero_link(const Telemetry& telemetry,
                                              const StepCarrier& carrier);

}  // namespace lens
