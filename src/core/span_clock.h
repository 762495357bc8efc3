// Span timestamps. Internal header.
//
// A span reads only the monotonic clock; its Unix time is that reading plus a
// process-wide offset (system clock minus monotonic clock) refreshed by the
// export thread. Start time is therefore system time, and a span's duration
// is a monotonic difference that never goes backwards.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace lens::detail {

inline std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::int64_t system_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// System minus monotonic clock, in ns. Set by refresh_clock_offset(), which
// every Telemetry calls at creation.
extern std::atomic<std::int64_t> g_clock_offset_ns;

inline std::int64_t unix_ns_from_steady(std::int64_t steady_ns) {
  return steady_ns + g_clock_offset_ns.load(std::memory_order_relaxed);
}

// Re-reads both clocks; called off the hot path (export thread, init).
void refresh_clock_offset();

}  // namespace lens::detail
