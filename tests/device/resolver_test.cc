// The event pool and the resolver against the simulated CUDA runtime: work
// resolved off the submitting thread to the device's times, a full pending
// set refused and counted, never-completing work handed on unresolved at
// shutdown, and every event back in the pool.
#include "resolver.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "simulation.h"

namespace lens::device {
namespace {

using testing::monotonic_ns;
using testing::Simulation;
using testing::stream;

// Waits (at most 20 s) until `n` submissions were handed on.
void wait_handled(const Resolver& r, std::uint64_t n) {
  for (int i = 0; i < 2000; ++i) {
    const auto s = r.stats();
    if (s.resolved + s.unresolved >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST(EventPool, ReusesEventsAndMakesNoMoreThanItsCapacity) {
  const auto rt = CudaRuntime::from_library(LENS_SIMULATED_CUDA_RUNTIME);
  ASSERT_TRUE(rt->available()) << rt->origin();
  EventPool pool(*rt, 2);
  Event a = pool.acquire(), b = pool.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool.acquire(), nullptr) << "both in use";
  pool.release(a);
  EXPECT_EQ(pool.acquire(), a) << "the released one again";
  EXPECT_EQ(pool.created(), 2u);
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST(Resolver, WorkIsResolvedToWhenTheDeviceRanItNotWhenTheHostLaunchedIt) {
  const auto rt = CudaRuntime::from_library(LENS_SIMULATED_CUDA_RUNTIME);
  ASSERT_TRUE(rt->available()) << rt->origin();
  Simulation sim;
  sim.reset(/*delay_ns=*/100'000, /*drift_ppm=*/0);
  DeviceClock clock(*rt, monotonic_ns);
  ASSERT_TRUE(clock.anchor(stream(5)));
  EventPool pool(*rt, 64);
  std::vector<std::optional<Resolver::Times>> got(5);
  std::vector<std::pair<std::int64_t, std::int64_t>> truth(5);
  std::int64_t launched_last = 0;
  {
    Resolver resolver(*rt, clock, pool, 16, std::chrono::microseconds(200));
    // Five 2 ms kernels queued back to back in well under a millisecond of
    // host time: the device runs them one after the other.
    for (std::size_t i = 0; i < 5; ++i) {
      Event start = pool.acquire(), end = pool.acquire();
      ASSERT_EQ(rt->record(start, stream(5)), kSuccess);
      sim.launch(stream(5), 2'000'000);
      ASSERT_EQ(rt->record(end, stream(5)), kSuccess);
      truth[i] = {sim.completion(start), sim.completion(end)};
      launched_last = monotonic_ns();
      ASSERT_TRUE(
          resolver.submit(start, end, [&got, i](std::optional<Resolver::Times> t) { got[i] = t; }));
    }
    wait_handled(resolver, 5);
    const auto stats = resolver.stats();
    EXPECT_EQ(stats.resolved, 5u);
    EXPECT_EQ(stats.unresolved, 0u);
    EXPECT_GE(stats.pending_high_water, 1u);
  }
  const double bound = static_cast<double>(clock.uncertainty_ns()) + 1'000;
  for (std::size_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(got[i].has_value()) << i;
    EXPECT_NEAR(static_cast<double>(got[i]->start_ns), static_cast<double>(truth[i].first), bound);
    EXPECT_NEAR(static_cast<double>(got[i]->end_ns), static_cast<double>(truth[i].second), bound);
    EXPECT_NEAR(static_cast<double>(got[i]->end_ns - got[i]->start_ns),
                static_cast<double>(truth[i].second - truth[i].first), 1'000)
        << "each span's device time, to the microsecond";
    EXPECT_GE(got[i]->end_ns - got[i]->start_ns, 2'000'000 - 1'000) << "its 2 ms kernel";
  }
  // The last kernel ended about 10 ms of device work after its launch.
  EXPECT_GE(got[4]->end_ns - launched_last, 9'000'000);
  EXPECT_EQ(pool.in_use(), 0u) << "every event back in the pool";
}

TEST(Resolver, AFullPendingSetIsRefusedAndCountedAndHungWorkIsUnresolvedAtShutdown) {
  const auto rt = CudaRuntime::from_library(LENS_SIMULATED_CUDA_RUNTIME);
  ASSERT_TRUE(rt->available()) << rt->origin();
  Simulation sim;
  sim.reset(0, 0);
  DeviceClock clock(*rt, monotonic_ns);
  ASSERT_TRUE(clock.anchor(stream(6)));
  EventPool pool(*rt, 64);
  int unresolved = 0, resolved = 0;
  Resolver resolver(*rt, clock, pool, /*max_pending=*/2, std::chrono::microseconds(200));
  sim.hold(stream(6), true);  // nothing on it completes
  for (int i = 0; i < 3; ++i) {
    Event start = pool.acquire(), end = pool.acquire();
    rt->record(start, stream(6));
    rt->record(end, stream(6));
    const bool taken = resolver.submit(
        start, end, [&](std::optional<Resolver::Times> t) { ++(t ? resolved : unresolved); });
    EXPECT_EQ(taken, i < 2) << i;
  }
  EXPECT_EQ(resolver.stats().refused, 1u);
  EXPECT_EQ(pool.in_use(), 4u) << "the refused pair went back at once";
  resolver.shutdown(std::chrono::milliseconds(50));
  EXPECT_EQ(unresolved, 2);
  EXPECT_EQ(resolved, 0);
  const auto stats = resolver.stats();
  EXPECT_EQ(stats.unresolved, 2u);
  EXPECT_EQ(stats.submitted, 2u);
  EXPECT_EQ(pool.in_use(), 0u);
  // After shutdown nothing is taken.
  EXPECT_FALSE(resolver.submit(pool.acquire(), pool.acquire(), nullptr));
  sim.hold(stream(6), false);
}

}  // namespace
}  // namespace lens::device
