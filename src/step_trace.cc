#include "lens/step_trace.h"

#include "lens/broadcast_trace_context.h"
#include "lens/carrier_slot.h"
#include "lens/linked_span.h"

namespace lens {

StepTrace::StepTrace(Telemetry* telemetry, Communicator* comm, StepTraceOptions options)
    : telemetry_(telemetry), comm_(comm), options_(std::move(options)) {
  const int pp_size = options_.pipeline_parallel_size >= 0
                          ? options_.pipeline_parallel_size
                          : (comm_ ? comm_->size() : 1);
  if (pp_size > 1 && comm_ == nullptr)
    throw CommError("lens: StepTrace with pipeline-parallel size " + std::to_string(pp_size) +
                    " needs a communicator");
  pipeline_rank_ = options_.pipeline_rank >= 0 ? options_.pipeline_rank : (comm_ ? comm_->rank() : 0);
  global_rank_ = comm_ ? comm_->rank() : 0;
  if (telemetry_) {
    tracer_ = telemetry_->tracer(options_.tracer_name);
    if (telemetry_->config().rank) global_rank_ = *telemetry_->config().rank;
  }
  gated_ = telemetry_ != nullptr && pp_size > 1;
  timeout_ = options_.timeout.count() >= 0
                 ? options_.timeout
                 : (telemetry_ ? telemetry_->config().collective_timeout
                               : std::chrono::milliseconds(300000));
}

Span StepTrace::recv_forward_linked(std::int64_t microbatch_id) const {
  if (!gated_ || first_stage() || !tracer_.enabled(SpanGroup::kCommunication)) return Span();
  return create_linked_span(tracer_, options_.linked_span_name, get_pp_trace_carrier(),
                            {{"dl.pipeline_parallel.rank", std::int64_t{pipeline_rank_}},
                             {"dl.microbatch_id", microbatch_id}});
}

StepScope::StepScope(StepTrace& trace, std::uint64_t step) {
  if (trace.telemetry_ == nullptr) return;
  StartOptions start;
  start.root = true;
  if (trace.gated_) {
    std::optional<StepCarrier> local;
    const bool source = trace.comm_->rank() == trace.options_.src_rank;
    if (source) {
      // The source always reserves a valid context, even if it exports
      // nothing itself, so links on other ranks never silently vanish.
      StepCarrier reserved;
      reserved.context.trace_id = IdGenerator::new_trace_id();
      reserved.context.span_id = IdGenerator::new_span_id();
      reserved.context.trace_flags =
          trace.telemetry_->sampler().should_sample_root(reserved.context.trace_id)
              ? TraceFlags::kSampled
              : 0;
      reserved.step = step;
      local = reserved;
    }
    try {
      carrier_ = broadcast_trace_context(*trace.comm_, trace.options_.src_rank, local,
                                         trace.timeout_, step);
    } catch (const CommError& e) {
      // The job is broken: leave a record on what is open (e.g. the job span).
      trace.telemetry_->mark_open_spans("lens.failure", e.what());
      throw;
    }
    set_pp_trace_carrier(carrier_);
    if (carrier_) {
      start.trace_id = carrier_->context.trace_id;
      start.trace_flags = carrier_->context.trace_flags;
      start.tracestate = carrier_->context.tracestate;
      if (source) start.span_id = carrier_->context.span_id;
    }
  }
  span_ = trace.tracer_.start_span(SpanGroup::kStep, trace.options_.step_span_name, start);
  span_.set_attribute("dl.step", static_cast<std::int64_t>(step));
  span_.set_attribute("dl.rank", static_cast<std::int64_t>(trace.global_rank_));
  span_.set_attribute("dl.pipeline_parallel.rank", static_cast<std::int64_t>(trace.pipeline_rank_));
  scope_.emplace(span_);
}

StepScope::~StepScope() {
  scope_.reset();
  span_.end();
}

}  // namespace lens
