// StepTrace and StepScope: the per-step protocol (step_trace.h).
#include "lens/step_trace.h"

#include <algorithm>
#include <array>
#include <exception>

#include "byte_order.h"
#include "lens/carrier_slot.h"
#include "lens/clock_schedule.h"
#include "lens/error.h"
#include "lens/linked_span.h"
#include "lens/step_check.h"
#include "lens/step_context.h"
#include "lens/semconv.h"
#include "lens/termination.h"

namespace lens {
namespace {

// A step span an exception ends while the process stops on a signal: the
// signal, not the step, ended it (StepScope).
void mark_stopped(Telemetry* telemetry, Span& span) {
  if (telemetry == nullptr || !span.recording()) return;
  const int signo = telemetry->stop_signal();
  if (signo == 0) return;
  span.set_attribute(semconv::kTruncated, true);
  span.set_attribute(semconv::kStoppedBy, signal_name(signo));
}

}  // namespace

StepTrace::StepTrace(Telemetry* telemetry, Communicator* comm, StepTraceOptions options)
    : telemetry_(telemetry), comm_(comm), options_(std::move(options)) {
  if (!options_.pipeline_parallel_size || *options_.pipeline_parallel_size < 1)
    throw ConfigError(
        "StepTraceOptions::pipeline_parallel_size is " +
        (options_.pipeline_parallel_size ? std::to_string(*options_.pipeline_parallel_size)
                                         : std::string("unset")) +
        "; accepted: the job's pipeline-parallel size, 1 or more (1 never broadcasts)");
  if (options_.timeout && options_.timeout->count() < 1)
    throw ConfigError("StepTraceOptions::timeout of " + std::to_string(options_.timeout->count()) +
                      " ms is not valid; accepted: at least 1 ms");
  const int pp_size = *options_.pipeline_parallel_size;
  if (pp_size > 1 && comm_ == nullptr)
    throw CommError("lens: StepTrace with pipeline-parallel size " + std::to_string(pp_size) +
                    " needs a communicator");
  pipeline_rank_ = options_.pipeline_rank.value_or(comm_ ? comm_->rank() : 0);
  global_rank_ = comm_ ? comm_->rank() : 0;
  if (telemetry_) {
    tracer_ = telemetry_->tracer(options_.tracer_name);
    if (telemetry_->config().rank) global_rank_ = *telemetry_->config().rank;
    scope_ = options_.trace_scope.value_or(telemetry_->config().trace_scope);
    mode_ = telemetry_->config().step_context;
  }
  gated_ = telemetry_ != nullptr && pp_size > 1;
  if (gated_ && scope_ == TraceScope::kPipeline)
    require_pipeline_scope_settings(telemetry_->config());
  prefetch_ = gated_ && scope_ == TraceScope::kWorld && mode_ == StepContextMode::kBroadcast &&
              telemetry_->config().step_prefetch;
  timeout_ = options_.timeout.value_or(telemetry_ ? telemetry_->config().collective_timeout
                                                  : std::chrono::milliseconds(300000));
  Communicator* job_comm = options_.job_communicator;
  if (job_comm == nullptr && scope_ == TraceScope::kWorld) job_comm = comm_;
  if (gated_ && scope_ == TraceScope::kPipeline && mode_ == StepContextMode::kDerived)
    learn_pipeline_source();
  if (gated_) set_up_checks(job_comm);
  if (gated_ && telemetry_->config().clock_sync && job_comm != nullptr && job_comm->size() > 1)
    clock_ = std::make_unique<ClockSchedule>(*telemetry_, *job_comm, tracer_, timeout_);
}

void StepTrace::learn_pipeline_source() {
  // Once: the source's global rank, over the pipeline group (the ranks of
  // a pipeline derive its trace from it, and only they take part).
  std::array<std::uint8_t, 4> word{};
  if (source()) detail::put_le32(word.data(), static_cast<std::uint32_t>(global_rank_));
  try {
    comm_->broadcast(word, options_.src_rank, timeout_);
  } catch (const CommError& e) {
    record_failure(e);
    throw;
  }
  const std::uint32_t rank = detail::get_le32(word.data());
  if (rank > (1u << 30))
    throw CommError("lens: the pipeline's source sent global rank " + std::to_string(rank) +
                    "; accepted: 0 to 2^30");
  pipeline_source_ = static_cast<int>(rank);
}

void StepTrace::set_up_checks(Communicator* job_comm) {
  const Config& config = telemetry_->config();
  budget_ = StepBudget(config.step_budget_per_minute, step_budget_shared(config, scope_));
  const std::uint32_t every = step_check_interval(config, scope_);
  if (every == 0) return;
  if (budget_.shared() && config.step_budget_per_minute > 0 && job_comm == nullptr)
    throw ConfigError(
        "LENS_STEP_BUDGET in pipeline scope needs StepTraceOptions::"
        "job_communicator (every rank of the job): every replica spends the "
        "budget alike, renewed over it at each step check");
  check_comm_ = job_comm != nullptr ? job_comm : comm_;
  checks_ = StepCheckSchedule(every);
}

void StepTrace::check_if_due(std::uint64_t step, const std::optional<StepCarrier>& derived) {
  if (check_comm_ == nullptr || !checks_.due()) return;
  const bool per_pipeline = derived && scope_ == TraceScope::kPipeline;
  checks_.check(*check_comm_, step, derived, per_pipeline ? pipeline_source_ : std::nullopt,
                budget_, timeout_);
}

void StepTrace::sync_clocks_if_due(std::uint64_t step) {
  if (clock_ && clock_->due(step)) clock_->sync(step);
}

void StepTrace::finish() {
  if (finished_) return;
  finished_ = true;
  try {
    if (pending_.posted()) pending_.drain(timeout_);
    if (clock_) clock_->sync(std::nullopt);
  } catch (const CommError& e) {
    record_failure(e);
    throw;
  }
}

void StepTrace::record_failure(const CommError& e) {
  // The job is broken: leave a record on what is open (e.g. the job span)
  // and in the log, so the rank that diverged can be found.
  write_failure_record(*telemetry_, "lens: rank " + std::to_string(global_rank_), e.what());
}

Span StepTrace::recv_forward_linked(std::int64_t microbatch_id) const {
  if (!gated_ || first_stage() || !tracer_.enabled(SpanGroup::kCommunication)) return Span();
  return create_linked_span(tracer_, options_.linked_span_name, carrier_,
                            {{semconv::kPipelineRank, std::int64_t{pipeline_rank_}},
                             {semconv::kMicrobatchId, microbatch_id}});
}

std::optional<StepCarrier> StepTrace::exchange(std::uint64_t step, Span& early) {
  std::optional<StepCarrier> carrier;
  try {
    if (mode_ == StepContextMode::kDerived) {
      sync_clocks_if_due(step);
      carrier = derive_step_context(*telemetry_, scope_, step, budget_, pipeline_source_);
      check_if_due(step, carrier);
    } else if (pending_.posted()) {
      // Posted by the previous step: usually finished by now. A clock
      // sample runs between it and the next one.
      carrier = pending_.wait(timeout_, step);
      sync_clocks_if_due(step);
    } else {
      sync_clocks_if_due(step);
      std::optional<StepCarrier> local;
      if (source()) {
        local = reserve_step_context(*telemetry_, scope_, global_rank_, step, budget_);
        // The source's step span opens before its broadcast: it starts
        // before anything of its step can happen on another rank, so it is
        // the step's first root and every link points back in time.
        early = start_step_span(step, local);
      }
      carrier = broadcast_trace_context(*comm_, options_.src_rank, local, timeout_, step);
    }
    if (prefetch_) {
      std::optional<StepCarrier> next;
      if (source())
        next = reserve_step_context(*telemetry_, scope_, global_rank_, step + 1, budget_);
      pending_ = start_broadcast_trace_context(*comm_, options_.src_rank, next, timeout_);
    }
    if (mode_ == StepContextMode::kBroadcast) check_if_due(step, std::nullopt);
    checks_.opened();
  } catch (const CommError& e) {
    record_failure(e);
    throw;
  }
  return carrier;
}

void StepTrace::set_job_span(const Span& job) {
  // Only to a span that is exported: a link to a dropped one would dangle.
  if (job.recording() && job.context().sampled()) {
    job_ = job.context();
  } else {
    job_.reset();
  }
}

Span StepTrace::start_step_span(std::uint64_t step, const std::optional<StepCarrier>& carrier) {
  StartOptions start;
  start.root = true;
  if (job_) start.links.push_back({*job_, {{"lens.link", std::string("job")}}});
  if (carrier) {
    start.context = step_span_context(*carrier, source());
    if (scope_ == TraceScope::kPipeline)
      if (auto link = global_rank_zero_link(*telemetry_, *carrier)) start.links.push_back(*link);
  }
  Span span = tracer_.start_span(SpanGroup::kStep, options_.step_span_name, start);
  span.set_attribute(semconv::kStep, static_cast<std::int64_t>(step));
  span.set_attribute(semconv::kRank, static_cast<std::int64_t>(global_rank_));
  span.set_attribute(semconv::kPipelineRank, static_cast<std::int64_t>(pipeline_rank_));
  return span;
}

StepTrace::OpenedStep StepTrace::open_step(std::uint64_t step) {
  OpenedStep opened;
  if (telemetry_ == nullptr) return opened;
  if (!gated_) {
    opened.span = start_step_span(step, std::nullopt);
    return opened;
  }
  Span early;  // the source's, opened before its broadcast
  try {
    opened.carrier = exchange(step, early);
  } catch (...) {
    mark_stopped(telemetry_, early);
    throw;
  }
  carrier_ = opened.carrier;
  set_pp_trace_carrier(opened.carrier);
  opened.span = early.recording() ? std::move(early) : start_step_span(step, opened.carrier);
  return opened;
}

StepTrace::~StepTrace() {
  // Every rank posted this broadcast, so it finishes unless the job is
  // already broken; then give up after a short wait.
  pending_.drain(std::min(timeout_, std::chrono::milliseconds(5000)));
}

StepScope::StepScope(StepTrace& trace, std::uint64_t step)
    : opened_(trace.open_step(step)),
      telemetry_(trace.telemetry()),
      exceptions_(std::uncaught_exceptions()) {
  if (telemetry_ != nullptr) scope_.emplace(opened_.span);
}

void StepScope::exception_escaped() { mark_stopped(telemetry_, opened_.span); }

StepScope::~StepScope() {
  if (std::uncaught_exceptions() > exceptions_) exception_escaped();
  scope_.reset();
  opened_.span.end();
}

}  // namespace lens
