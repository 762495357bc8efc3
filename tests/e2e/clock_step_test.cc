// A host whose clock is stepped by a millisecond and a half every tenth of
// a second, forward and back (as some virtual machines' time agents do):
// a 4-rank run on it still checks, every rank's spans on one clock. Each
// process following such a step at its own moment would leave the ranks a
// step apart in between, and linked receives would start before the step
// span they link to. Needs CAP_SYS_TIME (CI runs as root); skipped, saying
// so, without it. Steps sum to zero, and the test runs alone (RUN_SERIAL).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>

#include "run_command.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::int64_t kStepNs = 1'500'000;

// Steps the system clock by `ns`; the error number, or 0.
int step_clock(std::int64_t ns) {
  timespec ts{};
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return errno;
  std::int64_t t = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec + ns;
  ts.tv_sec = static_cast<time_t>(t / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(t % 1'000'000'000);
  return clock_settime(CLOCK_REALTIME, &ts) == 0 ? 0 : errno;
}

TEST(ClockSteps, ARunOnAHostWhoseClockIsSteppedEveryTenthOfASecondChecks) {
  if (const int e = step_clock(0); e != 0)
    GTEST_SKIP() << "setting the system clock needs CAP_SYS_TIME: " << std::strerror(e);
  const fs::path dir = fs::temp_directory_path() / ("lens-clock-step-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  // The stepping starts once the ranks run and goes on until they stop:
  // +1.5 ms, then -1.5 ms, ...
  std::atomic<bool> stop{false};
  int steps = 0;
  int step_error = 0;
  std::thread stepper([&] {
    std::this_thread::sleep_for(300ms);
    while (!stop.load()) {
      const int e = step_clock(steps % 2 == 0 ? kStepNs : -kStepNs);
      if (e != 0) {
        step_error = e;
        break;
      }
      ++steps;
      std::this_thread::sleep_for(100ms);
    }
    if (steps % 2 == 1 && step_clock(-kStepNs) == 0) ++steps;  // back where it was
  });
  // Every rank's export thread re-reads the clocks every 50 ms.
  const auto run = lens::testing::run_command(
      "OTEL_BSP_SCHEDULE_DELAY=50 " + std::string(LENS_TRAIN_BIN) +
          " --pp 4 --microbatches 4 --steps 500 --layers 4 --hidden 16 --microbatch-size 4"
          " --timeout-s 60 --otel-enabled=true --otel-span-groups all --trace-dir " +
          (dir / "traces").string(),
      dir / "train.txt");
  stop = true;
  stepper.join();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(step_error, 0) << std::strerror(step_error);
  EXPECT_EQ(steps % 2, 0) << "the clock was left stepped";
  // Enough steps to land between the ranks' re-reads many times.
  EXPECT_GE(steps, 10) << "the run was over before the clock was stepped often";

  const auto check = lens::testing::run_command(
      std::string(LENS_BIN) + " check " + (dir / "traces").string() + "/*", dir / "check.txt");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("every step is one trace; every link resolves"), std::string::npos)
      << check.output;
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
