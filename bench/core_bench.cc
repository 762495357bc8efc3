// Costs of the core hot paths, and a "floor" to compare them with.
//
//   build/bin/lens_core_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//
// Spans go through the real batch processor into an exporter that discards
// them, on its own thread, as in a traced job. The "dropped" counter says how
// many spans the queue could not take (they must be ~0 for a fair figure).
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstring>

#include "discard_exporter.h"
#include "lens/carrier.h"
#include "lens/ids.h"
#include "lens/metrics.h"
#include "lens/step_figures.h"
#include "lens/step_metrics.h"
#include "lens/telemetry.h"
#include "lens/trace_context.h"

namespace {

using lens::bench::DiscardExporter;

std::unique_ptr<lens::Telemetry> make_telemetry(const char* groups, bool hold = false) {
  lens::TelemetryOptions opts;
  if (hold) {
    opts.tail_selection = true;
    opts.tail_hold_steps = 64;
    opts.tail_hold_mb = 1024;
  }
  opts.enabled = true;
  opts.span_groups = groups;
  opts.run_id = "bench";
  opts.max_queue_size = 1 << 16;
  opts.max_export_batch_size = 512;
  opts.exporter_instance = std::make_shared<DiscardExporter>();
  return lens::Telemetry::create(opts, [](std::string_view) { return std::nullopt; });
}

void report_drops(benchmark::State& state, lens::Telemetry& t) {
  t.flush(std::chrono::seconds(10));
  auto s = t.stats().processor;
  state.counters["dropped"] = static_cast<double>(s.dropped_queue_full);
  state.counters["exported"] = static_cast<double>(s.exported);
}

void BM_SpanDisabledGroup(benchmark::State& state) {
  auto telemetry = make_telemetry("default");
  lens::Tracer tracer = telemetry->tracer();
  for (auto _ : state) {
    lens::Span span = tracer.start_span(lens::SpanGroup::kLayer, "megatron.layer.forward");
    span.set_attribute("dl.layer_id", 3);
    benchmark::DoNotOptimize(span);
  }
}
BENCHMARK(BM_SpanDisabledGroup);

// A span of a group that is off, counting toward a step figure (a
// microbatch's compute), with step figures off (arg 0: what it costs every
// job) and on (arg 1: two clock reads and the thread's total).
void BM_SpanDisabledGroupStepFigures(benchmark::State& state) {
  auto telemetry = make_telemetry("default");
  lens::Tracer tracer = telemetry->tracer();
  lens::set_step_figures(state.range(0) != 0);
  for (auto _ : state) {
    lens::Span span =
        tracer.start_span(lens::SpanGroup::kMicrobatch, "megatron.microbatch.forward");
    span.set_attribute("dl.microbatch_id", 3);
    benchmark::DoNotOptimize(span);
  }
  lens::set_step_figures(false);
  benchmark::DoNotOptimize(lens::take_step_figures());
}
BENCHMARK(BM_SpanDisabledGroupStepFigures)->Arg(0)->Arg(1);

void BM_SpanTwoAttributes(benchmark::State& state) {
  auto telemetry = make_telemetry("all");
  lens::Tracer tracer = telemetry->tracer();
  std::int64_t i = 0;
  for (auto _ : state) {
    lens::Span span =
        tracer.start_span(lens::SpanGroup::kMicrobatch, "megatron.microbatch.forward");
    span.set_attribute("dl.microbatch_id", i++);
    span.set_attribute("dl.pipeline_parallel.rank", 1);
  }
  report_drops(state, *telemetry);
}
BENCHMARK(BM_SpanTwoAttributes);

void BM_SpanTwoAttributesOneLink(benchmark::State& state) {
  auto telemetry = make_telemetry("all");
  lens::Tracer tracer = telemetry->tracer();
  lens::SpanContext remote;
  remote.trace_id = lens::IdGenerator::new_trace_id();
  remote.span_id = lens::IdGenerator::new_span_id();
  remote.trace_flags = lens::TraceFlags::kSampled;
  remote.remote = true;
  std::int64_t i = 0;
  for (auto _ : state) {
    lens::Span span =
        tracer.start_span(lens::SpanGroup::kCommunication, "megatron.pp.recv_forward.linked");
    span.set_attribute("dl.microbatch_id", i++);
    span.set_attribute("dl.pipeline_parallel.rank", 1);
    span.add_link(remote);
  }
  report_drops(state, *telemetry);
}
BENCHMARK(BM_SpanTwoAttributesOneLink);

// Tail selection (docs/tail-selection.md): what the training thread spends
// on one step of 32 spans with its steps held (arg 1) or not (arg 0): the
// step's hold_step, its spans, and every 10 steps the settlement (one kept).
// The hold's sorting and parking run on the export thread.
void BM_StepHeld(benchmark::State& state) {
  auto telemetry = make_telemetry("all", state.range(0) != 0);
  lens::Tracer tracer = telemetry->tracer();
  std::uint64_t step = 0;
  std::vector<std::uint64_t> keep, drop;
  for (auto _ : state) {
    lens::Span root = tracer.start_span(lens::SpanGroup::kStep, "megatron.train_step");
    telemetry->hold_step(step, root.context());
    {
      lens::CurrentSpanScope scope(root);
      for (int i = 0; i < 31; ++i) {
        lens::Span span = tracer.start_span(lens::SpanGroup::kMicrobatch, "forward");
        span.set_attribute("dl.microbatch_id", i);
      }
    }
    root.end();
    (step % 10 == 0 ? keep : drop).push_back(step);
    if (++step % 10 == 0) {
      telemetry->settle_steps(keep, drop);
      keep.clear();
      drop.clear();
    }
  }
  report_drops(state, *telemetry);
}
BENCHMARK(BM_StepHeld)->Arg(0)->Arg(1);

// What live metrics add to a training step (docs/metrics.md): taking the
// thread's step figures and recording them, as lens-train does once a step
// (six histograms, an exemplar each for a sampled step, and a counter).
void BM_MetricsStepRecord(benchmark::State& state) {
  lens::MetricRegistry registry;
  lens::StepMetrics metrics(
      registry,
      {{"run", "bench"}, {"rank", "0"}, {"stage", "0"}, {"replica", "0"}, {"tensor", "0"}});
  lens::SpanContext sampled;
  sampled.trace_id = lens::IdGenerator::new_trace_id();
  sampled.span_id = lens::IdGenerator::new_span_id();
  sampled.trace_flags = lens::TraceFlags::kSampled;
  double t = 0.04;
  for (auto _ : state) {
    for (int f = 1; f < lens::kStepFigureCount; ++f)
      lens::add_step_figure(static_cast<lens::StepFigure>(f), static_cast<std::int64_t>(t * 1e8));
    metrics.record_step(t, lens::take_step_figures(), sampled, 1);
    t = t < 1 ? t * 1.1 : 0.04;
  }
}
BENCHMARK(BM_MetricsStepRecord);

void BM_TraceparentFormatParse(benchmark::State& state) {
  lens::SpanContext ctx;
  ctx.trace_id = lens::IdGenerator::new_trace_id();
  ctx.span_id = lens::IdGenerator::new_span_id();
  ctx.trace_flags = lens::TraceFlags::kSampled;
  for (auto _ : state) {
    std::string header = lens::format_traceparent(ctx);
    auto parsed = lens::parse_traceparent(header);
    benchmark::DoNotOptimize(parsed);
  }
}
BENCHMARK(BM_TraceparentFormatParse);

// What broadcast_trace_context adds around the collective: encoding the
// step's frame on the source and decoding (all checks) on a receiver.
void BM_CarrierEncodeDecode(benchmark::State& state) {
  lens::StepCarrier carrier;
  carrier.context.trace_id = lens::IdGenerator::new_trace_id();
  carrier.context.span_id = lens::IdGenerator::new_span_id();
  carrier.context.trace_flags = lens::TraceFlags::kSampled;
  carrier.step = 12345;
  for (auto _ : state) {
    const lens::CarrierFrame frame = lens::encode_carrier(carrier);
    auto decoded = lens::decode_carrier(frame);
    benchmark::DoNotOptimize(decoded);
    carrier.step++;
  }
}
BENCHMARK(BM_CarrierEncodeDecode);

// The floor: what any span recorder must at least do. Two monotonic clock
// reads and a 64-byte record written into a preallocated per-thread ring.
void BM_FloorTwoClockReadsRingWrite(benchmark::State& state) {
  struct alignas(64) Slot {
    std::array<char, 64> bytes;
  };
  thread_local std::array<Slot, 4096> ring;
  std::size_t next = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now().time_since_epoch().count();
    const auto end = std::chrono::steady_clock::now().time_since_epoch().count();
    Slot& slot = ring[next++ & (ring.size() - 1)];
    std::memcpy(slot.bytes.data(), &start, sizeof start);
    std::memcpy(slot.bytes.data() + 8, &end, sizeof end);
    std::memset(slot.bytes.data() + 16, 0x5a, 48);
    benchmark::DoNotOptimize(slot);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_FloorTwoClockReadsRingWrite);

}  // namespace

BENCHMARK_MAIN();
