/// \file
/// OtlpHttpExporter: sends spans to an OTLP/HTTP endpoint (Jaeger's :4318,
/// the OpenTelemetry Collector, Tempo, vendors) with libcurl.
///
/// Encoding: http/protobuf (default, as the OTLP specification says) or
/// http/json; optional gzip. Delivery, following the OTLP/HTTP specification:
/// connection errors and HTTP 429, 502, 503, 504 are retried with exponential
/// backoff and jitter (a Retry-After in seconds is honoured); any other
/// status fails the batch at once; a partial-success response's rejected
/// count is read and reported, and its error message logged (rate-limited).
/// Requests carry "User-Agent: lens/<version>"; logs show the endpoint with
/// its credentials redacted (redacted_url). One export, all its attempts
/// and waits included, ends within the batch processor's export timeout
/// (OTEL_BSP_EXPORT_TIMEOUT). A batch too large for the protobuf encoding
/// (256 MiB) fails with an error saying so, and is spooled as JSON. All of it runs on the batch
/// processor's thread, never the training thread, and within the retry deadline. A batch that
/// cannot be delivered is counted as failed and, when a spool directory is set (LENS_SPOOL_DIR),
/// written there as an OTLP JSON line for `lens upload` to send later. Header values (tokens) are
/// never logged.
///
/// Thread safety: export_spans is called by one thread at a time (the
/// processor's); stats() and shutdown() may be called from any thread;
/// shutdown cuts a pending backoff short.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lens/exporter.h"
#include "lens/otlp_http_options.h"

namespace lens {

/// The OTLP/HTTP exporter reports its counters as DeliveryStats
/// (exporter.h).
using OtlpHttpStats = DeliveryStats;

/// The outcome of sending one request body.
struct OtlpSendResult {
  bool delivered = false;
  long http_status = 0;
  std::int64_t rejected = 0;
  std::string rejected_message;  ///< the receiver's partial-success error_message
  int attempts = 0;
  std::string error;  ///< empty when delivered
};

/// Sends one encoded ExportTraceServiceRequest with the retry rules above.
/// `stop` (may be null) cuts waiting short when it becomes true.
OtlpSendResult send_otlp_request(const OtlpHttpOptions& options, const std::string& body,
                                 const std::atomic<bool>* stop = nullptr);

class OtlpHttpExporter : public SpanExporter {
 public:
  explicit OtlpHttpExporter(OtlpHttpOptions options);
  ~OtlpHttpExporter() override;

  ExportResult export_spans(const Resource& resource,
                            std::span<const SpanRecord* const> spans) override;
  void shutdown(std::chrono::milliseconds timeout) override;
  void interrupt() override;

  std::optional<DeliveryStats> delivery_stats() const override;
  OtlpHttpStats stats() const;
  const OtlpHttpOptions& options() const { return options_; }

 private:
  void spool(const Resource& resource, std::span<const SpanRecord* const> spans);

  OtlpHttpOptions options_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  OtlpHttpStats stats_;
  std::string body_;  ///< reused buffer
};

}  // namespace lens
