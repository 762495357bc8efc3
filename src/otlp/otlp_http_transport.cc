// send_otlp_request: one ExportTraceServiceRequest over HTTP with libcurl,
// attempted again under the rules of http_retry.h.
#include "otlp_http_transport.h"

#include <curl/curl.h>

#include <mutex>
#include <random>

#include "gzip.h"
#include "http_retry.h"
#include "lens/ids.h"
#include "lens/otlp_http_exporter.h"
#include "lens/version.h"
#include "partial_success.h"

namespace lens {
namespace {

constexpr std::size_t kMaxResponseBytes = 64 * 1024;  // a hostile server cannot fill memory
const std::string kUserAgent = std::string("lens/") + kVersion;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Response {
  std::string body;
  std::optional<std::chrono::seconds> retry_after;
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
  if (auto delay = detail::retry_after(std::string_view(data, bytes))) r->retry_after = delay;
  return bytes;
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

// Runs one transfer on a multi handle, polling `stop` every 50 ms so that
// a request to a backend that never answers can be abandoned at once (the
// easy interface would block until the request timeout).
CURLcode perform_stoppable(CURL* curl, const std::atomic<bool>* stop, bool& stopped) {
  if (stop == nullptr) return curl_easy_perform(curl);
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return curl_easy_perform(curl);
  curl_multi_add_handle(multi, curl);
  CURLcode rc = CURLE_OK;
  int running = 1;
  for (;;) {
    if (curl_multi_perform(multi, &running) != CURLM_OK) {
      rc = CURLE_FAILED_INIT;
      break;
    }
    if (running == 0) {
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left))
        if (m->msg == CURLMSG_DONE && m->easy_handle == curl) rc = m->data.result;
      break;
    }
    if (stop->load()) {
      stopped = true;
      rc = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    curl_multi_poll(multi, nullptr, 0, 50, nullptr);
  }
  curl_multi_remove_handle(multi, curl);
  curl_multi_cleanup(multi);
  return rc;
}

}  // namespace

void init_otlp_http_transport() { global_init(); }

OtlpSendResult send_otlp_request(const OtlpHttpOptions& o, const std::string& body,
                                 const std::atomic<bool>* stop, const OtlpSendPolicy& policy) {
  global_init();
  OtlpSendResult result;
  std::string compressed;
  const std::string* payload = &body;
  if (o.gzip) {
    if (!detail::gzip_compress(body, compressed)) {
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
  const int max_attempts =
      std::max(1, policy.max_attempts > 0 ? policy.max_attempts : o.max_attempts);
  for (int attempt = 1; attempt <= max_attempts; ++attempt) {
    result.attempts = attempt;
    Response response;
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, o.endpoint.c_str());
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload->size()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    // Each attempt ends by the request timeout and by the retry deadline.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const long attempt_ms = static_cast<long>(
        std::max<std::int64_t>(1, std::min<std::int64_t>(o.timeout.count(), left.count())));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, attempt_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, attempt_ms);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, kUserAgent.c_str());
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!o.certificate.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, o.certificate.c_str());
    if (!o.client_certificate.empty()) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, o.client_certificate.c_str());
      curl_easy_setopt(curl, CURLOPT_SSLKEY, o.client_key.c_str());
    }
    bool stopped = false;
    const CURLcode rc = perform_stoppable(curl, stop, stopped);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    result.http_status = status;

    bool retry = false;
    result.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    if (stopped) {
      result.error = "the request to " + redacted_url(o.endpoint) + " was abandoned unanswered";
      result.stopped = result.transient = true;
      break;
    }
    if (rc == CURLE_OK && status >= 200 && status < 300) {
      result.delivered = true;
      result.transient = false;
      result.error.clear();
      detail::PartialSuccess partial = o.json ? detail::partial_success_from_json(response.body)
                                              : detail::partial_success_from_proto(response.body);
      result.rejected = partial.rejected_spans;
      result.rejected_message = std::move(partial.error_message);
      break;
    }
    if (rc != CURLE_OK) {
      result.error = std::string("connection to ") + redacted_url(o.endpoint) +
                     " failed: " + curl_easy_strerror(rc);
      retry = retryable_curl(rc);
    } else {
      result.error = "HTTP " + std::to_string(status) + " from " + redacted_url(o.endpoint);
      retry = detail::retryable_status(status);
    }
    result.transient = retry;
    if (result.timed_out && policy.give_up_on_timeout) break;
    if (stop && stop->load()) result.stopped = true;
    if (!retry || attempt == max_attempts || result.stopped) break;
    // Exponential backoff with jitter in [0.5, 1.5); the server's Retry-After wins.
    std::uniform_real_distribution<double> spread(0.5, 1.5);
    std::chrono::milliseconds wait =
        detail::backoff_delay(o.initial_backoff, o.max_backoff, attempt, spread(jitter));
    if (response.retry_after) wait = *response.retry_after;
    if (std::chrono::steady_clock::now() + wait >= deadline) {
      result.error += " (retry deadline reached)";
      break;
    }
    detail::interruptible_sleep(wait, stop);
    if (stop && stop->load()) {
      result.stopped = true;
      break;
    }
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return result;
}

}  // namespace lens
