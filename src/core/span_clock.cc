#include "span_clock.h"

#include <cstdlib>
#include <limits>

namespace lens::detail {

constinit std::atomic<std::int64_t> g_clock_offset_ns{0};

namespace {

// Bracketed reads per refresh: the tightest bracket is kept, so one
// preemption between two reads does not decide the offset.
constexpr int kReadsPerRefresh = 4;

// The bracket of the reading g_clock_offset_ns holds; -1 before the first.
// No lock: refreshes are rare and may race (two telemetries' export
// threads), and a pair mixed from two readings of an unstepped clock is
// still a valid reading. A fork cannot leave anything held either.
constinit std::atomic<std::int64_t> g_clock_bracket_ns{-1};

}  // namespace

ClockOffsetReading read_clock_offset() {
  ClockOffsetReading best{0, std::numeric_limits<std::int64_t>::max()};
  for (int i = 0; i < kReadsPerRefresh; ++i) {
    // The system clock read between two monotonic reads, at their midpoint.
    const std::int64_t before = steady_now_ns();
    const std::int64_t system = system_now_ns();
    const std::int64_t after = steady_now_ns();
    if (after - before < best.bracket_ns)
      best = {system - (before + (after - before) / 2), after - before};
  }
  return best;
}

bool clock_was_stepped(const ClockOffsetReading& current, const ClockOffsetReading& next) {
  // Each reading is within half its bracket of the true offset, so two
  // readings of an unstepped clock differ by at most the half-brackets'
  // sum; a step must show beyond that and beyond kClockStepNs.
  const std::int64_t noise = current.bracket_ns / 2 + next.bracket_ns / 2;
  return std::llabs(next.offset_ns - current.offset_ns) > kClockStepNs + noise;
}

void refresh_clock_offset() {
  const ClockOffsetReading next = read_clock_offset();
  const std::int64_t bracket = g_clock_bracket_ns.load(std::memory_order_relaxed);
  if (bracket >= 0 &&
      !clock_was_stepped({g_clock_offset_ns.load(std::memory_order_relaxed), bracket}, next))
    return;
  g_clock_offset_ns.store(next.offset_ns, std::memory_order_relaxed);
  g_clock_bracket_ns.store(next.bracket_ns, std::memory_order_relaxed);
}

}  // namespace lens::detail
