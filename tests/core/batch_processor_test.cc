#include "batch_processor.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

#include "memory_telemetry.h"

namespace lens {
namespace {

using namespace std::chrono_literals;
using testing::MemoryTelemetry;

// An exporter whose export calls block until released.
class GatedExporter : public SpanExporter {
 public:
  ExportResult export_spans(const Resource&, std::span<const SpanRecord* const> spans) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls_;
    entered_.notify_all();
    open_cv_.wait(lock, [&] { return open_; });
    exported_ += spans.size();
    return ExportResult::kSuccess;
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    open_cv_.notify_all();
  }
  void wait_for_first_call() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_.wait(lock, [&] { return calls_ > 0; });
  }
  std::size_t exported() {
    std::lock_guard<std::mutex> lock(mu_);
    return exported_;
  }

 private:
  std::mutex mu_;
  std::condition_variable open_cv_, entered_;
  bool open_ = false;
  int calls_ = 0;
  std::size_t exported_ = 0;
};

std::unique_ptr<Telemetry> gated_telemetry(std::shared_ptr<GatedExporter> exporter,
                                           std::uint32_t queue, std::uint32_t batch) {
  TelemetryOptions opts;
  opts.enabled = true;
  opts.span_groups.emplace("all");
  opts.run_id = "bp";
  opts.max_queue_size = queue;
  opts.max_export_batch_size = batch;
  opts.schedule_delay = 1ms;
  opts.exporter_instance = exporter;
  return Telemetry::create(opts, testing::fake_env({}));
}

TEST(BatchProcessor, FullQueueDropsAndCountsWithoutBlocking) {
  auto exporter = std::make_shared<GatedExporter>();
  auto telemetry = gated_telemetry(exporter, 4, 2);
  Tracer tracer = telemetry->tracer();
  // The first span goes out and blocks the export thread inside the exporter.
  tracer.start_span(SpanGroup::kJob, "first").end();
  exporter->wait_for_first_call();
  for (int i = 0; i < 20; ++i) tracer.start_span(SpanGroup::kJob, "more").end();
  auto stats = telemetry->stats().processor;
  EXPECT_EQ(stats.queued, 5u);  // the first one plus a full queue of 4
  EXPECT_EQ(stats.dropped_queue_full, 16u);
  exporter->open();
  ASSERT_TRUE(telemetry->flush(10s));
  stats = telemetry->stats().processor;
  EXPECT_EQ(stats.exported, 5u);
  EXPECT_EQ(exporter->exported(), 5u);
  EXPECT_EQ(stats.queued + stats.dropped_queue_full, 21u);
}

TEST(BatchProcessor, ExportFailuresAreCounted) {
  MemoryTelemetry mt;
  mt.exporter->set_fail(true);
  Tracer tracer = mt.telemetry->tracer();
  for (int i = 0; i < 7; ++i) tracer.start_span(SpanGroup::kJob, "x").end();
  mt.telemetry->flush(10s);
  auto stats = mt.telemetry->stats().processor;
  EXPECT_EQ(stats.export_failed, 7u);
  EXPECT_EQ(stats.exported, 0u);
  mt.exporter->set_fail(false);
  tracer.start_span(SpanGroup::kJob, "y").end();
  mt.telemetry->flush(10s);
  EXPECT_EQ(mt.telemetry->stats().processor.exported, 1u);
}

TEST(BatchProcessor, ExportsInBatchesOfAtMostBatchSize) {
  TelemetryOptions opts;
  opts.max_queue_size = 100;
  opts.max_export_batch_size = 10;
  MemoryTelemetry mt(opts);
  Tracer tracer = mt.telemetry->tracer();
  for (int i = 0; i < 35; ++i) tracer.start_span(SpanGroup::kJob, "x").end();
  EXPECT_EQ(mt.spans().size(), 35u);
  EXPECT_GE(mt.exporter->export_calls(), 4u);
}

TEST(BatchProcessor, ScheduleDelayExportsWithoutFlush) {
  TelemetryOptions opts;
  opts.schedule_delay = 20ms;
  MemoryTelemetry mt(opts);
  mt.telemetry->tracer().start_span(SpanGroup::kJob, "timed").end();
  for (int i = 0; i < 500 && mt.exporter->spans().empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(mt.exporter->spans().size(), 1u);
}

TEST(BatchProcessor, ShutdownWithStuckExporterReturnsWithinTimeout) {
  auto exporter = std::make_shared<GatedExporter>();
  auto telemetry = gated_telemetry(exporter, 8, 1);
  Tracer tracer = telemetry->tracer();
  tracer.start_span(SpanGroup::kJob, "stuck").end();
  exporter->wait_for_first_call();
  for (int i = 0; i < 3; ++i) tracer.start_span(SpanGroup::kJob, "queued").end();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(telemetry->shutdown(100ms));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(telemetry->stats().processor.dropped_at_shutdown, 3u);
  exporter->open();  // let the detached export thread finish
  telemetry.reset();
}

// Process CPU time, for telling a sleeping export thread from a spinning one.
std::chrono::nanoseconds process_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

TEST(BatchProcessor, ZeroScheduleDelayExportsWhenThereIsWorkWithoutSpinning) {
  MemoryTelemetry mt({}, {{"OTEL_BSP_SCHEDULE_DELAY", "0"}});
  ASSERT_EQ(mt.telemetry->config().batch.schedule_delay.count(), 0);
  // Idle: the export thread sleeps. A spinning one would use about as much
  // CPU as the wall time that passed.
  const auto cpu_before = process_cpu_time();
  std::this_thread::sleep_for(300ms);
  EXPECT_LT(process_cpu_time() - cpu_before, 100ms);
  // Work: one span goes out without a flush, soon after it ends.
  mt.telemetry->tracer().start_span(SpanGroup::kJob, "one").end();
  for (int i = 0; i < 200 && mt.exporter->spans().empty(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(mt.exporter->spans().size(), 1u);
  EXPECT_EQ(mt.exporter->spans()[0].name, "one");
}

}  // namespace
}  // namespace lens

namespace lens {
namespace {

// fork() while another thread ends spans all the time (so lens's spin locks
// are often held at the moment of the fork): every child must be able to
// record, shut down and exit at once. Without the fork handlers a child can
// inherit a lock held by a thread it does not have, and its shutdown waits
// out the export timeout for an export thread it does not have either.
TEST(ForkSafety, AChildOfABusyProcessRecordsShutsDownAndExitsAtOnce) {
  MemoryTelemetry mt({}, {{"OTEL_BSP_SCHEDULE_DELAY", "1"}, {"OTEL_BSP_EXPORT_TIMEOUT", "30000"}});
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    Tracer t = mt.telemetry->tracer();
    while (!stop.load()) t.start_span(SpanGroup::kJob, "busy").end();
  });
  int stuck = 0, failed = 0;
  for (int i = 0; i < 20; ++i) {
    const pid_t child = fork();
    if (child == 0) {
      Tracer t = mt.telemetry->tracer();
      for (int k = 0; k < 100; ++k) t.start_span(SpanGroup::kJob, "in-child").end();
      const bool ok = mt.telemetry->shutdown(std::chrono::seconds(30)) &&
                      mt.telemetry->stats().processor.dropped_in_forked_child >= 100;
      _exit(ok ? 0 : 1);
    }
    ASSERT_GT(child, 0);
    int status = 0;
    pid_t done = 0;
    for (int waited_ms = 0; waited_ms < 5000 && done == 0; waited_ms += 5) {
      done = waitpid(child, &status, WNOHANG);
      if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (done == 0) {
      ++stuck;
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  stop = true;
  busy.join();
  EXPECT_EQ(stuck, 0) << "children that did not exit within 5 s";
  EXPECT_EQ(failed, 0);
  // The parent goes on exporting.
  mt.telemetry->tracer().start_span(SpanGroup::kJob, "after").end();
  EXPECT_FALSE(mt.spans().empty());
}

}  // namespace
}  // namespace lens
