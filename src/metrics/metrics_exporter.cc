// A registry's metrics to an OTLP/HTTP endpoint (lens/metrics_exporter.h).
#include "lens/metrics_exporter.h"

#include <stdexcept>

#include "lens/otlp_http_exporter.h"

namespace lens {
namespace {

std::int64_t system_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

OtlpMetricsExporter::OtlpMetricsExporter(const MetricRegistry& registry, Resource resource,
                                         OtlpHttpOptions options,
                                         std::chrono::milliseconds interval,
                                         std::int64_t start_unix_ns)
    : registry_(registry),
      resource_(std::move(resource)),
      options_(std::move(options)),
      interval_(interval),
      start_unix_ns_(start_unix_ns) {
  if (interval_.count() < 1)
    throw std::invalid_argument("metrics export interval must be at least 1 ms");
  thread_ = std::thread([this] { run(); });
}

OtlpMetricsExporter::~OtlpMetricsExporter() { shutdown(); }

bool OtlpMetricsExporter::send(const OtlpSendPolicy& policy) {
  std::lock_guard<std::mutex> one_at_a_time(send_mu_);
  const std::int64_t now = system_now_ns();
  const std::string body = options_.json ? registry_.otlp_json(resource_, start_unix_ns_, now)
                                         : registry_.otlp_proto(resource_, start_unix_ns_, now);
  const OtlpSendResult r = send_otlp_request(options_, body, &abandon_, policy);
  std::lock_guard<std::mutex> lock(mu_);
  if (r.delivered) {
    ++stats_.requests;
  } else {
    ++stats_.failed;
    stats_.last_error = r.error;
  }
  return r.delivered;
}

bool OtlpMetricsExporter::export_now() { return send({}); }

void OtlpMetricsExporter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) break;
    lock.unlock();
    send({});
    lock.lock();
  }
}

void OtlpMetricsExporter::shutdown() {
  std::call_once(shut_, [this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    abandon_ = true;  // a request in progress, and its retries, end within ~50 ms
    if (thread_.joinable()) thread_.join();
    abandon_ = false;
    // The totals at the end: one attempt, within the request timeout.
    send({.max_attempts = 1, .give_up_on_timeout = true});
  });
}

MetricsExportStats OtlpMetricsExporter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace lens
