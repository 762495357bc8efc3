// Spans timed on a device, end to end through Telemetry, against the
// simulated CUDA runtime (tests/device/simulated_cuda_runtime.cc) that this
// executable's tests name in LENS_CUDA_RUNTIME: the runtime is found by
// the same path a real one is. The simulation's device is exact by
// construction, so the spans' device times are checked against where it
// says the device reached them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "lens/tracer.h"
#include "memory_telemetry.h"
#include "simulation.h"
#include "span_clock.h"

namespace lens {
namespace {

using device::testing::monotonic_ns;
using device::testing::Simulation;
using device::testing::stream;
using lens::testing::MemoryTelemetry;

const AttributeValue* find(const SpanRecord& s, std::string_view key) {
  for (const auto& a : s.attributes)
    if (a.key == key) return &a.value;
  return nullptr;
}
std::int64_t int_of(const SpanRecord& s, std::string_view key) {
  const auto* v = find(s, key);
  return v != nullptr && std::holds_alternative<std::int64_t>(*v) ? std::get<std::int64_t>(*v) : -1;
}

// Waits (at most 20 s) until `n` device-timed spans were handed on.
DeviceStats wait_handed_on(const Telemetry& t, std::uint64_t n) {
  for (int i = 0; i < 2000; ++i) {
    const auto d = t.stats().device;
    if (d && d->resolved + d->unresolved + d->refused >= n) return *d;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return t.stats().device.value_or(DeviceStats{});
}

StartOptions on_stream(device::Stream s) {
  StartOptions o;
  o.device_stream = s;
  return o;
}

TEST(DeviceSpan, ItsTimesAreWhereTheDeviceRanTheWorkNotWhereTheHostLaunchedIt) {
  Simulation sim;
  sim.reset(/*delay_ns=*/0, /*drift_ppm=*/0);
  ASSERT_EQ(sim.set_device(3), 0);  // this thread works on device 3
  MemoryTelemetry m;
  const Tracer tracer = m.telemetry->tracer();
  const device::Stream s = stream(11);
  // The device is 200 ms behind the host (work queued before the span), so
  // the span's 5 ms of work runs from 200 to 205 ms after its launch (far
  // more than a loaded machine or a sanitizer makes the host take).
  const std::int64_t before = monotonic_ns();
  sim.launch(s, 200'000'000);
  const std::int64_t after = monotonic_ns();
  {
    Span span = tracer.start_span(SpanGroup::kForwardBackward, "forward", on_stream(s));
    sim.launch(s, 5'000'000);
  }
  const DeviceStats d = wait_handed_on(*m.telemetry, 1);
  EXPECT_EQ(d.timed, 1u);
  EXPECT_EQ(d.resolved, 1u);
  EXPECT_GE(d.anchors, 1u);
  EXPECT_NE(d.runtime.find("LENS_CUDA_RUNTIME"), std::string::npos) << d.runtime;
  EXPECT_EQ(sim.last_set_device(), 3) << "the resolver anchors on the training thread's device";
  const auto spans = m.spans();
  ASSERT_EQ(spans.size(), 1u);
  const SpanRecord& span = spans[0];
  // The duration is the device's, to the microsecond.
  EXPECT_NEAR(static_cast<double>(span.end_time_unix_ns - span.start_time_unix_ns), 5e6, 1e3);
  // Where it starts: 200 ms after the first launch (between `before` and
  // `after`), on the span clock, within the anchor's uncertainty.
  const double slack = static_cast<double>(d.uncertainty_ns) + 1e3;
  EXPECT_GE(static_cast<double>(span.start_time_unix_ns),
            static_cast<double>(detail::unix_ns_from_steady(before + 200'000'000)) - slack);
  EXPECT_LE(static_cast<double>(span.start_time_unix_ns),
            static_cast<double>(detail::unix_ns_from_steady(after + 200'000'000)) + slack);
  // The host's launch times are kept: the host was done long before.
  const std::int64_t host_start = int_of(span, "lens.host.start_unix_ns");
  const std::int64_t host_end = int_of(span, "lens.host.end_unix_ns");
  ASSERT_GT(host_start, 0);
  EXPECT_LT(host_end, span.end_time_unix_ns) << "the host was done before the device";
  EXPECT_GT(span.start_time_unix_ns - host_start, 150'000'000) << "the device started later";
  EXPECT_EQ(int_of(span, "lens.device.uncertainty_ns"), d.uncertainty_ns);
  EXPECT_EQ(find(span, "nemo.span.truncated"), nullptr);
}

TEST(DeviceSpan, AnUnsampledSpanAndASpanWithoutAStreamStayOnTheHost) {
  Simulation sim;
  sim.reset(0, 0);
  TelemetryOptions options;
  options.sampler = Sampler{Sampler::Kind::kAlwaysOff};
  MemoryTelemetry off(options);
  { Span span = off.telemetry->tracer().start_span(SpanGroup::kStep, "s", on_stream(stream(12))); }
  EXPECT_FALSE(off.telemetry->stats().device.has_value()) << "an unsampled span asks for nothing";
  MemoryTelemetry on;
  { Span span = on.telemetry->tracer().start_span(SpanGroup::kStep, "s"); }
  EXPECT_FALSE(on.telemetry->stats().device.has_value());
  ASSERT_EQ(on.spans().size(), 1u);
  EXPECT_EQ(find(on.spans()[0], "lens.host.start_unix_ns"), nullptr);
}

TEST(DeviceSpan, ANeverCompletingSpanIsExportedAtShutdownWithHostTimesTruncatedAndCounted) {
  Simulation sim;
  sim.reset(0, 0);
  MemoryTelemetry m;
  const device::Stream s = stream(13);
  sim.hold(s, true);  // a hung stream: its events never complete
  { Span span = m.telemetry->tracer().start_span(SpanGroup::kStep, "hung", on_stream(s)); }
  // A second span on another stream resolves meanwhile.
  { Span span = m.telemetry->tracer().start_span(SpanGroup::kStep, "fine", on_stream(stream(14))); }
  wait_handed_on(*m.telemetry, 1);
  const auto started = std::chrono::steady_clock::now();
  m.telemetry->shutdown(std::chrono::milliseconds(2000));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5))
      << "a bounded wait for the device";
  const auto d = m.telemetry->stats().device;
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->timed, 2u);
  EXPECT_EQ(d->resolved, 1u);
  EXPECT_EQ(d->unresolved, 1u);
  EXPECT_EQ(m.telemetry->stats().spans_truncated, 1u);
  const auto spans = m.exporter->spans();
  ASSERT_EQ(spans.size(), 2u) << "nothing lost";
  for (const auto& span : spans) {
    const bool hung = span.name == "hung";
    EXPECT_EQ(find(span, "nemo.span.truncated") != nullptr, hung) << span.name;
    EXPECT_EQ(find(span, "lens.device.unresolved") != nullptr, hung) << span.name;
    EXPECT_EQ(find(span, "lens.host.start_unix_ns") != nullptr, !hung) << span.name;
  }
  sim.hold(s, false);
}

TEST(DeviceSpan, PastThePendingBoundASpanKeepsItsHostTimesAndIsCounted) {
  Simulation sim;
  sim.reset(0, 0);
  TelemetryOptions options;
  options.device_max_pending = 2;
  MemoryTelemetry m(options);
  const device::Stream s = stream(15);
  sim.hold(s, true);
  const Tracer tracer = m.telemetry->tracer();
  const std::int64_t before = monotonic_ns();
  for (int i = 0; i < 5; ++i) {
    Span span = tracer.start_span(SpanGroup::kStep, "held", on_stream(s));
  }
  EXPECT_LT(monotonic_ns() - before, 2'000'000'000) << "the training thread never waits";
  auto d = m.telemetry->stats().device;
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->refused, 3u);
  EXPECT_EQ(d->pending_high_water, 2u);
  // The refused ones are exported at once, with their host times.
  const auto now = m.spans();
  EXPECT_EQ(now.size(), 3u);
  for (const auto& span : now) EXPECT_EQ(find(span, "lens.host.start_unix_ns"), nullptr);
  sim.hold(s, false);
  d = wait_handed_on(*m.telemetry, 5);
  EXPECT_EQ(d->resolved, 2u) << "the held ones, once the stream runs";
  EXPECT_EQ(m.spans().size(), 5u);
}

TEST(DeviceSpan, ASpanOpenAtShutdownIsTruncatedAndItsHandleMayOutliveTheTelemetry) {
  Simulation sim;
  sim.reset(0, 0);
  auto m = std::make_unique<MemoryTelemetry>();
  Span span = m->telemetry->tracer().start_span(SpanGroup::kStep, "open", on_stream(stream(16)));
  m->telemetry->shutdown(std::chrono::milliseconds(1000));
  const auto spans = m->exporter->spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_NE(find(spans[0], "nemo.span.truncated"), nullptr);
  m.reset();   // the telemetry is gone
  span.end();  // gives its events back to the process's pool
  EXPECT_FALSE(span.recording());
}

TEST(DeviceSpan, InAForksChildSpansAreTimedOnTheHostAndShutdownDoesNotWait) {
  Simulation sim;
  sim.reset(0, 0);
  MemoryTelemetry m;
  const Tracer tracer = m.telemetry->tracer();
  { Span span = tracer.start_span(SpanGroup::kStep, "parent", on_stream(stream(17))); }
  wait_handed_on(*m.telemetry, 1);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    { Span span = tracer.start_span(SpanGroup::kStep, "child", on_stream(stream(17))); }
    const auto d = m.telemetry->stats().device;
    const bool host_timed = d && d->host_timed == 1 && d->timed == 1;
    m.telemetry->shutdown(std::chrono::milliseconds(100));
    m.telemetry.reset();  // no join of a thread the child does not have
    ::_exit(host_timed ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not hang or crash";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's span was timed on the host";
  { Span span = tracer.start_span(SpanGroup::kStep, "after", on_stream(stream(17))); }
  EXPECT_EQ(wait_handed_on(*m.telemetry, 2).resolved, 2u) << "the parent goes on";
}

}  // namespace
}  // namespace lens
