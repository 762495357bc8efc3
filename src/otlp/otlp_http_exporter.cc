// OtlpHttpExporter: encodes each batch, sends it (otlp_http_transport.cc),
// keeps the delivery counters and spools what could not be delivered.
#include "lens/otlp_http_exporter.h"

#include <unistd.h>

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

}  // namespace

OtlpHttpExporter::OtlpHttpExporter(OtlpHttpOptions options) : options_(std::move(options)) {
  init_otlp_http_transport();
}

OtlpHttpExporter::~OtlpHttpExporter() = default;

ExportResult OtlpHttpExporter::export_spans(const Resource& resource,
                                            std::span<const SpanRecord* const> spans) {
  if (spans.empty()) return ExportResult::kSuccess;
  body_.clear();
  OtlpSendResult r;
  if (options_.json) {
    append_otlp_json(body_, resource, spans);
    r = send_otlp_request(options_, body_, &stopping_);
  } else if (append_otlp_proto(body_, resource, spans)) {
    r = send_otlp_request(options_, body_, &stopping_);
  } else {
    r.error = "a batch of " + std::to_string(spans.size()) +
              " spans encodes to more than the 256 MiB an OTLP/protobuf request of lens can "
              "hold; lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE";
  }
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
    } else {
      stats_.spans_failed += spans.size();
      stats_.last_error = r.error;
    }
  }
  if (r.delivered) return ExportResult::kSuccess;
  spool(resource, spans);
  return ExportResult::kFailure;
}

void OtlpHttpExporter::spool(const Resource& resource, std::span<const SpanRecord* const> spans) {
  if (options_.spool_path.empty()) return;
  std::string line;
  append_otlp_json(line, resource, spans);
  line.push_back('\n');
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(options_.spool_path).parent_path(), ec);
  const int fd = detail::open_json_lines_file(options_.spool_path);
  const bool ok = fd >= 0 && detail::append_json_line(fd, line) == 0;
  if (fd >= 0) ::close(fd);
  std::lock_guard<std::mutex> lock(mu_);
  if (ok)
    stats_.spans_spooled += spans.size();
  else
    stats_.last_error += "; the spool file " + options_.spool_path + " could not be written";
}

void OtlpHttpExporter::shutdown(std::chrono::milliseconds) { stopping_ = true; }

void OtlpHttpExporter::interrupt() { stopping_ = true; }

std::optional<DeliveryStats> OtlpHttpExporter::delivery_stats() const { return stats(); }

OtlpHttpStats OtlpHttpExporter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace lens
