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

/// Tail selection's hold (docs/tail-selection.md): the last steps' spans
/// kept in memory until the ranks have chosen which steps to export.
struct StepHoldOptions {
  std::uint32_t max_steps = 0;           ///< steps held at once; 0: no hold
  std::uint64_t max_bytes = 256u << 20;  ///< their spans' memory, estimated
};

struct BatchProcessorOptions {
  std::uint32_t max_queue_size = 2048;
  std::uint32_t max_export_batch_size = 512;
  std::chrono::milliseconds schedule_delay{5000};
  std::chrono::milliseconds export_timeout{30000};
  StepHoldOptions hold;
};

/// What the hold did: steps and their spans, held until chosen, then kept
/// (exported) or not selected (dropped by choice); steps and spans that
/// found no room (refused: more steps than max_steps waiting; over
/// max_bytes: the step's later spans) are counted and never wait.
struct StepHoldStats {
  std::uint64_t steps_held = 0;
  std::uint64_t steps_kept = 0;
  std::uint64_t steps_not_selected = 0;
  std::uint64_t steps_refused = 0;     ///< no room: nothing of them exported
  std::uint64_t steps_over_bytes = 0;  ///< ran out of bytes: part of them lost
  std::uint64_t steps_undecided = 0;   ///< still waiting at shutdown: exported then
  std::uint64_t spans_kept = 0;
  std::uint64_t spans_not_selected = 0;
  std::uint64_t spans_no_room = 0;
  std::uint64_t bytes_peak = 0;  ///< the most the hold ever held
};

/// Every span ended is counted once: ended = queued + dropped_queue_full +
/// dropped_in_forked_child, and once the processor is shut down (and its
/// exporter returned) queued = exported + spooled + export_failed +
/// dropped_at_shutdown + not_selected + dropped_hold_full.
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
  /// Tail selection: of a held step the ranks did not choose (a choice,
  /// not a loss), and held spans that found no room (a loss).
  std::uint64_t not_selected = 0;
  std::uint64_t dropped_hold_full = 0;

  std::uint64_t ended() const { return queued + dropped_queue_full + dropped_in_forked_child; }
};

}  // namespace lens
