/// \file
/// StepTrace: the per-step protocol that puts every pipeline stage of a step
/// into one trace (docs/DESIGN.md, "The step protocol, by name").
///
///   lens::StepTrace step_trace(telemetry, &world_comm, {.pipeline_parallel_size = P,
///                                                       .pipeline_rank = stage});
///   for (step ...) {
///     lens::StepScope step(step_trace, step_number);   // broadcast when gated
///     ... schedule; at warmup / pre-1F1B receives on non-first stages:
///     lens::Span link = step_trace.recv_forward_linked(microbatch);
///   }
///
/// Gate, identical on every rank: telemetry initialised (non-null) AND the
/// pipeline-parallel size > 1. When it holds, StepScope's constructor is a
/// collective over the communicator: the source rank reserves the step context
/// (fresh trace id, the span id its step span will have, the sampler's
/// decision in the flags) and opens its step span with it, ONE broadcast
/// carries it, the carrier goes into the per-process slot (carrier_slot.h),
/// and every other rank opens its step span as a root span of that trace.
/// (With the prefetch, the source opens its span when its step begins: the
/// context was broadcast during the step before.) Disabling span groups never changes whether the
/// collective runs: with `communication` off the broadcast still happens (ids
/// stay shared) and only the linked spans are skipped.
///
/// With LENS_STEP_CONTEXT=derived (Config::step_context, agreed at start-up)
/// no step runs the broadcast: every rank derives the step's context from
/// the step number and what the start-up agreement shared
/// (derive_step_context, step_context.h), and every
/// LENS_STEP_VERIFY_STEPS opened steps the ranks compare their step numbers
/// in one all-gather (step_check.h) instead. Step numbers then have to be
/// the same on every rank; a rank that passes another fails every rank at
/// the next check with StepCheckError. In `pipeline` scope each pipeline's
/// trace is derived from its source's global rank, which the constructor
/// learns in one broadcast over the pipeline's communicator (a collective:
/// every rank of the pipeline constructs its StepTrace).
///
/// Thread safety: one StepTrace per training loop thread; StepScope is used on
/// the thread that created it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lens/broadcast_trace_context.h"
#include "lens/carrier.h"
#include "lens/communicator.h"
#include "lens/parallel_layout.h"
#include "lens/span.h"
#include "lens/step_check.h"
#include "lens/step_context.h"
#include "lens/telemetry.h"
#include "lens/semconv.h"

namespace lens {

class ClockSchedule;

struct StepTraceOptions {
  /// Rank (in the communicator) that decides and broadcasts each step's context.
  int src_rank = 0;
  /// The job's pipeline-parallel size: the gate (1 never broadcasts).
  /// Required: the communicator's size is not it (a data-parallel job may
  /// pass its world communicator). Unset throws ConfigError.
  std::optional<int> pipeline_parallel_size = std::nullopt;
  /// This rank's pipeline stage (dl.pipeline_parallel.rank); unset: the
  /// communicator rank.
  std::optional<int> pipeline_rank = std::nullopt;
  /// Unset: the telemetry's collective timeout (LENS_COLLECTIVE_TIMEOUT_MS).
  /// At least 1 ms (ConfigError otherwise).
  std::optional<std::chrono::milliseconds> timeout = std::nullopt;
  /// Unset: the telemetry's (LENS_TRACE_SCOPE). In `pipeline` scope the
  /// communicator is this rank's pipeline group: its first stage reserves and
  /// broadcasts the replica's step context, and every step span outside
  /// global rank 0's trace links to global rank 0's step span, whose context
  /// every rank derives from the run key, the run id and the step without
  /// any further collective (anchor_step_context, step_context.h). Pipeline
  /// scope needs the run key agreed at start-up (create_distributed_telemetry)
  /// and this rank's global rank (Config::rank): without either every
  /// replica would derive a different anchor, so StepTrace refuses it with
  /// ConfigError.
  std::optional<TraceScope> trace_scope = std::nullopt;
  // The step prefetch is the telemetry's (Config::step_prefetch,
  // LENS_STEP_PREFETCH, agreed at start-up; world scope only): each
  // StepScope posts the next step's broadcast as soon as this step's has
  // arrived and waits for it only when the next StepScope opens, so its
  // latency hides behind the step (the communicator must allow the step's
  // other collectives meanwhile: true when they run on other groups, as the
  // PP p2p and DP all-reduce groups are). The source then decides step s+1's
  // context at the start of step s. Step numbers must be consecutive; a
  // StepScope for another step uses the posted context and counts a step
  // mismatch. The destructor waits (at most 5 s) for the last posted one.
  /// The communicator over every rank of the job (global rank 0 its rank
  /// 0). Clock samples run over it (docs/clock-alignment.md), and so does
  /// the step check (step_check.h). Unset: the step communicator in `world`
  /// scope; in `pipeline` scope the pipeline group does not reach every
  /// rank, so without it no clock is measured, the step check compares only
  /// the pipeline's ranks, and a step budget (which every replica must
  /// spend alike) is refused with ConfigError. Clock samples run under the
  /// step protocol's gate and Config::clock_sync (agreed at start-up): at
  /// the first step, at the steps global rank 0 chooses from
  /// LENS_CLOCK_SYNC_STEPS / _SECONDS, and at finish().
  Communicator* job_communicator = nullptr;
  std::string step_span_name = semconv::kStepSpan;
  std::string linked_span_name = semconv::kLinkedReceiveSpan;
  std::string tracer_name = "nemo.lens";
};

class StepTrace {
 public:
  /// telemetry may be null (disabled); comm may be null only if PP size is 1.
  StepTrace(Telemetry* telemetry, Communicator* comm, StepTraceOptions options = {});
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  /// True when steps run the step protocol (same value on every rank).
  bool gated() const { return gated_; }
  /// True when step contexts are derived, not broadcast.
  bool derives() const { return gated_ && mode_ == StepContextMode::kDerived; }
  bool first_stage() const { return pipeline_rank_ == 0; }
  int pipeline_rank() const { return pipeline_rank_; }
  const Tracer& tracer() const { return tracer_; }
  Telemetry* telemetry() const { return telemetry_; }

  /// The linked span for a warmup or pre-1F1B recv_forward on a non-first
  /// stage: child of the current (step) span, linked to the source rank's
  /// step span (this StepTrace's current carrier, the one its last
  /// StepScope also put into the process's carrier slot). Empty on the first
  /// stage, when the `communication` group is off, or when the gate is
  /// closed.
  Span recv_forward_linked(std::int64_t microbatch_id) const;

  /// What opening a step gives StepScope: the carrier every rank decoded
  /// (nullopt when not gated or the frame did not decode) and the step span,
  /// open in the step's shared trace (empty when telemetry is disabled).
  struct OpenedStep {
    std::optional<StepCarrier> carrier;
    Span span;
  };
  /// Runs the step protocol for `step` (the collective, when gated) and
  /// starts the step span; StepScope calls it. Throws CommError as StepScope
  /// documents.
  OpenedStep open_step(std::uint64_t step);

  /// After the last step, on every rank: waits for a prefetched broadcast
  /// and takes the closing clock sample (a collective when clocks are
  /// measured). Throws CommError as StepScope does. Idempotent; the
  /// destructor never runs a collective.
  void finish();

  /// The rank's job span (started with job_span_start, step_context.h):
  /// every later step span links to it, so a viewer can go from a step to
  /// its job. Nothing when it is not recording or not sampled.
  void set_job_span(const Span& job);

  /// True when this StepTrace measures clocks (the same on every rank).
  bool measures_clocks() const { return clock_ != nullptr; }

 private:
  std::optional<StepCarrier> exchange(std::uint64_t step, Span& early);
  Span start_step_span(std::uint64_t step, const std::optional<StepCarrier>& carrier);
  void set_up_checks(Communicator* job_comm);
  void learn_pipeline_source();
  void check_if_due(std::uint64_t step, const std::optional<StepCarrier>& derived);
  void sync_clocks_if_due(std::uint64_t step);
  void record_failure(const CommError& e);
  bool source() const { return comm_ != nullptr && comm_->rank() == options_.src_rank; }
  Telemetry* telemetry_;
  Communicator* comm_;
  StepTraceOptions options_;
  Tracer tracer_;
  bool gated_ = false;
  int pipeline_rank_ = 0;
  int global_rank_ = 0;
  std::chrono::milliseconds timeout_;
  TraceScope scope_ = TraceScope::kWorld;
  StepBudget budget_;
  StepContextMode mode_ = StepContextMode::kBroadcast;
  Communicator* check_comm_ = nullptr;  ///< the step check's, when steps are checked
  StepCheckSchedule checks_;
  bool prefetch_ = false;
  PendingTraceContext pending_{nullptr};  ///< the next step's, when prefetching
  std::optional<StepCarrier> carrier_;    ///< this step's, for recv_forward_linked
  std::optional<SpanContext> job_;        ///< the rank's job span, linked from each step span
  std::unique_ptr<ClockSchedule> clock_;
  /// Derived mode in `pipeline` scope: the global rank of the pipeline's
  /// source, learned at construction (derive_step_context).
  std::optional<int> pipeline_source_;
  bool finished_ = false;
};

/// One step: runs the protocol in its constructor and keeps the step span
/// open and current on this thread until destroyed. The carrier slot keeps
/// the step's carrier until the next step replaces it. When the broadcast
/// fails, the constructor adds a lens.failure event to the open spans, writes
/// them and the last ended span to stderr ("lens: rank R was in: ...") and
/// throws CommError.
///
/// A step the process was stopped in: when an exception ends the step (or
/// its broadcast) while the process is stopping on a signal
/// (Telemetry::stop_signal; a peer that stopped first fails this rank's
/// transfers), the step span ends marked as a shutdown marks what it ends
/// (nemo.span.truncated, lens.stopped_by), so a reader does not hold the
/// step to every rank.
class StepScope {
 public:
  StepScope(StepTrace& trace, std::uint64_t step);
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

  Span& span() { return opened_.span; }
  /// What an exception escaping the step does to it, said before the scope
  /// ends, for a binding whose exceptions are not C++ ones (Python's
  /// `with`): the step span marked when the process stops on a signal. The
  /// destructor does it for a C++ exception.
  void exception_escaped();
  /// The carrier every rank decoded this step (nullopt when not gated or the
  /// frame did not decode).
  const std::optional<StepCarrier>& carrier() const { return opened_.carrier; }

 private:
  StepTrace::OpenedStep opened_;
  std::optional<CurrentSpanScope> scope_;
  Telemetry* telemetry_ = nullptr;
  int exceptions_ = 0;  ///< std::uncaught_exceptions() when opened
};

}  // namespace lens
