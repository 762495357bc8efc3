#include "span_clock.h"

namespace lens::detail {

constinit std::atomic<std::int64_t> g_clock_offset_ns{0};

void refresh_clock_offset() {
  // Bracket the system clock read with two monotonic reads and use their
  // midpoint, so a preemption between the reads shifts the offset less.
  const std::int64_t before = steady_now_ns();
  const std::int64_t system = system_now_ns();
  const std::int64_t after = steady_now_ns();
  g_clock_offset_ns.store(system - (before + (after - before) / 2), std::memory_order_relaxed);
}

}  // namespace lens::detail
