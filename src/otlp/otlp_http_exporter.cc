#include "lens/otlp_http_exporter.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "lens/ids.h"
#include "lens/otlp_json.h"
#include "lens/otlp_proto.h"

namespace lens {
namespace {

constexpr std::size_t kMaxResponseBytes = 64 * 1024;  // a hostile server cannot fill memory

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Response {
  std::string body;
  long retry_after_s = -1;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::size_t bytes = size * n;
  if (r->body.size() < kMaxResponseBytes)
    r->body.append(data, std::min(bytes, kMaxResponseBytes - r->body.size()));
  return bytes;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::size_t bytes = size * n;
  std::string_view line(data, bytes);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    bool match = true;
    for (std::size_t i = 0; i < kName.size() && match; ++i)
      match = std::tolower(static_cast<unsigned char>(line[i])) == kName[i];
    if (match) {
      long seconds = 0;
      bool digits = false;
      for (char c : line.substr(kName.size())) {
        if (c == ' ' || c == '\t') continue;
        if (c < '0' || c > '9') break;
        digits = true;
        seconds = std::min(seconds * 10 + (c - '0'), 86400L);
      }
      // Only the delta-seconds form; an HTTP date falls back to our backoff.
      if (digits) r->retry_after_s = seconds;
    }
  }
  return bytes;
}

bool read_varint(std::string_view& in, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto b = static_cast<std::uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// ExportTraceServiceResponse { partial_success = 1 { rejected_spans = 1 } },
// read with bounds checks; anything unexpected counts as no rejection.
std::int64_t rejected_from_proto(std::string_view in) {
  std::int64_t rejected = 0;
  while (!in.empty()) {
    std::uint64_t key, len;
    if (!read_varint(in, key)) return rejected;
    const auto wire = key & 7;
    if (wire == 0) {
      std::uint64_t ignored;
      if (!read_varint(in, ignored)) return rejected;
    } else if (wire == 2) {
      if (!read_varint(in, len) || len > in.size()) return rejected;
      std::string_view sub = in.substr(0, len);
      in.remove_prefix(len);
      if ((key >> 3) != 1) continue;
      while (!sub.empty()) {
        std::uint64_t k2, v2;
        if (!read_varint(sub, k2)) return rejected;
        if ((k2 & 7) == 0) {
          if (!read_varint(sub, v2)) return rejected;
          if ((k2 >> 3) == 1) rejected = static_cast<std::int64_t>(v2);
        } else if ((k2 & 7) == 2) {
          if (!read_varint(sub, v2) || v2 > sub.size()) return rejected;
          sub.remove_prefix(v2);
        } else {
          return rejected;
        }
      }
    } else if (wire == 1 && in.size() >= 8) {
      in.remove_prefix(8);
    } else if (wire == 5 && in.size() >= 4) {
      in.remove_prefix(4);
    } else {
      return rejected;
    }
  }
  return rejected;
}

// {"partialSuccess":{"rejectedSpans":"3",...}}: the number after the key.
std::int64_t rejected_from_json(std::string_view body) {
  const auto at = body.find("\"rejectedSpans\"");
  if (at == std::string_view::npos) return 0;
  std::int64_t v = 0;
  bool digits = false;
  for (char c : body.substr(at + 15)) {
    if (c == ':' || c == ' ' || c == '"' || c == '\t' || c == '\n') {
      if (digits) break;
      continue;
    }
    if (c < '0' || c > '9') break;
    digits = true;
    v = std::min<std::int64_t>(v * 10 + (c - '0'), 1LL << 40);
  }
  return v;
}

bool gzip(const std::string& in, std::string& out) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return false;
  out.resize(deflateBound(&zs, in.size()) + 32);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END;
}

bool retryable_status(long status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

bool retryable_curl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
      return true;
    default:
      return false;
  }
}

// Sleeps up to `d`, in slices, returning early when *stop becomes true.
void interruptible_sleep(std::chrono::milliseconds d, const std::atomic<bool>* stop) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (stop && stop->load()) return;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(20), std::chrono::duration_cast<std::chrono::milliseconds>(
                                           until - std::chrono::steady_clock::now()) +
                                           std::chrono::milliseconds(1)));
  }
}

}  // namespace

OtlpSendResult send_otlp_request(const OtlpHttpOptions& o, const std::string& body,
                                 const std::atomic<bool>* stop) {
  global_init();
  OtlpSendResult result;
  std::string compressed;
  const std::string* payload = &body;
  if (o.gzip) {
    if (!gzip(body, compressed)) {
      result.error = "gzip compression failed";
      return result;
    }
    payload = &compressed;
  }
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    result.error = "libcurl could not create a handle";
    return result;
  }
  curl_slist* headers = nullptr;
  headers = curl_slist_append(
      headers, o.json ? "Content-Type: application/json" : "Content-Type: application/x-protobuf");
  if (o.gzip) headers = curl_slist_append(headers, "Content-Encoding: gzip");
  headers = curl_slist_append(headers, "Expect:");
  for (const auto& [k, v] : o.headers) headers = curl_slist_append(headers, (k + ": " + v).c_str());

  const auto deadline = std::chrono::steady_clock::now() + o.retry_deadline;
  thread_local std::mt19937_64 jitter(IdGenerator::next_u64());
  for (int attempt = 1; attempt <= std::max(1, o.max_attempts); ++attempt) {
    result.attempts = attempt;
    Response response;
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, o.endpoint.c_str());
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload->size()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(o.timeout.count()));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.timeout.count()));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!o.certificate.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, o.certificate.c_str());
    const CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    result.http_status = status;

    bool retry = false;
    if (rc == CURLE_OK && status >= 200 && status < 300) {
      result.delivered = true;
      result.error.clear();
      result.rejected =
          o.json ? rejected_from_json(response.body) : rejected_from_proto(response.body);
      break;
    }
    if (rc != CURLE_OK) {
      result.error =
          std::string("connection to ") + o.endpoint + " failed: " + curl_easy_strerror(rc);
      retry = retryable_curl(rc);
    } else {
      result.error = "HTTP " + std::to_string(status) + " from " + o.endpoint;
      retry = retryable_status(status);
    }
    if (!retry || attempt == o.max_attempts || (stop && stop->load())) break;
    // Exponential backoff with jitter in [0.5, 1.5); the server's Retry-After wins.
    std::chrono::milliseconds backoff(o.initial_backoff.count() *
                                      (1LL << std::min(attempt - 1, 20)));
    backoff = std::min(backoff, o.max_backoff);
    std::uniform_real_distribution<double> spread(0.5, 1.5);
    auto wait =
        std::chrono::milliseconds(static_cast<std::int64_t>(backoff.count() * spread(jitter)));
    if (response.retry_after_s >= 0) wait = std::chrono::seconds(response.retry_after_s);
    if (std::chrono::steady_clock::now() + wait >= deadline) {
      result.error += " (retry deadline reached)";
      break;
    }
    interruptible_sleep(wait, stop);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return result;
}

OtlpHttpExporter::OtlpHttpExporter(OtlpHttpOptions options) : options_(std::move(options)) {
  global_init();
}

OtlpHttpExporter::~OtlpHttpExporter() = default;

ExportResult OtlpHttpExporter::export_spans(const Resource& resource,
                                            std::span<const SpanRecord* const> spans) {
  if (spans.empty()) return ExportResult::kSuccess;
  body_.clear();
  if (options_.json)
    append_otlp_json(body_, resource, spans);
  else
    append_otlp_proto(body_, resource, spans);
  const OtlpSendResult r = send_otlp_request(options_, body_, &stopping_);
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
  const int fd =
      ::open(options_.spool_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (std::size_t off = 0; ok && off < line.size();) {
    const ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += static_cast<std::size_t>(n);
  }
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
