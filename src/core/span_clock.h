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

// A skew of one telemetry's span clock against the system clock: the test
// aid that gives ranks sharing one host different clocks
// (TelemetryOptions::test_clock_offset_ns, test_clock_drift_ppm), so that
// clock alignment can be tested. Zero unless a test sets it.
struct ClockSkew {
  std::int64_t offset_ns = 0;
  double drift = 0;  // 1e-6 per ppm
  std::int64_t origin_steady_ns = 0;

  bool active() const { return offset_ns != 0 || drift != 0; }
  // The span clock at a monotonic reading.
  std::int64_t unix_ns(std::int64_t steady_ns) const {
    std::int64_t t = unix_ns_from_steady(steady_ns);
    if (active())
      t += offset_ns +
           static_cast<std::int64_t>(drift * static_cast<double>(steady_ns - origin_steady_ns));
    return t;
  }
};

// A monotonic interval as the span clock of drift `drift` measures it.
inline std::int64_t skewed_elapsed(std::int64_t steady_delta_ns, double drift) {
  return drift == 0 ? steady_delta_ns
                    : steady_delta_ns +
                          static_cast<std::int64_t>(drift * static_cast<double>(steady_delta_ns));
}

}  // namespace lens::detail
