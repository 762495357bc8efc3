#include "lens/step_trace.h"

#include <algorithm>
#include <array>
#include <chrono>

#include "lens/broadcast_trace_context.h"
#include "lens/carrier_slot.h"
#include "lens/linked_span.h"

namespace lens {

namespace {

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

SpanContext anchor_step_context(std::uint64_t run_key, std::string_view run_id,
                                std::uint64_t step) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the run id
  for (unsigned char c : run_id) h = (h ^ c) * 0x100000001b3ULL;
  std::uint64_t state = run_key ^ h ^ (step * 0xd1b54a32d192ed03ULL);
  SpanContext c;
  do {
    std::array<std::uint8_t, TraceId::kSize> t{};
    const std::uint64_t hi = splitmix(state), lo = splitmix(state);
    for (int i = 0; i < 8; ++i) {
      t[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(hi >> (56 - 8 * i));
      t[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(lo >> (56 - 8 * i));
    }
    c.trace_id = TraceId(t);
    c.span_id = SpanId::from_word(splitmix(state));
  } while (!c.valid());
  return c;
}

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

StepTrace::StepTrace(Telemetry* telemetry, Communicator* comm, StepTraceOptions options)
    : telemetry_(telemetry), comm_(comm), options_(std::move(options)) {
  const int pp_size = options_.pipeline_parallel_size >= 0 ? options_.pipeline_parallel_size
                                                           : (comm_ ? comm_->size() : 1);
  if (pp_size > 1 && comm_ == nullptr)
    throw CommError("lens: StepTrace with pipeline-parallel size " + std::to_string(pp_size) +
                    " needs a communicator");
  pipeline_rank_ =
      options_.pipeline_rank >= 0 ? options_.pipeline_rank : (comm_ ? comm_->rank() : 0);
  global_rank_ = comm_ ? comm_->rank() : 0;
  if (telemetry_) {
    tracer_ = telemetry_->tracer(options_.tracer_name);
    if (telemetry_->config().rank) global_rank_ = *telemetry_->config().rank;
  }
  gated_ = telemetry_ != nullptr && pp_size > 1;
  if (telemetry_) {
    scope_ = options_.trace_scope >= 0 ? static_cast<TraceScope>(options_.trace_scope & 1)
                                       : telemetry_->config().trace_scope;
    budget_ = StepBudget(telemetry_->config().step_budget_per_minute);
  }
  timeout_ = options_.timeout.count() >= 0 ? options_.timeout
                                           : (telemetry_ ? telemetry_->config().collective_timeout
                                                         : std::chrono::milliseconds(300000));
}

Span StepTrace::recv_forward_linked(std::int64_t microbatch_id) const {
  if (!gated_ || first_stage() || !tracer_.enabled(SpanGroup::kCommunication)) return Span();
  return create_linked_span(tracer_, options_.linked_span_name, carrier_,
                            {{"dl.pipeline_parallel.rank", std::int64_t{pipeline_rank_}},
                             {"dl.microbatch_id", microbatch_id}});
}

StepCarrier reserve_step_context(const Telemetry& telemetry, TraceScope scope, int global_rank,
                                 std::uint64_t step, StepBudget& budget) {
  // The source always reserves a valid context, even if it exports nothing
  // itself, so links on other ranks never silently vanish.
  StepCarrier reserved;
  reserved.step = step;
  reserved.context.trace_id = IdGenerator::new_trace_id();
  reserved.context.span_id = IdGenerator::new_span_id();
  TraceId decide_on = reserved.context.trace_id;
  if (scope == TraceScope::kPipeline) {
    const SpanContext anchor =
        anchor_step_context(telemetry.config().run_key, telemetry.config().run_id, step);
    decide_on = anchor.trace_id;
    if (global_rank == 0) reserved.context = anchor;
  }
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  const bool sampled = telemetry.sampler().should_sample_root(decide_on) && budget.take(now);
  reserved.context.trace_flags = sampled ? TraceFlags::kSampled : 0;
  return reserved;
}

std::optional<SpanLink> global_rank_zero_link(const Telemetry& telemetry,
                                              const StepCarrier& carrier) {
  SpanContext anchor =
      anchor_step_context(telemetry.config().run_key, telemetry.config().run_id, carrier.step);
  if (anchor.trace_id == carrier.context.trace_id) return std::nullopt;
  anchor.trace_flags = carrier.context.trace_flags;
  anchor.remote = true;
  return SpanLink{anchor, {{"lens.link", std::string("global_rank_0_step")}}};
}

std::optional<StepCarrier> StepTrace::exchange(std::uint64_t step) {
  const bool source = comm_->rank() == options_.src_rank;
  std::optional<StepCarrier> carrier;
  try {
    if (pending_) {
      // Posted by the previous step: usually finished by now.
      auto pending = std::move(pending_);
      pending->wait(timeout_);
      carrier = accept_carrier_frame(pending->data(), step);
    } else {
      std::optional<StepCarrier> local;
      if (source) local = reserve_step_context(*telemetry_, scope_, global_rank_, step, budget_);
      carrier = broadcast_trace_context(*comm_, options_.src_rank, local, timeout_, step);
    }
    if (options_.prefetch_next_step) {
      // (The first step went through broadcast_trace_context, which checked
      // the source rank.)
      std::optional<StepCarrier> next_local;
      if (source)
        next_local = reserve_step_context(*telemetry_, scope_, global_rank_, step + 1, budget_);
      const CarrierFrame next = encode_carrier(next_local);
      pending_ = comm_->start_broadcast(next, options_.src_rank, timeout_);
    }
  } catch (const CommError& e) {
    // The job is broken: leave a record on what is open (e.g. the job span)
    // and in the log, so the rank that diverged can be found.
    write_failure_record(*telemetry_, "lens: rank " + std::to_string(global_rank_), e.what());
    throw;
  }
  return carrier;
}

StepTrace::~StepTrace() {
  if (!pending_) return;
  // Every rank posted this broadcast, so it finishes unless the job is
  // already broken; then give up after a short wait (the pending broadcast
  // owns its buffer, so abandoning it is safe).
  try {
    pending_->wait(std::min(timeout_, std::chrono::milliseconds(5000)));
  } catch (const CommError&) {
  }
}

StepScope::StepScope(StepTrace& trace, std::uint64_t step) {
  if (trace.telemetry_ == nullptr) return;
  StartOptions start;
  start.root = true;
  if (trace.gated_) {
    const bool source = trace.comm_->rank() == trace.options_.src_rank;
    carrier_ = trace.exchange(step);
    trace.carrier_ = carrier_;
    set_pp_trace_carrier(carrier_);
    if (carrier_) {
      start.trace_id = carrier_->context.trace_id;
      start.trace_flags = carrier_->context.trace_flags;
      start.tracestate = carrier_->context.tracestate;
      if (source) start.span_id = carrier_->context.span_id;
    }
  }
  if (trace.gated_ && carrier_ && trace.scope_ == TraceScope::kPipeline)
    if (auto link = global_rank_zero_link(*trace.telemetry_, *carrier_))
      start.links.push_back(*link);
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
