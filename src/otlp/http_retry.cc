#include "http_retry.h"

#include <algorithm>
#include <cctype>
#include <thread>

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
