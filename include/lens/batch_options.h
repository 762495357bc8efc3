/// \file
/// The batch processor's settings (OTEL_BSP_*) and counters, as a user sets
/// and reads them through TelemetryOptions and Telemetry::stats. The
/// processor itself is internal to the core.
///
/// Thread safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>

namespace lens {

struct BatchProcessorOptions {
  std::uint32_t max_queue_size = 2048;
  std::uint32_t max_export_batch_size = 512;
  std::chrono::milliseconds schedule_delay{5000};
  std::chrono::milliseconds export_timeout{30000};
};

/// Every span ended is counted once: ended = queued + dropped_queue_full +
/// dropped_in_forked_child, and once the processor is shut down (and its
/// exporter returned) queued = exported + spooled + export_failed +
/// dropped_at_shutdown.
struct ProcessorStats {
  std::uint64_t queued = 0;              ///< accepted into the queue
  std::uint64_t exported = 0;            ///< handed to the exporter, which delivered them
  std::uint64_t spooled = 0;             ///< handed to the exporter, which kept them in its spool
  std::uint64_t export_failed = 0;       ///< handed to the exporter, which failed (an export error)
  std::uint64_t dropped_queue_full = 0;  ///< not accepted: the queue was full
  /// Not delivered by the shutdown's deadline and not spooled: still queued
  /// when shutdown gave up, or in an export abandoned at the deadline.
  std::uint64_t dropped_at_shutdown = 0;
  /// Ended in a fork's child, which has no export thread (or queued in the
  /// parent when it forked: the parent exports those).
  std::uint64_t dropped_in_forked_child = 0;
  std::uint64_t queue_high_water = 0;  ///< most spans ever waiting in the queue at once

  std::uint64_t ended() const { return queued + dropped_queue_full + dropped_in_forked_child; }
};

}  // namespace lens
