#include "http_retry.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <thread>

#include "lens/otlp_http_options.h"

namespace lens::detail {

bool retryable_status(long status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

std::optional<std::chrono::seconds> retry_after(std::string_view line) {
  constexpr std::string_view kName = "retry-after:";
  if (line.size() <= kName.size()) return std::nullopt;
  for (std::size_t i = 0; i < kName.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != kName[i]) return std::nullopt;
  long seconds = 0;
  bool digits = false;
  for (char c : line.substr(kName.size())) {
    if (c == ' ' || c == '\t') continue;
    if (c < '0' || c > '9') break;
    digits = true;
    seconds = std::min(seconds * 10 + (c - '0'), 86400L);
  }
  if (!digits) return std::nullopt;
  return std::chrono::seconds(seconds);
}

std::chrono::milliseconds backoff_delay(std::chrono::milliseconds initial,
                                        std::chrono::milliseconds max, int attempt, double spread) {
  std::chrono::milliseconds backoff(initial.count() * (1LL << std::clamp(attempt - 1, 0, 20)));
  backoff = std::min(backoff, max);
  return std::chrono::milliseconds(static_cast<std::int64_t>(backoff.count() * spread));
}

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

}  // namespace lens::detail

namespace lens {

std::string redacted_url(std::string_view url) {
  std::string out(url);
  const auto scheme = out.find("://");
  const std::size_t authority = scheme == std::string::npos ? 0 : scheme + 3;
  const auto path = out.find_first_of("/?#", authority);
  const auto at = out.rfind('@', path == std::string::npos ? out.size() : path);
  if (at != std::string::npos && at >= authority) out.replace(authority, at - authority, "***");
  // Each query value: key=***.
  const auto query = out.find('?');
  if (query != std::string::npos) {
    const auto fragment = out.find('#', query);
    std::string rebuilt = out.substr(0, query + 1);
    const std::string q = out.substr(
        query + 1, fragment == std::string::npos ? std::string::npos : fragment - query - 1);
    std::size_t pos = 0;
    while (pos <= q.size()) {
      auto amp = q.find('&', pos);
      if (amp == std::string::npos) amp = q.size();
      const std::string item = q.substr(pos, amp - pos);
      const auto eq = item.find('=');
      rebuilt += (eq == std::string::npos ? item : item.substr(0, eq + 1) + "***");
      if (amp < q.size()) rebuilt += '&';
      pos = amp + 1;
    }
    if (fragment != std::string::npos) rebuilt += out.substr(fragment);
    out = rebuilt;
  }
  return out;
}

}  // namespace lens
