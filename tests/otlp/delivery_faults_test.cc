// Where every span goes when the backend is unhealthy: a receiver that
// accepts and never answers, one that answers after the request timeout,
// one that resets mid-request, a refused port, and one that goes away for
// part of the run and comes back. In each, the spans ended equal exported +
// spooled + dropped (by reason), exactly; with a spool nothing is dropped,
// the spool holds what it says, and a shutdown ends within its bound.
#include <gtest/gtest.h>

#include <filesystem>

#include "faulty_endpoint.h"
#include "lens/otlp_http_exporter.h"
#include "lens/telemetry.h"
#include "otlp_receiver.h"
#include "test_env.h"
#include "trace_files.h"

namespace lens {
namespace {

using namespace std::chrono_literals;
using testing::Fault;
using testing::FaultyEndpoint;
using testing::OtlpReceiver;
using testing::Reply;
namespace fs = std::filesystem;

// Quick to give up: a request times out after 300 ms, retries back off from
// 50 ms, a batch's attempts end within 1 s.
OtlpHttpOptions quick(const std::string& endpoint, const fs::path& spool) {
  OtlpHttpOptions o;
  o.endpoint = endpoint;
  o.timeout = 300ms;
  o.initial_backoff = 50ms;
  o.max_backoff = 200ms;
  o.retry_deadline = 1s;
  if (!spool.empty()) o.spool_path = spool.string();
  return o;
}

struct Traced {
  std::shared_ptr<OtlpHttpExporter> exporter;
  std::unique_ptr<Telemetry> telemetry;
  std::uint64_t produced = 0;

  explicit Traced(OtlpHttpOptions o) {
    exporter = std::make_shared<OtlpHttpExporter>(std::move(o));
    TelemetryOptions opts;
    opts.enabled = true;
    opts.span_groups = "all";
    opts.run_id = "delivery-faults";
    opts.rank = 0;
    opts.world_size = 1;
    opts.max_export_batch_size = 10;
    opts.exporter_instance = exporter;
    telemetry = Telemetry::create(opts, testing::fake_env({}));
  }
  // Ends `n` spans and waits at most `wait` for them to be handled.
  void spans(int n, std::chrono::milliseconds wait = 5s) {
    Tracer t = telemetry->tracer();
    for (int i = 0; i < n; ++i) t.start_span(SpanGroup::kJob, "work").end();
    produced += static_cast<std::uint64_t>(n);
    telemetry->flush(wait);
  }
  // Shuts down within `bound`; returns how long it took.
  std::chrono::milliseconds shut_down(std::chrono::milliseconds bound) {
    const auto start = std::chrono::steady_clock::now();
    telemetry->shutdown(bound);
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  }
  SpanAccount account() const { return SpanAccount::of(telemetry->stats()); }
};

class DeliveryFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lens-delivery-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    spool_ = dir_ / "spool-rank-0.otlp.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every span counted once, by the processor and by the exporter alike.
  static void expect_accounted(const Traced& run, const SpanAccount& a) {
    EXPECT_EQ(a.ended, run.produced);
    EXPECT_EQ(a.exported + a.spooled + a.dropped(), a.ended) << a.describe();
    const DeliveryStats d = run.exporter->stats();
    EXPECT_EQ(d.spans_delivered, a.exported) << a.describe();
    EXPECT_EQ(d.spans_spooled, a.spooled) << a.describe();
  }
  // With a spool: nothing dropped, and the spool holds exactly the spooled.
  void expect_all_kept(const Traced& run) {
    const SpanAccount a = run.account();
    expect_accounted(run, a);
    EXPECT_EQ(a.dropped(), 0u) << a.describe();
    EXPECT_EQ(testing::read_run(spool_).size(), a.spooled) << a.describe();
    EXPECT_EQ(a.spool_path, spool_.string());
  }

  fs::path dir_, spool_;
};

TEST_F(DeliveryFaults, ASilentBackendIsDetectedAndTheBacklogSpooled) {
  FaultyEndpoint silent(Fault::kSilent);
  Traced run(quick(silent.endpoint(), spool_));
  run.spans(10);  // the first batch waits for its request's timeout, then is spooled
  EXPECT_TRUE(run.exporter->backend_unhealthy());
  const int connections = silent.connections();
  for (int i = 0; i < 5; ++i) run.spans(10, 1s);  // spooled without waiting, but for probes
  EXPECT_LE(silent.connections() - connections, 5);
  EXPECT_LT(run.shut_down(5s), 2s);  // not waiting for a backend known not to answer
  expect_all_kept(run);
  EXPECT_EQ(run.account().exported, 0u);
  EXPECT_EQ(run.exporter->stats().backend_unhealthy, 1u);
}

TEST_F(DeliveryFaults, AHungRequestAtShutdownIsAbandonedAtTheDeadlineAndSpooled) {
  FaultyEndpoint silent(Fault::kSilent);
  OtlpHttpOptions o = quick(silent.endpoint(), spool_);
  o.timeout = 60s;  // the request would wait a minute
  o.retry_deadline = 60s;
  Traced run(o);
  Tracer t = run.telemetry->tracer();
  for (int i = 0; i < 35; ++i) t.start_span(SpanGroup::kJob, "work").end();
  run.produced = 35;
  const auto took = run.shut_down(800ms);
  EXPECT_GE(took, 800ms);
  EXPECT_LT(took, 2500ms);  // the deadline, then the spool
  expect_all_kept(run);
  EXPECT_EQ(run.account().spooled, 35u);
}

TEST_F(DeliveryFaults, WithoutASpoolWhatShutdownCannotDeliverIsDroppedAndSaysHowToKeepIt) {
  FaultyEndpoint silent(Fault::kSilent);
  OtlpHttpOptions o = quick(silent.endpoint(), {});
  o.timeout = 60s;
  o.retry_deadline = 60s;
  Traced run(o);
  Tracer t = run.telemetry->tracer();
  for (int i = 0; i < 25; ++i) t.start_span(SpanGroup::kJob, "work").end();
  run.produced = 25;
  ::testing::internal::CaptureStderr();
  const auto took = run.shut_down(500ms);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(took, 2500ms);
  const SpanAccount a = run.account();
  expect_accounted(run, a);
  EXPECT_EQ(a.dropped_shutdown, 25u) << a.describe();
  EXPECT_NE(err.find("set LENS_SPOOL_DIR"), std::string::npos) << err;
  EXPECT_NE(err.find("25 spans: 0 exported, 0 spooled, 25 dropped (0 queue full, 25 shutdown, "
                     "0 export error), 0 truncated"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(spool_));
}

TEST_F(DeliveryFaults, AnAnswerLaterThanTheTimeoutCountsAsNoAnswer) {
  OtlpReceiver slow([](int) { return Reply{200, "", "", 800}; });
  slow.start();
  Traced run(quick(slow.endpoint(), spool_));
  for (int i = 0; i < 3; ++i) run.spans(10);
  run.shut_down(5s);
  expect_all_kept(run);
  EXPECT_EQ(run.account().exported, 0u);
  EXPECT_EQ(run.account().spooled, 30u);
  slow.stop();
}

TEST_F(DeliveryFaults, AResetMidRequestIsSpooled) {
  FaultyEndpoint reset(Fault::kReset);
  Traced run(quick(reset.endpoint(), spool_));
  for (int i = 0; i < 3; ++i) run.spans(10);
  run.shut_down(5s);
  expect_all_kept(run);
  EXPECT_EQ(run.account().spooled, 30u);
  EXPECT_GT(reset.connections(), 0);
}

TEST_F(DeliveryFaults, ARefusedConnectionIsSpooled) {
  Traced run(quick(testing::refused_endpoint(), spool_));
  for (int i = 0; i < 3; ++i) run.spans(10);
  run.shut_down(5s);
  expect_all_kept(run);
  EXPECT_EQ(run.account().spooled, 30u);
}

TEST_F(DeliveryFaults, ARefusedConnectionWithoutASpoolIsAnExportError) {
  Traced run(quick(testing::refused_endpoint(), {}));
  ::testing::internal::CaptureStderr();
  run.spans(10);
  run.spans(10);
  run.shut_down(5s);
  const std::string err = ::testing::internal::GetCapturedStderr();
  const SpanAccount a = run.account();
  expect_accounted(run, a);
  EXPECT_EQ(a.dropped_export_error, 20u) << a.describe();
  // The advice once, not per batch.
  const auto first = err.find("set LENS_SPOOL_DIR");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("set LENS_SPOOL_DIR", first + 1), std::string::npos) << err;
}

TEST_F(DeliveryFaults, ABackendThatGoesAwayAndComesBackGetsWhatFollows) {
  auto receiver = std::make_unique<OtlpReceiver>();
  const int port = receiver->port();
  receiver->start();
  Traced run(quick(receiver->endpoint(), spool_));
  run.spans(10);
  EXPECT_EQ(receiver->accepted_spans(), 10u);
  receiver->stop();
  receiver.reset();  // away: the port refuses
  run.spans(10);
  run.spans(10);
  EXPECT_TRUE(run.exporter->backend_unhealthy());
  auto back = std::make_unique<OtlpReceiver>([](int) { return Reply{}; }, port);
  back->start();
  // The next probe is due within the longest backoff (200 ms): delivery
  // resumes with the first batch after it.
  std::this_thread::sleep_for(300ms);
  run.spans(10);
  EXPECT_FALSE(run.exporter->backend_unhealthy());
  run.spans(10);
  run.shut_down(5s);
  expect_all_kept(run);
  const SpanAccount a = run.account();
  EXPECT_EQ(a.spooled, 20u) << a.describe();
  EXPECT_EQ(a.exported, 30u) << a.describe();
  EXPECT_EQ(back->accepted_spans(), 20u);
  back->stop();
}

}  // namespace
}  // namespace lens
