/// \file
/// SpanExporter: where finished spans go (a file, an OTLP endpoint, memory).
///
/// The batch processor calls export_spans from its own thread, one batch at a
/// time, never from the training thread. The records are valid only during
/// the call. An exporter reports failure by return value and never throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "lens/resource.h"
#include "lens/span_record.h"

namespace lens {

/// What became of one batch: delivered (or written, for a local exporter),
/// kept in the exporter's spool for a later upload, or lost.
enum class ExportResult { kSuccess, kFailure, kSpooled };

/// What an exporter that delivers over a network reports: requests, retries
/// and where its spans went. Exporters that write locally report none.
struct DeliveryStats {
  std::uint64_t requests = 0;  ///< requests made, retries included
  std::uint64_t retries = 0;
  std::uint64_t spans_delivered = 0;  ///< acknowledged by the receiver (rejected included)
  std::uint64_t spans_rejected = 0;   ///< named in partial-success responses
  std::uint64_t spans_failed = 0;     ///< never acknowledged
  std::uint64_t spans_spooled = 0;    ///< of the failed, written to the spool
  std::string spool_path;             ///< where they were written (empty: no spool)
  /// Times the backend was found not answering (a request timed out, or a
  /// batch failed every attempt), after which batches went to the spool
  /// until a probe was answered.
  std::uint64_t backend_unhealthy = 0;
  std::string last_error;  ///< the last failure, in words
};

class SpanExporter {
 public:
  virtual ~SpanExporter() = default;

  /// Exports one batch. Called from one thread at a time.
  virtual ExportResult export_spans(const Resource& resource,
                                    std::span<const SpanRecord* const> spans) = 0;

  /// Pushes out anything buffered. Returns false if that did not finish in time.
  virtual bool force_flush(std::chrono::milliseconds /*timeout*/) { return true; }

  /// Releases resources; no export_spans call follows.
  virtual void shutdown(std::chrono::milliseconds /*timeout*/) {}

  /// Says a shutdown has begun: what is queued is exported now, within the
  /// shutdown's deadline. An exporter that knows its backend is unhealthy
  /// may stop waiting for it (and spool). Safe to call concurrently with
  /// export_spans.
  virtual void draining() {}

  /// Asks an export in progress on another thread to stop waiting (a
  /// request, retries, backoff) and return soon, and the ones after it not
  /// to wait at all (an exporter with a spool writes them there). Called
  /// when a shutdown runs out of time; must be safe to call concurrently
  /// with export_spans.
  virtual void interrupt() {}

  /// Delivery counters, for exporters that deliver over a network; may be
  /// called from any thread.
  virtual std::optional<DeliveryStats> delivery_stats() const { return std::nullopt; }
};

}  // namespace lens
