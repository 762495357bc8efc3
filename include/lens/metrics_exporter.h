/// \file
/// OtlpMetricsExporter: a registry's metrics to an OTLP/HTTP endpoint
/// (`/v1/metrics` of a Collector, or of any OTLP metrics backend), every
/// interval and once more at the end (docs/metrics.md).
///
/// Each export is one ExportMetricsServiceRequest of every family,
/// cumulative from `start_unix_ns` (MetricRegistry::otlp_proto, or
/// otlp_json with OtlpHttpOptions::json), sent with the trace exporter's
/// transport and retry rules (send_otlp_request: gzip, headers, TLS,
/// retries within OtlpHttpOptions::retry_deadline) on a thread of its own,
/// never the training thread; the last, at shutdown, is one attempt. A request that cannot be
/// delivered is counted and dropped: the next carries the same totals, and more (no spool). The
/// resource is the traces' (service.name, nemo.run.id, dl.rank, ...), so a backend joins metrics
/// and traces by it.
///
/// Thread safety: every method from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "lens/metrics.h"
#include "lens/otlp_http_exporter.h"
#include "lens/otlp_http_options.h"
#include "lens/resource.h"

namespace lens {

struct MetricsExportStats {
  std::uint64_t requests = 0;  ///< delivered
  std::uint64_t failed = 0;    ///< not delivered, after their retries
  std::string last_error;      ///< the last failure's, or empty
};

class OtlpMetricsExporter {
 public:
  /// Exports `registry` (which must outlive this) every `interval` (at
  /// least 1 ms; std::invalid_argument otherwise) from now on, cumulative
  /// from `start_unix_ns`.
  OtlpMetricsExporter(const MetricRegistry& registry, Resource resource, OtlpHttpOptions options,
                      std::chrono::milliseconds interval, std::int64_t start_unix_ns);
  /// shutdown().
  ~OtlpMetricsExporter();
  OtlpMetricsExporter(const OtlpMetricsExporter&) = delete;
  OtlpMetricsExporter& operator=(const OtlpMetricsExporter&) = delete;

  /// One export now, on the calling thread; true when delivered.
  bool export_now();
  /// Stops the interval's thread (a request in progress is abandoned) and
  /// makes one last export, one attempt within the options' request
  /// timeout. Idempotent.
  void shutdown();

  MetricsExportStats stats() const;

 private:
  void run();
  bool send(const OtlpSendPolicy& policy);

  const MetricRegistry& registry_;
  const Resource resource_;
  const OtlpHttpOptions options_;
  const std::chrono::milliseconds interval_;
  const std::int64_t start_unix_ns_;
  std::mutex send_mu_;  // one request at a time
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<bool> abandon_{false};  // set while shutdown stops the thread
  MetricsExportStats stats_;
  std::thread thread_;
  std::once_flag shut_;
};

}  // namespace lens
