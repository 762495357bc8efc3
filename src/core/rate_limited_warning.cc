#include "rate_limited_warning.h"

#include <chrono>
#include <cstdio>
#include <string>

namespace lens::detail {

void RateLimitedWarning::warn(std::string_view message) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t last = last_print_ms_.load(std::memory_order_relaxed);
  if (last >= 0 && now - last < interval_ms_) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!last_print_ms_.compare_exchange_strong(last, now)) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const std::uint64_t more = suppressed_.exchange(0);
  std::string line = "lens: warning: " + std::string(message);
  if (more > 0) line += " (" + std::to_string(more) + " more since the last such warning)";
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace lens::detail
