// The pipeline-parallel primitives: the broadcast of the step context, the
// per-process carrier slot, linked spans, and their counters.
#include <atomic>
#include <mutex>

#include "lens/broadcast_trace_context.h"
#include "lens/carrier_slot.h"
#include "lens/linked_span.h"
#include "lens/pipeline_stats.h"
#include "rate_limited_warning.h"

namespace lens {
namespace {

struct Counters {
  std::atomic<std::uint64_t> broadcasts{0};
  std::atomic<std::uint64_t> frames_malformed{0};
  std::atomic<std::uint64_t> frames_without_context{0};
  std::atomic<std::uint64_t> step_mismatches{0};
  std::atomic<std::uint64_t> linked_spans{0};
  std::atomic<std::uint64_t> linked_spans_without_link{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

detail::RateLimitedWarning& frame_warning() {
  static detail::RateLimitedWarning w;
  return w;
}

std::mutex g_slot_mu;
std::optional<StepCarrier> g_slot;

}  // namespace

PipelineStats pipeline_stats() {
  auto& c = counters();
  return {c.broadcasts.load(),      c.frames_malformed.load(), c.frames_without_context.load(),
          c.step_mismatches.load(), c.linked_spans.load(),     c.linked_spans_without_link.load()};
}

void reset_pipeline_stats() {
  auto& c = counters();
  c.broadcasts = 0;
  c.frames_malformed = 0;
  c.frames_without_context = 0;
  c.step_mismatches = 0;
  c.linked_spans = 0;
  c.linked_spans_without_link = 0;
}

std::optional<StepCarrier> accept_carrier_frame(std::span<const std::uint8_t> frame,
                                                std::optional<std::uint64_t> expected_step) {
  counters().broadcasts.fetch_add(1, std::memory_order_relaxed);
  DecodedCarrier decoded = decode_carrier(frame);
  if (decoded.status == FrameStatus::kNoContext) {
    counters().frames_without_context.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  if (decoded.status != FrameStatus::kOk) {
    counters().frames_malformed.fetch_add(1, std::memory_order_relaxed);
    frame_warning().warn("received a trace-context frame that does not decode (" +
                         std::string(frame_status_name(decoded.status)) +
                         "); this step's spans on this rank are not linked");
    return std::nullopt;
  }
  if (expected_step && decoded.carrier->step != *expected_step) {
    counters().step_mismatches.fetch_add(1, std::memory_order_relaxed);
    frame_warning().warn("trace-context frame is for step " +
                         std::to_string(decoded.carrier->step) + " but this rank is at step " +
                         std::to_string(*expected_step));
  }
  return decoded.carrier;
}

std::optional<StepCarrier> broadcast_trace_context(Communicator& comm, int src_rank,
                                                   const std::optional<StepCarrier>& local,
                                                   std::chrono::milliseconds timeout,
                                                   std::optional<std::uint64_t> expected_step) {
  if (src_rank < 0 || src_rank >= comm.size()) {
    throw CommError("lens: broadcast_trace_context: source rank " + std::to_string(src_rank) +
                    " is outside the group of " + std::to_string(comm.size()));
  }
  CarrierFrame frame = encode_carrier(comm.rank() == src_rank ? local : std::nullopt);
  comm.broadcast(frame, src_rank, timeout);
  return accept_carrier_frame(frame, expected_step);
}

void set_pp_trace_carrier(std::optional<StepCarrier> carrier) {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  g_slot = std::move(carrier);
}

std::optional<StepCarrier> get_pp_trace_carrier() {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  return g_slot;
}

Span create_linked_span(const Tracer& tracer, std::string_view name,
                        const std::optional<SpanContext>& remote, Attributes attributes) {
  if (!tracer.enabled(SpanGroup::kCommunication)) return Span();
  Span span;
  if (!current_span_context().valid() && remote && remote->valid()) {
    // No local parent (e.g. the step group is off): still join the remote's
    // trace, so the stages of a step stay in one trace.
    StartOptions join;
    join.root = true;
    join.trace_id = remote->trace_id;
    join.trace_flags = remote->trace_flags;
    span = tracer.start_span(SpanGroup::kCommunication, name, join);
  } else {
    span = tracer.start_span(SpanGroup::kCommunication, name);
  }
  for (auto& a : attributes) span.set_attribute(a.key, std::move(a.value));
  if (remote && remote->valid()) {
    span.add_link(*remote);
    counters().linked_spans.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters().linked_spans_without_link.fetch_add(1, std::memory_order_relaxed);
  }
  return span;
}

}  // namespace lens
