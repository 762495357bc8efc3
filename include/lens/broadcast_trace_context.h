/// \file
/// broadcast_trace_context: one step's trace context, from one rank to all.
///
/// A collective: every rank of `comm` calls it once per step, in the same
/// order relative to the group's other collectives. The source passes its
/// reserved step context; the others pass nullopt (it is ignored). ONE
/// broadcast of the fixed-size carrier frame (carrier.h) carries it.
///
/// Returns the decoded carrier on every rank (the source gets its own back as
/// decoded, so all ranks see the same bytes). A frame that does not decode
/// gives nullopt, counted in pipeline_stats() with a rate-limited warning on
/// stderr; it never throws for bad bytes. A broadcast that fails or times out
/// throws CommError naming the collective and the rank: a broken group cannot
/// be papered over without deadlocking the ranks' later collectives.
///
/// start_broadcast_trace_context is the same collective in two halves, for a
/// step prefetched ahead of time: it checks and encodes as the blocking call
/// does, posts the broadcast and returns; PendingTraceContext::wait finishes
/// it and decodes with the same accounting.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "lens/carrier.h"
#include "lens/communicator.h"

namespace lens {

/// If expected_step is given, a frame for another step is still used but
/// counted (step_mismatches) and warned about: it means ranks disagree on the
/// step they are in.
std::optional<StepCarrier> broadcast_trace_context(
    Communicator& comm, int src_rank, const std::optional<StepCarrier>& local,
    std::chrono::milliseconds timeout = std::chrono::minutes(5),
    std::optional<std::uint64_t> expected_step = std::nullopt);

/// A trace-context broadcast that has been posted and not yet waited for.
/// Thread safety: one thread at a time.
class PendingTraceContext {
 public:
  explicit PendingTraceContext(std::unique_ptr<PendingBroadcast> pending)
      : pending_(std::move(pending)) {}

  /// True until wait() or drain() has been called.
  bool posted() const { return pending_ != nullptr; }
  /// Waits for the broadcast and decodes it as broadcast_trace_context does;
  /// throws CommError on failure or timeout. Call it once.
  std::optional<StepCarrier> wait(std::chrono::milliseconds timeout,
                                  std::optional<std::uint64_t> expected_step = std::nullopt);
  /// Waits for a broadcast whose step never came, without using it; gives up
  /// quietly on failure or timeout (the posted broadcast owns its buffer).
  void drain(std::chrono::milliseconds timeout) noexcept;

 private:
  std::unique_ptr<PendingBroadcast> pending_;
};

/// Posts the broadcast of `local` (on the source) and returns at once.
PendingTraceContext start_broadcast_trace_context(Communicator& comm, int src_rank,
                                                  const std::optional<StepCarrier>& local,
                                                  std::chrono::milliseconds timeout);

/// Decodes a received frame with the same accounting, counting it as one
/// completed broadcast (for engines driven outside lens, e.g. the Python
/// package, which broadcasts the bytes over torch.distributed itself).
std::optional<StepCarrier> accept_carrier_frame(std::span<const std::uint8_t> frame,
                                                std::optional<std::uint64_t> expected_step);

}  // namespace lens
