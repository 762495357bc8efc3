// The CUDA runtime loaded at run time, and device events on the host clock,
// against the simulated runtime (tests/device/simulated_cuda_runtime.cc),
// whose device times are exact by construction: an event completes at a
// host time the simulation says (lens_sim_completion_ns).
#include "device_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "cuda_runtime.h"
#include "simulation.h"

namespace lens::device {
namespace {

using testing::monotonic_ns;
using testing::Simulation;
using testing::stream;

TEST(CudaRuntime, WithoutALibraryThereIsNoneAndItSaysWhy) {
  const auto missing = CudaRuntime::from_library("/nonexistent/libcudart.so.12");
  EXPECT_FALSE(missing->available());
  EXPECT_NE(missing->origin().find("cannot load /nonexistent/libcudart.so.12"), std::string::npos)
      << missing->origin();
  // A library that is not a CUDA runtime is not used, naming what it lacks.
  const auto other = CudaRuntime::from_library("libm.so.6");
  EXPECT_FALSE(other->available());
  EXPECT_NE(other->origin().find("libm.so.6 lacks cudaEventCreateWithFlags; not used"),
            std::string::npos)
      << other->origin();
  // This machine has no CUDA runtime: the process's is none.
  if (std::getenv("LENS_CUDA_RUNTIME") == nullptr && !CudaRuntime::process().available()) {
    EXPECT_NE(CudaRuntime::process().origin().find("no CUDA runtime"), std::string::npos)
        << CudaRuntime::process().origin();
  }
}

TEST(CudaRuntime, EventsAroundWorkMeasureItsDeviceTime) {
  const auto rt = CudaRuntime::from_library(LENS_SIMULATED_CUDA_RUNTIME);
  ASSERT_TRUE(rt->available()) << rt->origin();
  Simulation sim;
  sim.reset(/*delay_ns=*/50'000, /*drift_ppm=*/0);
  Event a = nullptr, b = nullptr;
  ASSERT_EQ(rt->create_event(&a), kSuccess);
  ASSERT_EQ(rt->create_event(&b), kSuccess);
  ASSERT_EQ(rt->record(a, stream(1)), kSuccess);
  sim.launch(stream(1), 3'000'000);  // 3 ms of work
  ASSERT_EQ(rt->record(b, stream(1)), kSuccess);
  EXPECT_EQ(rt->query(b), kNotReady) << "the device runs it later";
  float ms = 0;
  EXPECT_EQ(rt->elapsed_ms(&ms, a, b), kNotReady);
  ASSERT_EQ(rt->synchronize(b), kSuccess);
  ASSERT_EQ(rt->elapsed_ms(&ms, a, b), kSuccess);
  // The simulation's own account: from where the device reached A to
  // where it reached B (the 3 ms, and the host's moment between recording
  // A and launching the work).
  const double device_ms = static_cast<double>(sim.completion(b) - sim.completion(a)) / 1e6;
  EXPECT_NEAR(ms, device_ms, 1e-3) << "to the microsecond";
  EXPECT_GE(ms, 3.0 - 1e-3);
  EXPECT_NE(rt->describe(kNotReady).find("600 (device not ready)"), std::string::npos);
  rt->destroy_event(a);
  rt->destroy_event(b);
}

TEST(DeviceClock, AnEventsHostTimeIsWhereTheDeviceReachedItWithinTheAnchorsBracket) {
  const auto rt = CudaRuntime::from_library(LENS_SIMULATED_CUDA_RUNTIME);
  ASSERT_TRUE(rt->available()) << rt->origin();
  Simulation sim;
  sim.reset(/*delay_ns=*/200'000, /*drift_ppm=*/0);
  const long events_before = sim.events();
  {
    DeviceClock clock(*rt, monotonic_ns);
    Event x = nullptr;
    ASSERT_EQ(rt->create_event(&x), kSuccess);
    // Before any anchor a device time has no host time.
    ASSERT_EQ(rt->record(x, stream(2)), kSuccess);
    ASSERT_EQ(rt->synchronize(x), kSuccess);
    EXPECT_FALSE(clock.host_time(x).has_value());
    ASSERT_TRUE(clock.anchor(stream(2)));
    // 4 ms of work, then X: the device reaches X 4.2 ms after the launch
    // (the delay, then the work), long after the host recorded it.
    const std::int64_t launched = monotonic_ns();
    sim.launch(stream(2), 4'000'000);
    ASSERT_EQ(rt->record(x, stream(2)), kSuccess);
    ASSERT_EQ(rt->synchronize(x), kSuccess);
    const auto at = clock.host_time(x);
    ASSERT_TRUE(at.has_value());
    const std::int64_t truth = sim.completion(x);
    EXPECT_GE(truth - launched, 4'200'000);
    EXPECT_NEAR(static_cast<double>(*at), static_cast<double>(truth),
                static_cast<double>(clock.uncertainty_ns()) + 1'000)
        << "uncertainty " << clock.uncertainty_ns() << " ns";
    // A held stream's events never complete: no host time, no stall.
    Event y = nullptr;
    ASSERT_EQ(rt->create_event(&y), kSuccess);
    sim.hold(stream(2), true);
    ASSERT_EQ(rt->record(y, stream(2)), kSuccess);
    EXPECT_FALSE(clock.host_time(y).has_value());
    sim.hold(stream(2), false);
    rt->destroy_event(x);
    rt->destroy_event(y);
  }
  EXPECT_EQ(sim.events(), events_before) << "every event the clock made is destroyed";
}

TEST(DeviceClock, TheDriftIsFittedFromAnchorsASecondApart) {
  const auto rt = CudaRuntime::from_library(LENS_SIMULATED_CUDA_RUNTIME);
  ASSERT_TRUE(rt->available()) << rt->origin();
  Simulation sim;
  sim.reset(/*delay_ns=*/20'000, /*drift_ppm=*/2000);  // the device runs 0.2% fast
  DeviceClock clock(*rt, monotonic_ns);
  ASSERT_TRUE(clock.anchor(stream(3)));
  EXPECT_EQ(clock.drift(), 0) << "one anchor: no drift yet";
  const std::int64_t first = monotonic_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(clock.anchor(stream(3)));
  const double interval = static_cast<double>(monotonic_ns() - first);
  // Within what the anchors' brackets allow (both ends off by up to the
  // uncertainty), whatever the machine's load.
  const double allowed = 2.0 * static_cast<double>(clock.uncertainty_ns()) / interval + 1e-6;
  EXPECT_NEAR(clock.drift(), 2000e-6, allowed) << "uncertainty " << clock.uncertainty_ns();
  EXPECT_EQ(clock.anchors(), 2u);
  // An event 10 ms of device work later is put at 10 ms / 1.002 of host time.
  Event x = nullptr;
  ASSERT_EQ(rt->create_event(&x), kSuccess);
  sim.launch(stream(3), 10'000'000);
  ASSERT_EQ(rt->record(x, stream(3)), kSuccess);
  ASSERT_EQ(rt->synchronize(x), kSuccess);
  const auto at = clock.host_time(x);
  ASSERT_TRUE(at.has_value());
  EXPECT_NEAR(static_cast<double>(*at), static_cast<double>(sim.completion(x)),
              static_cast<double>(clock.uncertainty_ns()) + 1'000 + allowed * 1e7);
  rt->destroy_event(x);
}

}  // namespace
}  // namespace lens::device
