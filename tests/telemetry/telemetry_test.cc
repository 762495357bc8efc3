#include "lens/telemetry.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "lens/error.h"
#include "memory_telemetry.h"

namespace lens {
namespace {

using namespace std::chrono_literals;
using testing::fake_env;
using testing::MemoryTelemetry;

TEST(Telemetry, DisabledGivesNull) {
  EXPECT_EQ(Telemetry::create({}, fake_env({})), nullptr);
  EXPECT_EQ(Telemetry::create({}, fake_env({{"MEGATRON_OTEL_ENABLED", "0"}})), nullptr);
  EXPECT_EQ(Telemetry::create(
                {}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"}, {"OTEL_SDK_DISABLED", "true"}})),
            nullptr);
}

TEST(Telemetry, InvalidConfigurationFailsCreate) {
  EXPECT_THROW(Telemetry::create({}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"},
                                               {"MEGATRON_OTEL_SPAN_GROUPS", "nope"}})),
               ConfigError);
}

TEST(Telemetry, ResourceCarriesServiceRunAndRank) {
  TelemetryOptions opts;
  opts.rank = 1;
  opts.world_size = 4;
  MemoryTelemetry mt(opts, {{"OTEL_RESOURCE_ATTRIBUTES", "team=infra,host.name=override"}});
  const Resource& r = mt.telemetry->resource();
  EXPECT_EQ(r.find_string("service.name"), "megatron-lm");
  EXPECT_EQ(r.find_string("nemo.run.id"), "test-run");
  EXPECT_EQ(std::get<std::int64_t>(*r.find("dl.rank")), 1);
  EXPECT_EQ(std::get<std::int64_t>(*r.find("dl.world_size")), 4);
  EXPECT_EQ(r.find_string("service.instance.id"), "test-run-rank1");
  EXPECT_EQ(r.find_string("team"), "infra");
  EXPECT_EQ(r.find_string("host.name"), "override");
  EXPECT_EQ(r.find_string("telemetry.sdk.name"), "lens");
  mt.telemetry->tracer().start_span(SpanGroup::kJob, "x").end();
  mt.spans();
  EXPECT_EQ(mt.exporter->resource().find_string("nemo.run.id"), "test-run");
}

TEST(Telemetry, OpenSpansAreTruncatedAtShutdown) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  Span open_job = tracer.start_span(SpanGroup::kJob, "job");
  open_job.set_attribute("k", 1);
  Span open_step;
  {
    CurrentSpanScope scope(open_job);
    open_step = tracer.start_span(SpanGroup::kStep, "step");
  }
  tracer.start_span(SpanGroup::kStep, "finished").end();
  ASSERT_TRUE(mt.telemetry->shutdown(10s));
  EXPECT_EQ(mt.telemetry->stats().spans_truncated, 2u);
  // Using and ending the handles after shutdown is harmless and exports nothing more.
  open_job.set_attribute("after", 2);
  open_job.end();
  open_step.end();
  auto spans = mt.exporter->spans();
  ASSERT_EQ(spans.size(), 3u);
  int truncated = 0;
  for (const auto& s : spans) {
    const auto* flag = find_attribute(s.attributes, "nemo.span.truncated");
    if (s.name == "finished") {
      EXPECT_EQ(flag, nullptr);
      continue;
    }
    ASSERT_NE(flag, nullptr) << s.name;
    EXPECT_TRUE(std::get<bool>(*flag));
    EXPECT_GE(s.end_time_unix_ns, s.start_time_unix_ns);
    ++truncated;
  }
  EXPECT_EQ(truncated, 2);
}

TEST(Telemetry, MarkOpenSpansRecordsTheFailureOnWhatIsOpen) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  Span step = tracer.start_span(SpanGroup::kStep, "megatron.train_step");
  step.set_attribute("dl.step", 7);
  CurrentSpanScope scope(step);
  Span recv = tracer.start_span(SpanGroup::kCommunication, "megatron.p2p.recv_forward");
  tracer.start_span(SpanGroup::kStep, "already.ended").end();
  auto lines = mt.telemetry->mark_open_spans("lens.failure", "peer 1 lost");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("megatron.train_step dl.step=7 (open ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("megatron.p2p.recv_forward (open ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("last span ended: already.ended (ended ", 0), 0u) << lines[2];
  recv.end();
  step.end();
  int marked = 0;
  for (const auto& s : mt.spans()) {
    for (const auto& e : s.events) {
      if (e.name != "lens.failure") continue;
      ++marked;
      EXPECT_EQ(std::get<std::string>(e.attributes.at(0).value), "peer 1 lost");
      ASSERT_EQ(e.attributes.size(), 2u);
      EXPECT_EQ(e.attributes[1].key, "lens.last_ended");
      EXPECT_EQ(std::get<std::string>(e.attributes[1].value).rfind("already.ended (ended ", 0), 0u);
    }
    if (s.name == "already.ended") {
      EXPECT_TRUE(s.events.empty());
    }
  }
  EXPECT_EQ(marked, 2);
}

TEST(Telemetry, MarkOpenSpansWithNothingEndedYetSaysSo) {
  MemoryTelemetry mt;
  Span job = mt.telemetry->tracer().start_span(SpanGroup::kJob, "megatron.job");
  auto lines = mt.telemetry->mark_open_spans("lens.failure", "store lost");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "last span ended: (none)");
  job.end();
}

TEST(Telemetry, SpansAfterShutdownAreNotRecorded) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  mt.telemetry->shutdown(10s);
  Span s = tracer.start_span(SpanGroup::kJob, "late");
  EXPECT_FALSE(s.recording());
}

TEST(Telemetry, WithoutACudaRuntimeADeviceTimedSpanIsTimedOnTheHostAndCounted) {
  if (std::getenv("LENS_CUDA_RUNTIME") != nullptr) GTEST_SKIP() << "a runtime is named";
  MemoryTelemetry m;
  EXPECT_FALSE(m.telemetry->stats().device.has_value()) << "nothing until a span asks";
  StartOptions options;
  options.device_stream = nullptr;  // the legacy default stream
  const auto before = m.telemetry->now_unix_ns();
  { Span span = m.telemetry->tracer().start_span(SpanGroup::kStep, "forward", options); }
  if (m.telemetry->stats().device->timed > 0)
    GTEST_SKIP() << "this machine times on a GPU: " << m.telemetry->stats().device->runtime;
  const auto spans = m.spans();
  ASSERT_EQ(spans.size(), 1u) << "exported at once, as a host span";
  EXPECT_GE(spans[0].start_time_unix_ns, before);
  for (const auto& a : spans[0].attributes) EXPECT_NE(a.key, "lens.host.start_unix_ns");
  const auto d = m.telemetry->stats().device;
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->host_timed, 1u);
  EXPECT_EQ(d->timed, 0u);
  // No GPU here (CI never has one): the account says why the span stayed
  // on the host, whether the CUDA libraries are installed or not.
  EXPECT_TRUE(d->runtime.find("no CUDA runtime") != std::string::npos ||
              d->runtime.find("; no device: CUDA status") != std::string::npos)
      << d->runtime;
  EXPECT_EQ(d->anchors, 0u);
}

TEST(Telemetry, SpanGroupsCanChangeAtRuntime) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  EXPECT_TRUE(tracer.enabled(SpanGroup::kLayer));
  mt.telemetry->set_span_groups(SpanGroupSet::default_preset());
  EXPECT_FALSE(tracer.enabled(SpanGroup::kLayer));
  EXPECT_FALSE(mt.telemetry->enabled(SpanGroup::kLayer));
  EXPECT_TRUE(mt.telemetry->enabled(SpanGroup::kJob));
}

TEST(Telemetry, SameScopeNameGivesSameScope) {
  MemoryTelemetry mt;
  EXPECT_EQ(mt.telemetry->tracer("a").scope(), mt.telemetry->tracer("a").scope());
  EXPECT_NE(mt.telemetry->tracer("a").scope(), mt.telemetry->tracer("b").scope());
}

TEST(Telemetry, GlobalInitAndShutdown) {
  EXPECT_EQ(get_telemetry(), nullptr);
  TelemetryOptions opts;
  opts.enabled = true;
  opts.exporter = "none";
  Telemetry* t = init(opts);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(get_telemetry(), t);
  EXPECT_TRUE(shutdown_telemetry(5s));
  EXPECT_EQ(get_telemetry(), nullptr);
}

TEST(Telemetry, DefaultFileExporterWritesUnderTraceDirAndRunId) {
  auto dir = std::filesystem::temp_directory_path() /
             ("lens-telemetry-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    auto t = Telemetry::create({}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"},
                                             {"MEGATRON_OTEL_RUN_ID", "run7"},
                                             {"LENS_TRACE_DIR", dir.string()},
                                             {"RANK", "3"},
                                             {"WORLD_SIZE", "4"}}));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->trace_file(), (dir / "run7" / "rank-3.otlp.jsonl").string());
    t->tracer().start_span(SpanGroup::kJob, "job").end();
  }
  std::ifstream in(dir / "run7" / "rank-3.otlp.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_NE(line.find("\"name\":\"job\""), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Telemetry, UnwritableTraceDirFailsAtStartup) {
  auto file =
      std::filesystem::temp_directory_path() / ("lens-not-a-dir-" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  try {
    Telemetry::create(
        {}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"}, {"LENS_TRACE_DIR", file.string()}}));
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  std::filesystem::remove(file);
}

// Forks 20 times while `busy` runs in another thread; each child runs
// `in_child` and exits 0. Returns how many children did not exit within
// 5 s (killed) and how many exited otherwise.
struct ForkOutcome {
  int stuck = 0, failed = 0;
};
ForkOutcome fork_while(const std::function<void(const std::atomic<bool>&)>& busy,
                       const std::function<bool()>& in_child) {
  std::atomic<bool> stop{false};
  std::thread other([&] { busy(stop); });
  ForkOutcome outcome;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const pid_t child = ::fork();
    if (child == 0) ::_exit(in_child() ? 0 : 1);
    if (child < 0) {
      ++outcome.failed;
      continue;
    }
    int status = 0;
    pid_t done = 0;
    for (int waited_ms = 0; waited_ms < 5000 && done == 0; waited_ms += 5) {
      done = ::waitpid(child, &status, WNOHANG);
      if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (done == 0) {
      ++outcome.stuck;
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++outcome.failed;
    }
  }
  stop = true;
  other.join();
  return outcome;
}

// Another thread sets the process's telemetry up and shuts it down all the
// time (so its lock, and each telemetry's shutdown lock, are often held at
// the fork): every child can still shut down what it inherited. (It starts
// no telemetry of its own: ThreadSanitizer cannot start a thread in the
// child of a multi-threaded process.)
TEST(TelemetryFork, AChildOfAThreadInInitOrShutdownIsNeverStuck) {
  TelemetryOptions opts;
  opts.enabled = true;
  opts.exporter = "none";
  const ForkOutcome o = fork_while(
      [&](const std::atomic<bool>& stop) {
        while (!stop.load()) {
          init(opts);
          shutdown_telemetry(1s);
        }
      },
      [&] {
        if (Telemetry* t = get_telemetry())
          t->tracer("in-child").start_span(SpanGroup::kJob, "child").end();
        return shutdown_telemetry(1s) && get_telemetry() == nullptr;
      });
  EXPECT_EQ(o.stuck, 0) << "children that did not exit within 5 s";
  EXPECT_EQ(o.failed, 0);
  shutdown_telemetry(1s);
}

// Another thread names scopes all the time: a child can name its own.
TEST(TelemetryFork, AChildOfAThreadNamingScopesIsNeverStuck) {
  MemoryTelemetry mt;
  const ForkOutcome o = fork_while(
      [&](const std::atomic<bool>& stop) {
        for (int i = 0; !stop.load(); ++i) mt.telemetry->tracer("scope-" + std::to_string(i % 64));
      },
      [&] {
        mt.telemetry->tracer("in-child").start_span(SpanGroup::kJob, "child").end();
        return mt.telemetry->shutdown(1s);
      });
  EXPECT_EQ(o.stuck, 0) << "children that did not exit within 5 s";
  EXPECT_EQ(o.failed, 0);
}

}  // namespace
}  // namespace lens
