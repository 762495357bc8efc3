// The span clock's offset (system minus monotonic clock): read tightly,
// and moved only by a step of the system clock.
#include "span_clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace lens::detail {
namespace {

TEST(SpanClock, AReadingPutsTheMonotonicClockOnUnixTime) {
  const ClockOffsetReading r = read_clock_offset();
  EXPECT_GE(r.bracket_ns, 0);
  // The offset is the system clock's reading of the monotonic one's "now"
  // (within a second: a test thread may be preempted between two reads,
  // while a wrong sign or unit is off by decades).
  const std::int64_t now_unix = system_now_ns();
  const std::int64_t from_offset = steady_now_ns() + r.offset_ns;
  EXPECT_LT(std::llabs(from_offset - now_unix), 1'000'000'000) << "offset " << r.offset_ns;
}

TEST(SpanClock, OnlyAStepBeyondBothReadingsNoiseCountsAsAStep) {
  struct Case {
    ClockOffsetReading current, next;
    bool stepped;
  };
  const std::int64_t base = 1'700'000'000'000'000'000;
  const std::vector<Case> cases = {
      {{base, 100}, {base, 100}, false},                      // the same reading
      {{base, 100}, {base + 400'000, 900'000}, false},        // a preempted read
      {{base, 2'000'000}, {base - 1'900'000, 100}, false},    // a preempted first read
      {{base, 100}, {base + 1'500'000, 100}, false},          // a VM agent's 1.5 ms step
      {{base, 100}, {base - 5'000'000, 200}, false},          // stepped back 5 ms
      {{base, 100}, {base + kClockStepNs, 0}, false},         // at the threshold
      {{base, 100}, {base + kClockStepNs + 101, 100}, true},  // just past it
      {{base, 100}, {base - 130'000'000, 200}, true},         // ntpd's step back, 130 ms
      {{base, 100}, {base + 3'600'000'000'000, 50}, true},    // an hour forward
      {{base, 6'000'000}, {base + kClockStepNs + 2'000'000, 100}, false},  // a wide bracket
  };
  for (std::size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(clock_was_stepped(cases[i].current, cases[i].next), cases[i].stepped) << "case " << i;
}

TEST(SpanClock, RefreshingOnABusyHostNeverMovesTheOffset) {
  // Every export batch refreshes the offset. Each reading differs from the
  // last by its noise (nanoseconds; hundreds of microseconds when the
  // thread is preempted between its reads): were it taken, every later
  // span of the process would move against the clock samples taken before.
  refresh_clock_offset();
  const std::int64_t first = g_clock_offset_ns.load();
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i)
    busy.emplace_back([&] {
      volatile std::uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  int moved = 0;
  for (int i = 0; i < 20'000; ++i) {
    refresh_clock_offset();
    if (g_clock_offset_ns.load() != first) ++moved;
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_EQ(moved, 0);
}

}  // namespace
}  // namespace lens::detail
