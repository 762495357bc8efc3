// Span timestamps. Internal header.
//
// A span reads only the monotonic clock; its Unix time is that reading plus a
// process-wide offset (system clock minus monotonic clock), read at start and
// re-read by the export thread to follow steps of the system clock. Start
// time is therefore system time, and a span's duration is a monotonic
// difference that never goes backwards.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace lens::detail {

// std::chrono::steady_clock's clock, read without its out-of-line wrapper
// (two reads a span).
inline std::int64_t steady_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
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

// One reading of the system clock against the monotonic clock: the offset
// and the width of the monotonic bracket around the system read (the
// reading is within half of it of the true offset).
struct ClockOffsetReading {
  std::int64_t offset_ns = 0;
  std::int64_t bracket_ns = 0;
};

// The tightest of a few bracketed reads.
ClockOffsetReading read_clock_offset();

// Both clocks advance at one rate (NTP slews them alike), so their
// difference moves only when the system clock is stepped. A reading that
// differs from the current one by no more than this plus both readings'
// noise is the same offset read again. Each process follows a step at its
// own next refresh, so the ranks of one host disagree by the step until
// the last has: worth it for the steps NTP makes (ntpd steps only offsets
// beyond 128 ms, chrony's makestep is set in seconds; smaller corrections
// are slewed), not for the steps of a millisecond or two some virtual
// machines' time agents make every few seconds, which would put a host's
// ranks a step apart again and again. Those are left out: the span clock
// stays continuous, within this of the system clock.
inline constexpr std::int64_t kClockStepNs = 100'000'000;
bool clock_was_stepped(const ClockOffsetReading& current, const ClockOffsetReading& next);

// Re-reads both clocks and follows a step of the system clock; called off
// the hot path (export thread, init). The offset changes only on a step:
// re-reading it on a busy host would otherwise move every later span of the
// process by the read's noise (hundreds of microseconds when preempted),
// and the clock samples taken before (clock_sync.h) would no longer hold.
void refresh_clock_offset();

// A skew of one telemetry's span clock against the system clock: the test
// aid that gives ranks sharing one host different clocks
// (TelemetryOptions::test_clock_offset_ns, test_clock_drift_ppm), so that
// clock alignment can be tested. Zero unless a test sets it.
struct ClockSkew {
  ClockSkew() = default;
  ClockSkew(std::int64_t offset, double drift_per_ns, std::int64_t origin)
      : offset_ns(offset),
        drift(drift_per_ns),
        origin_steady_ns(origin),
        skewed(offset != 0 || drift_per_ns != 0) {}

  std::int64_t offset_ns = 0;
  double drift = 0;  // 1e-6 per ppm
  std::int64_t origin_steady_ns = 0;
  // Either of the above set: a flag, so that a span's start tests one byte
  // rather than a double.
  bool skewed = false;

  bool active() const { return skewed; }
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
