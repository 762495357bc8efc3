// Records a fixed number of spans of one case, for counting instructions
// under valgrind's callgrind (bench/count_instructions.py, bench/README.md):
//
//   lens-span-count CASE N
//
// Cases: disabled (a span of a group that is off, one attribute),
// two_ints, int_string, two_ints_link (a span with two attributes; with one
// link), linked (create_linked_span as the schedule opens a receive),
// device (a device-timed span on the CUDA runtime LENS_CUDA_RUNTIME names:
// the simulated one in tests), step_metrics (a step's figures taken and
// recorded as lens-train does with --metrics-port). Spans go through the
// real batch processor to an exporter that discards them, on its own thread,
// at most 2^18 of them a run (the queue holds them all), after a warm-up
// that fills the record pool (count at most 16,384 spans for the steady
// state: recycled records).
// It prints the spans the processor exported and dropped: a count is only
// fair when none was dropped.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "discard_exporter.h"
#include "lens/ids.h"
#include "lens/linked_span.h"
#include "lens/metrics.h"
#include "lens/step_figures.h"
#include "lens/step_metrics.h"
#include "lens/telemetry.h"

namespace {

// The record pool's size (record_pool.cc): the warm-up fills it, and a
// counted run of at most this many spans takes every record from it.
constexpr long kWarmUp = 16384;

std::unique_ptr<lens::Telemetry> make_telemetry(const char* groups) {
  lens::TelemetryOptions opts;
  opts.enabled = true;
  opts.span_groups = groups;
  opts.run_id = "count";
  // The export thread sleeps through the counted loop and exports its spans
  // at the flush: the calling thread's count then does not depend on how
  // the threads interleaved (no record comes back to the pool mid-loop, the
  // export thread is never woken), so it is the same run after run.
  opts.max_queue_size = 1 << 18;
  opts.max_export_batch_size = 1 << 18;
  opts.schedule_delay = std::chrono::hours(1);
  opts.exporter_instance = std::make_shared<lens::bench::DiscardExporter>();
  return lens::Telemetry::create(opts, [](std::string_view key) -> std::optional<std::string> {
    if (key == "LENS_CUDA_RUNTIME")
      if (const char* v = std::getenv("LENS_CUDA_RUNTIME")) return std::string(v);
    return std::nullopt;
  });
}

lens::SpanContext remote_context() {
  lens::SpanContext remote;
  remote.trace_id = lens::IdGenerator::new_trace_id();
  remote.span_id = lens::IdGenerator::new_span_id();
  remote.trace_flags = lens::TraceFlags::kSampled;
  remote.remote = true;
  return remote;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: lens-span-count CASE N\n");
    return 2;
  }
  enum class Case { kDisabled, kTwoInts, kIntString, kTwoIntsLink, kLinked, kDevice, kStepMetrics };
  static const std::pair<const char*, Case> kCases[] = {
      {"disabled", Case::kDisabled},       {"two_ints", Case::kTwoInts},
      {"int_string", Case::kIntString},    {"two_ints_link", Case::kTwoIntsLink},
      {"linked", Case::kLinked},           {"device", Case::kDevice},
      {"step_metrics", Case::kStepMetrics}};
  std::optional<Case> which;
  for (const auto& [name, c] : kCases)
    if (std::strcmp(argv[1], name) == 0) which = c;
  const long n = std::atol(argv[2]);
  if (!which || n < 0) {
    std::fprintf(stderr, "lens-span-count: unknown case '%s' or a negative count\n", argv[1]);
    return 2;
  }
  auto telemetry = make_telemetry(*which == Case::kDisabled ? "default" : "all");
  lens::Tracer tracer = telemetry->tracer();
  const lens::SpanContext remote = remote_context();
  lens::MetricRegistry registry;
  lens::StepMetrics metrics(registry, {{"run", "count"}, {"rank", "0"}});
  lens::StartOptions on_device;
  on_device.device_stream = nullptr;  // the legacy default stream
  // One loop per case, so that a span's count holds nothing of the others.
  const auto record = [&](long n) {
    switch (*which) {
      case Case::kDisabled:
        for (long i = 0; i < n; ++i) {
          lens::Span span = tracer.start_span(lens::SpanGroup::kLayer, "megatron.layer.forward");
          span.set_attribute("dl.layer_id", 3);
        }
        break;
      case Case::kTwoInts:
        for (long i = 0; i < n; ++i) {
          lens::Span span =
              tracer.start_span(lens::SpanGroup::kMicrobatch, "megatron.microbatch.forward");
          span.set_attribute("dl.microbatch_id", static_cast<std::int64_t>(i));
          span.set_attribute("dl.pipeline_parallel.rank", 1);
        }
        break;
      case Case::kIntString:
        for (long i = 0; i < n; ++i) {
          lens::Span span =
              tracer.start_span(lens::SpanGroup::kMicrobatch, "megatron.microbatch.forward");
          span.set_attribute("dl.microbatch_id", static_cast<std::int64_t>(i));
          span.set_attribute("dl.phase", "forward");
        }
        break;
      case Case::kTwoIntsLink:
        for (long i = 0; i < n; ++i) {
          lens::Span span =
              tracer.start_span(lens::SpanGroup::kCommunication, "megatron.pp.recv_forward.linked");
          span.set_attribute("dl.microbatch_id", static_cast<std::int64_t>(i));
          span.set_attribute("dl.pipeline_parallel.rank", 1);
          span.add_link(remote);
        }
        break;
      case Case::kLinked:
        for (long i = 0; i < n; ++i) {
          lens::Span span =
              lens::create_linked_span(tracer, "megatron.pp.recv_forward.linked", remote,
                                       {{"dl.microbatch_id", static_cast<std::int64_t>(i)},
                                        {"dl.pipeline_parallel.rank", 1}});
        }
        break;
      case Case::kDevice:
        for (long i = 0; i < n; ++i) {
          lens::Span span = tracer.start_span(lens::SpanGroup::kMicrobatch,
                                              "megatron.microbatch.forward", on_device);
          span.set_attribute("dl.microbatch_id", static_cast<std::int64_t>(i));
        }
        break;
      case Case::kStepMetrics:
        for (long i = 0; i < n; ++i) {
          for (int f = 1; f < lens::kStepFigureCount; ++f)
            lens::add_step_figure(static_cast<lens::StepFigure>(f), 1000000 + i);
          metrics.record_step(0.05, lens::take_step_figures(), remote, 1);
        }
        break;
    }
  };
  // Warm-up: as many spans as the record pool keeps, exported, so that the
  // counted spans take recycled records as a running job's do.
  record(kWarmUp);
  telemetry->flush(std::chrono::seconds(60));
  record(n);
  telemetry->flush(std::chrono::seconds(60));
  const auto s = telemetry->stats().processor;
  std::printf("exported %llu dropped %llu\n", static_cast<unsigned long long>(s.exported),
              static_cast<unsigned long long>(s.dropped_queue_full));
  return 0;
}
