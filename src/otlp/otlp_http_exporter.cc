// OtlpHttpExporter: encodes each batch, sends it (otlp_http_transport.cc),
// keeps the delivery counters and spools what could not be delivered.
#include "lens/otlp_http_exporter.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "json_lines_file.h"
#include "lens/otlp_json.h"
#include "lens/otlp_proto.h"
#include "otlp_http_transport.h"
#include "rate_limited_warning.h"

namespace lens {
namespace {

detail::RateLimitedWarning& rejected_warning() {
  static detail::RateLimitedWarning warning;
  return warning;
}

detail::RateLimitedWarning& unhealthy_warning() {
  static detail::RateLimitedWarning warning;
  return warning;
}

detail::RateLimitedWarning& healthy_warning() {
  static detail::RateLimitedWarning warning;
  return warning;
}

}  // namespace

OtlpHttpExporter::OtlpHttpExporter(OtlpHttpOptions options) : options_(std::move(options)) {
  init_otlp_http_transport();
  stats_.spool_path = options_.spool_path;
}

OtlpHttpExporter::~OtlpHttpExporter() = default;

ExportResult OtlpHttpExporter::export_spans(const Resource& resource,
                                            std::span<const SpanRecord* const> spans) {
  if (spans.empty()) return ExportResult::kSuccess;
  const bool has_spool = !options_.spool_path.empty();
  // Past the shutdown's deadline, nothing is sent. A backend known not to
  // answer is not waited for: its batches go to the spool, but for a probe
  // now and then (none once a shutdown has begun).
  if (stopping_) return spool(resource, spans);
  OtlpSendPolicy policy;
  if (has_spool) policy.give_up_on_timeout = true;  // the spool keeps it; no waiting again
  if (unhealthy_) {
    probing_ = true;
    if (draining_ || std::chrono::steady_clock::now() < next_probe_) {
      probing_ = false;
      return spool(resource, spans);
    }
    policy.max_attempts = 1;
  }
  body_.clear();
  OtlpSendResult r;
  if (options_.json) {
    append_otlp_json(body_, resource, spans);
    r = send_otlp_request(options_, body_, &stopping_, policy);
  } else if (append_otlp_proto(body_, resource, spans)) {
    r = send_otlp_request(options_, body_, &stopping_, policy);
  } else {
    r.error = "a batch of " + std::to_string(spans.size()) +
              " spans encodes to more than the 256 MiB an OTLP/protobuf request of lens can "
              "hold; lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE";
  }
  probing_ = false;
  if (r.delivered && r.rejected > 0)
    rejected_warning().warn("the receiver at " + redacted_url(options_.endpoint) + " rejected " +
                            std::to_string(r.rejected) + " of " + std::to_string(spans.size()) +
                            " spans" +
                            (r.rejected_message.empty() ? "" : ": " + r.rejected_message));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.requests += static_cast<std::uint64_t>(r.attempts);
    stats_.retries += static_cast<std::uint64_t>(std::max(0, r.attempts - 1));
    if (r.delivered) {
      stats_.spans_delivered += spans.size();
      stats_.spans_rejected += static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.rejected));
    }
  }
  if (r.delivered) {
    note_answered();
    return ExportResult::kSuccess;
  }
  note_failure(r);
  return spool(resource, spans);
}

void OtlpHttpExporter::note_answered() {
  if (!unhealthy_) return;
  unhealthy_ = false;
  probe_delay_ = std::chrono::milliseconds(0);
  healthy_warning().warn("the backend at " + redacted_url(options_.endpoint) +
                         " answers again: delivery resumed (what was spooled meanwhile is in " +
                         options_.spool_path + ", for lens upload)");
}

void OtlpHttpExporter::note_failure(const OtlpSendResult& r) {
  const bool has_spool = !options_.spool_path.empty();
  if (has_spool && r.transient && !r.stopped) {
    // Not answering: spool without waiting until a probe is answered, the
    // probes spaced as the retry backoff.
    if (!unhealthy_) {
      unhealthy_ = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.backend_unhealthy;
      }
      unhealthy_warning().warn("the backend at " + redacted_url(options_.endpoint) +
                               " is not answering (" + r.error + "): spans go to the spool " +
                               options_.spool_path + " until it answers again");
    }
    probe_delay_ = probe_delay_.count() == 0 ? options_.initial_backoff
                                             : std::min(options_.max_backoff, probe_delay_ * 2);
    next_probe_ = std::chrono::steady_clock::now() + probe_delay_;
  }
  if (!has_spool && !warned_without_spool_) {
    warned_without_spool_ = true;
    std::fprintf(stderr,
                 "lens: export to %s failed: %s; these spans are lost. To keep what cannot be "
                 "delivered, set LENS_SPOOL_DIR (a directory: lens upload sends it later) or "
                 "MEGATRON_OTEL_EXPORTER=file\n",
                 redacted_url(options_.endpoint).c_str(), r.error.c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.last_error = r.error;
}

ExportResult OtlpHttpExporter::spool(const Resource& resource,
                                     std::span<const SpanRecord* const> spans) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.spans_failed += spans.size();
    if (stopping_ && stats_.last_error.empty())
      stats_.last_error = "not sent: the shutdown's deadline had passed";
  }
  if (options_.spool_path.empty()) return ExportResult::kFailure;
  std::string line;
  append_otlp_json(line, resource, spans);
  line.push_back('\n');
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(options_.spool_path).parent_path(), ec);
  const int fd = detail::open_json_lines_file(options_.spool_path);
  const bool ok = fd >= 0 && detail::append_json_line(fd, line) == 0;
  if (fd >= 0) ::close(fd);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    stats_.last_error += "; the spool file " + options_.spool_path + " could not be written";
    return ExportResult::kFailure;
  }
  stats_.spans_spooled += spans.size();
  return ExportResult::kSpooled;
}

void OtlpHttpExporter::shutdown(std::chrono::milliseconds) { stopping_ = true; }

void OtlpHttpExporter::draining() {
  draining_ = true;
  // A probe of a backend that was not answering is not waited for.
  if (probing_) stopping_ = true;
}

void OtlpHttpExporter::interrupt() { stopping_ = true; }

bool OtlpHttpExporter::backend_unhealthy() const { return unhealthy_; }

std::optional<DeliveryStats> OtlpHttpExporter::delivery_stats() const { return stats(); }

OtlpHttpStats OtlpHttpExporter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace lens
