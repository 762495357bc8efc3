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
/// A backend that stops answering, with a spool: a request that times out
/// is not retried, and a batch that fails for a transient reason (a
/// timeout, a refused or reset connection, 429/5xx after its retries) marks
/// the backend unhealthy. Until it answers again, batches go straight to
/// the spool (nothing waits in memory for it), and every so often (the
/// retry backoff, 0.5 s doubling to 8 s) one batch is sent as a probe, one
/// attempt; the first probe answered makes it healthy again. Once a
/// shutdown has begun (draining) an unhealthy backend is not probed; once
/// it is past its deadline (interrupt) the request in progress is abandoned
/// within ~50 ms and nothing more is sent: every batch then goes to the
/// spool. Without a spool the first failure's warning says how to keep the
/// spans.
///
/// Thread safety: export_spans is called by one thread at a time (the
/// processor's); stats(), draining(), interrupt() and shutdown() may be
/// called from any thread; interrupt cuts a request or backoff short.
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
  std::string error;       ///< empty when delivered
  bool transient = false;  ///< the last failure was one a retry could mend (the backend's state)
  bool timed_out = false;  ///< the last attempt had no answer within the request timeout
  bool stopped = false;    ///< `stop` ended it (an attempt abandoned, or no retry)
};

/// Limits of one send beyond the options'.
struct OtlpSendPolicy {
  int max_attempts = 0;             ///< 0: the options'
  bool give_up_on_timeout = false;  ///< no retry after an attempt that timed out
};

/// Sends one encoded ExportTraceServiceRequest with the retry rules above.
/// `stop` (may be null) abandons the attempt in progress (within ~50 ms) and
/// any retry when it becomes true.
OtlpSendResult send_otlp_request(const OtlpHttpOptions& options, const std::string& body,
                                 const std::atomic<bool>* stop = nullptr,
                                 const OtlpSendPolicy& policy = {});

class OtlpHttpExporter : public SpanExporter {
 public:
  explicit OtlpHttpExporter(OtlpHttpOptions options);
  ~OtlpHttpExporter() override;

  ExportResult export_spans(const Resource& resource,
                            std::span<const SpanRecord* const> spans) override;
  void shutdown(std::chrono::milliseconds timeout) override;
  void draining() override;
  void interrupt() override;

  std::optional<DeliveryStats> delivery_stats() const override;
  OtlpHttpStats stats() const;
  const OtlpHttpOptions& options() const { return options_; }
  /// True while the backend is taken as not answering (spool set only).
  bool backend_unhealthy() const;

 private:
  /// The batch to the spool: kSpooled, or kFailure when there is none or it
  /// cannot be written.
  ExportResult spool(const Resource& resource, std::span<const SpanRecord* const> spans);
  void note_failure(const OtlpSendResult& r);
  void note_answered();

  OtlpHttpOptions options_;
  std::atomic<bool> stopping_{false};  ///< interrupted: send nothing more
  std::atomic<bool> draining_{false};  ///< a shutdown has begun
  std::atomic<bool> probing_{false};   ///< the request in progress is a probe
  mutable std::mutex mu_;
  OtlpHttpStats stats_;
  std::string body_;                    ///< reused buffer
  std::atomic<bool> unhealthy_{false};  ///< the backend is taken as not answering
  // The export thread's own: the next probe.
  std::chrono::steady_clock::time_point next_probe_{};
  std::chrono::milliseconds probe_delay_{0};
  bool warned_without_spool_ = false;
};

}  // namespace lens
