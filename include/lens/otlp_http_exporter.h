/// \file
/// OtlpHttpExporter: sends spans to an OTLP/HTTP endpoint (Jaeger's :4318,
/// the OpenTelemetry Collector, Tempo, vendors) with libcurl.
///
/// Encoding: http/protobuf (default, as the OTLP specification says) or
/// http/json; optional gzip. Delivery, following the OTLP/HTTP specification:
/// connection errors and HTTP 429, 502, 503, 504 are retried with exponential
/// backoff and jitter (a Retry-After in seconds is honoured); any other
/// status fails the batch at once; a partial-success response's rejected
/// count is read and reported. All of it runs on the batch processor's
/// thread, never the training thread, and within the retry deadline. A batch
/// that cannot be delivered is counted as failed and, when a spool directory
/// is set (LENS_SPOOL_DIR), written there as an OTLP JSON line for
/// `lens upload` to send later. Header values (tokens) are never logged.
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
#include <string>
#include <utility>
#include <vector>

#include "lens/exporter.h"

namespace lens {

struct OtlpHttpOptions {
  std::string endpoint;  ///< full URL, e.g. http://localhost:4318/v1/traces
  bool json = false;     ///< http/json instead of http/protobuf
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds timeout{10000};  ///< per request
  bool gzip = false;
  std::string certificate;  ///< CA bundle for https endpoints; verification is always on
  int max_attempts = 6;
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{8000};
  std::chrono::milliseconds retry_deadline{30000};  ///< for one batch, all attempts
  std::string spool_path;  ///< where undeliverable batches go; empty: nowhere
};

struct OtlpHttpStats {
  std::uint64_t requests = 0;          ///< HTTP requests made, retries included
  std::uint64_t retries = 0;
  std::uint64_t spans_delivered = 0;   ///< acknowledged by the receiver (rejected included)
  std::uint64_t spans_rejected = 0;    ///< named in partial-success responses
  std::uint64_t spans_failed = 0;      ///< never acknowledged
  std::uint64_t spans_spooled = 0;     ///< of the failed, written to the spool
  std::string last_error;              ///< the last failure, in words
};

/// The outcome of sending one request body.
struct OtlpSendResult {
  bool delivered = false;
  long http_status = 0;
  std::int64_t rejected = 0;
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
