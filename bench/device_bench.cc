// What a device-timed span costs the training thread, against a host span
// of the same shape, and the resolver's CPU per span: with the simulated
// CUDA runtime (tests/device/simulated_cuda_runtime.cc), loaded by the
// same path a real one is (LENS_CUDA_RUNTIME; this program names the
// simulated one unless the variable is set).
//
//   build/bin/lens_device_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//
// The simulated runtime's calls take a mutex and a map lookup, about what
// the real cudaEventRecord costs on the host (a few hundred ns to a couple
// of us); the figure that matters is the difference between the two spans.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "discard_exporter.h"
#include "lens/telemetry.h"

namespace {

using lens::bench::DiscardExporter;

std::unique_ptr<lens::Telemetry> make_telemetry() {
  lens::TelemetryOptions opts;
  opts.enabled = true;
  opts.span_groups = "all";
  opts.run_id = "bench";
  opts.max_queue_size = 1 << 16;
  opts.max_export_batch_size = 512;
  opts.device_max_pending = 8192;
  opts.exporter_instance = std::make_shared<DiscardExporter>();
  return lens::Telemetry::create(opts, [](std::string_view) { return std::nullopt; });
}

void spans(benchmark::State& state, bool on_device) {
  auto telemetry = make_telemetry();
  lens::Tracer tracer = telemetry->tracer();
  lens::StartOptions options;
  if (on_device) options.device_stream = reinterpret_cast<void*>(0x5);
  std::uint64_t started = 0;
  for (auto _ : state) {
    lens::Span span =
        tracer.start_span(lens::SpanGroup::kMicrobatch, "megatron.microbatch.forward", options);
    span.set_attribute("dl.microbatch_id", 3);
    span.set_attribute("dl.pipeline_parallel.rank", 1);
    span.end();
    // A training step makes a few hundred device spans, then the resolver
    // catches up: every 1000 spans the loop waits for it, untimed, so the
    // figure is a span's cost, not a backlog's (the events run out).
    if (on_device && ++started % 1000 == 0) {
      state.PauseTiming();
      for (;;) {
        const auto d = telemetry->stats().device;
        if (!d || d->resolved + d->refused + d->host_timed >= started) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      state.ResumeTiming();
    }
  }
  // After the loop: not timed.
  telemetry->shutdown(std::chrono::seconds(30));
  const lens::TelemetryStats s = telemetry->stats();
  state.counters["dropped"] = static_cast<double>(s.processor.dropped_queue_full);
  if (s.device) {
    state.counters["resolved"] = static_cast<double>(s.device->resolved);
    state.counters["refused"] = static_cast<double>(s.device->refused);
    state.counters["host_timed"] = static_cast<double>(s.device->host_timed);
    state.counters["resolver_ns_per_span"] = s.device->resolved > 0
                                                 ? static_cast<double>(s.device->resolver_cpu_ns) /
                                                       static_cast<double>(s.device->resolved)
                                                 : 0;
  }
}

void BM_HostSpan(benchmark::State& state) { spans(state, false); }
BENCHMARK(BM_HostSpan);

void BM_DeviceSpan(benchmark::State& state) { spans(state, true); }
BENCHMARK(BM_DeviceSpan);

}  // namespace

int main(int argc, char** argv) {
  ::setenv("LENS_CUDA_RUNTIME", LENS_SIMULATED_CUDA_RUNTIME, /*overwrite=*/0);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
