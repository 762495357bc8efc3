/// \file
/// SpanExporter: where finished spans go (a file, an OTLP endpoint, memory).
///
/// The batch processor calls export_spans from its own thread, one batch at a
/// time, never from the training thread. The records are valid only during
/// the call. An exporter reports failure by return value and never throws.
#pragma once

#include <chrono>
#include <span>

#include "lens/resource.h"
#include "lens/span_record.h"

namespace lens {

enum class ExportResult { kSuccess, kFailure };

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

  /// Asks an export in progress on another thread to stop waiting (retries,
  /// backoff) and return soon. Called when a shutdown runs out of time; must
  /// be safe to call concurrently with export_spans.
  virtual void interrupt() {}
};

}  // namespace lens
