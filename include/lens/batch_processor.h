/// \file
/// BatchProcessor: moves finished spans off the training thread.
///
/// Ending a span puts its record into a bounded queue (a mutex-protected ring;
/// the caller never waits on export). A background thread takes batches out
/// and hands them to the exporter when a batch is full, when the schedule
/// delay has passed, on force_flush, and at shutdown. When the queue is full
/// the span is dropped and counted. Options default to OpenTelemetry's
/// (OTEL_BSP_*): queue 2048, batch 512, delay 5000 ms, export timeout 30000 ms.
///
/// Thread safety: enqueue, force_flush, stats and shutdown may be called from
/// any thread. If shutdown's timeout expires while the exporter is still busy,
/// the exporter is interrupted (SpanExporter::interrupt) and given one more
/// second; if it is still busy then, the export thread is left to finish on
/// its own (it keeps the exporter, and whatever `keep_alive` holds, alive) and
/// the spans it had not taken are counted as dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "lens/exporter.h"
#include "lens/resource.h"

namespace lens {

namespace detail {
struct LiveSpan;
}

struct BatchProcessorOptions {
  std::uint32_t max_queue_size = 2048;
  std::uint32_t max_export_batch_size = 512;
  std::chrono::milliseconds schedule_delay{5000};
  std::chrono::milliseconds export_timeout{30000};
};

struct ProcessorStats {
  std::uint64_t queued = 0;              ///< accepted into the queue
  std::uint64_t exported = 0;            ///< handed to the exporter, which succeeded
  std::uint64_t export_failed = 0;       ///< handed to the exporter, which failed
  std::uint64_t dropped_queue_full = 0;  ///< not accepted: the queue was full
  std::uint64_t dropped_at_shutdown = 0; ///< still queued when shutdown gave up
  std::uint64_t queue_high_water = 0;    ///< most spans ever waiting in the queue at once
};

class BatchProcessor {
 public:
  /// keep_alive: what the queued records point into (e.g. their
  /// instrumentation scopes), kept until the export thread ends.
  BatchProcessor(std::shared_ptr<SpanExporter> exporter, Resource resource,
                 BatchProcessorOptions options, std::shared_ptr<const void> keep_alive = {});
  ~BatchProcessor();
  BatchProcessor(const BatchProcessor&) = delete;
  BatchProcessor& operator=(const BatchProcessor&) = delete;

  /// Takes ownership of a finished record. Never blocks on export. Returns
  /// false (and releases the record) if the queue is full or shut down.
  bool enqueue(detail::LiveSpan* span) noexcept;

  /// Waits until every span queued before the call has been exported (or
  /// failed). Returns false on timeout.
  bool force_flush(std::chrono::milliseconds timeout);

  /// Exports what is queued within the timeout, then shuts the exporter down.
  /// Idempotent. Returns false if the timeout expired first.
  bool shutdown(std::chrono::milliseconds timeout);

  ProcessorStats stats() const;
  const BatchProcessorOptions& options() const { return options_; }

 private:
  struct State;
  BatchProcessorOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace lens
