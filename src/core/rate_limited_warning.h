// A warning printed to stderr at most once per interval, with the number of
// occurrences since the last print. Internal header.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

namespace lens::detail {

class RateLimitedWarning {
 public:
  explicit RateLimitedWarning(std::int64_t interval_ms = 10000) : interval_ms_(interval_ms) {}
  void warn(std::string_view message);

 private:
  std::int64_t interval_ms_;
  std::atomic<std::int64_t> last_print_ms_{-1};
  std::atomic<std::uint64_t> suppressed_{0};
};

}  // namespace lens::detail
