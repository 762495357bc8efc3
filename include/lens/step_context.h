/// \file
/// A step's context: what the source rank of a step reserves before the step
/// span opens, how every rank opens its step span in it, and, in `pipeline`
/// scope, global rank 0's step context that every replica links to.
///
///   source:  StepCarrier c = reserve_step_context(telemetry, scope, rank, step, budget);
///   all:     (c travels in broadcast_trace_context)
///   all:     start.context = step_span_context(c, /*reserved_here=*/rank == source);
///
/// In `derived` mode there is no broadcast: every rank calls
/// derive_step_context for the step instead (docs/derived-step-context.md).
///
/// Thread safety: pure functions, except that StepBudget is a value owned by
/// one training loop.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "lens/carrier.h"
#include "lens/parallel_layout.h"
#include "lens/span.h"
#include "lens/span_context.h"
#include "lens/span_record.h"
#include "lens/step_budget.h"
#include "lens/telemetry.h"

namespace lens {

/// Global rank 0's step context in `pipeline` scope, derived from the run's
/// shared key, its id and the step (the same on every rank). Its sampled
/// flag is left clear; the source applies the sampler.
SpanContext anchor_step_context(std::uint64_t run_key, std::string_view run_id, std::uint64_t step);

/// The context a step's source rank reserves and broadcasts for `step`: a
/// fresh trace id and span id (in `pipeline` scope, global rank 0 takes the
/// anchor's instead), and the sampled flag: the sampler's decision (in
/// `pipeline` scope on the anchor's trace id, so replicas are kept or
/// dropped together) and a token from `budget`.
StepCarrier reserve_step_context(const Telemetry& telemetry, TraceScope scope, int global_rank,
                                 std::uint64_t step, StepBudget& budget);

/// In `derived` mode (LENS_STEP_CONTEXT=derived): step `step`'s context as
/// every rank of the step's trace derives it, with no collective, from the
/// run key and run id agreed at start-up: in `world` scope the anchor
/// itself (anchor_step_context); in `pipeline` scope the anchor for the
/// pipeline whose first stage is global rank 0, and for every other
/// pipeline a context derived from the same inputs and `pipeline_source`,
/// the global rank of the pipeline's first stage (its step's source): one
/// per pipeline in every layout, whatever its data-, tensor- or
/// context-parallel coordinates. Its sampled flag is the sampler's decision
/// on the anchor's trace id and a token from `budget` (shared: every rank
/// decides alike). Counted in pipeline_stats().derived_steps. Throws
/// ConfigError in `pipeline` scope without a `pipeline_source` of 0 or
/// more.
StepCarrier derive_step_context(const Telemetry& telemetry, TraceScope scope, std::uint64_t step,
                                StepBudget& budget,
                                std::optional<int> pipeline_source = std::nullopt);

/// The context a rank's step span opens in (StartOptions::context): the
/// step's trace, flags and tracestate, and, on the rank that reserved it, the
/// reserved span id, so links to the source's step span resolve. Other
/// ranks' step spans are roots of the same trace with ids of their own.
SpanContext step_span_context(const StepCarrier& carrier, bool reserved_here);

/// The job's one trace: every rank's `megatron.job` span in it, with ids
/// from the agreed run key and run id (the same on every rank). Global rank
/// 0's job span takes this context's span id; every other rank's is a root
/// of the same trace with its own span id and a Link to rank 0's.
/// StartOptions for `rank`'s job span (the sampler decides on the trace id,
/// alike everywhere).
SpanContext job_span_context(const Telemetry& telemetry);
StartOptions job_span_start(const Telemetry& telemetry, int global_rank);

/// True when more than one rank decides each step's sampling (every rank
/// in `derived` mode, each replica's source in `pipeline` scope): the step
/// budget is then a schedule they compute alike (StepBudget, shared).
bool step_budget_shared(const Config& config, TraceScope scope);

/// How often the step check runs (step_check.h), in opened steps; 0 when
/// it does not: in `derived` mode every LENS_STEP_VERIFY_STEPS steps, and
/// where a shared step budget's rate must be renewed. Throws ConfigError for
/// a shared step budget with LENS_STEP_VERIFY_STEPS=0 (nothing would renew
/// it).
std::uint32_t step_check_interval(const Config& config, TraceScope scope);

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
