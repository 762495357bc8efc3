// broadcast_trace_context and its two halves for a prefetched step
// (broadcast_trace_context.h): the one path by which a step's context goes
// from its source rank to the others.
#include "lens/broadcast_trace_context.h"

#include "pipeline_counters.h"
#include "rate_limited_warning.h"

namespace lens {
namespace {

detail::RateLimitedWarning& frame_warning() {
  static detail::RateLimitedWarning w;
  return w;
}

// The frame a rank sends: the source's encoded context, "no context" from
// the others. Checks the source rank first, on every rank alike.
CarrierFrame outgoing_frame(const Communicator& comm, int src_rank,
                            const std::optional<StepCarrier>& local) {
  if (src_rank < 0 || src_rank >= comm.size()) {
    throw CommError("lens: broadcast_trace_context: source rank " + std::to_string(src_rank) +
                    " is outside the group of " + std::to_string(comm.size()));
  }
  return encode_carrier(comm.rank() == src_rank ? local : std::nullopt);
}

}  // namespace

std::optional<StepCarrier> accept_carrier_frame(std::span<const std::uint8_t> frame,
                                                std::optional<std::uint64_t> expected_step) {
  auto& counters = detail::pipeline_counters();
  detail::count(counters.broadcasts);
  DecodedCarrier decoded = decode_carrier(frame);
  if (decoded.status == FrameStatus::kNoContext) {
    detail::count(counters.frames_without_context);
    return std::nullopt;
  }
  if (decoded.status != FrameStatus::kOk) {
    detail::count(counters.frames_malformed);
    frame_warning().warn("received a trace-context frame that does not decode (" +
                         std::string(frame_status_name(decoded.status)) +
                         "); this step's spans on this rank are not linked");
    return std::nullopt;
  }
  if (expected_step && decoded.carrier->step != *expected_step) {
    detail::count(counters.step_mismatches);
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
  CarrierFrame frame = outgoing_frame(comm, src_rank, local);
  comm.broadcast(frame, src_rank, timeout);
  return accept_carrier_frame(frame, expected_step);
}

PendingTraceContext start_broadcast_trace_context(Communicator& comm, int src_rank,
                                                  const std::optional<StepCarrier>& local,
                                                  std::chrono::milliseconds timeout) {
  const CarrierFrame frame = outgoing_frame(comm, src_rank, local);
  return PendingTraceContext(comm.start_broadcast(frame, src_rank, timeout));
}

std::optional<StepCarrier> PendingTraceContext::wait(std::chrono::milliseconds timeout,
                                                     std::optional<std::uint64_t> expected_step) {
  if (!pending_) throw CommError("lens: a trace-context broadcast was waited for twice");
  auto pending = std::move(pending_);
  pending->wait(timeout);
  return accept_carrier_frame(pending->data(), expected_step);
}

void PendingTraceContext::drain(std::chrono::milliseconds timeout) noexcept {
  if (!pending_) return;
  auto pending = std::move(pending_);
  try {
    pending->wait(timeout);
  } catch (...) {
  }
}

}  // namespace lens
