// lens-scale-sim: what a job shape costs in spans, bytes and traces, by
// running the real step protocol and span emission with many logical ranks.
//
//   lens-scale-sim --tp 8 --pp 16 --dp 64 --microbatches 24 --step-ms 2000
//                  --groups per_step,microbatch --scope pipeline --filter dp=0
//                  --budget 6 --max-ranks 1024 --steps 3
//
// Every logical rank is a thread with its own Telemetry (an exporter that
// counts spans and the bytes of their OTLP/protobuf encoding and records
// which trace each span is in), its coordinates and the export filter. Per
// step it runs StepScope (the broadcast, over an in-process communicator:
// the world, or its pipeline group in `pipeline` scope) and emits the spans
// the reference trainer emits for Megatron's 1F1B schedule: the step span,
// forward_backward, a forward and a backward span per microbatch, the p2p
// spans of each transfer, the linked spans of the warmup and pre-1F1B
// receives, the optimizer span and the data-parallel all-reduce, and with
// tensor parallelism (--tp > 1 and --layers L) the TP collectives Megatron
// runs in each pass: two all-reduces per transformer layer of the stage in
// the forward (attention's and the MLP's row-parallel output) and two in
// the backward (their column-parallel inputs' gradients), spans
// megatron.tp.all_reduce in the communication group as lens-train records
// them. Compute is replaced by nothing.
//
// When the job has more ranks than --max-ranks, the simulation keeps every
// pipeline stage and shrinks the data- and tensor-parallel sizes (ranks of
// one pipeline stage emit the same spans whatever their dp/tp index, except
// where the filter tells them apart, which the simulation keeps), then
// scales the counts back to the job's size; the report says so.
//
// --trace-dir DIR writes every logical rank's spans to DIR/rank-<r>.otlp.jsonl
// (lens's layout) instead of counting them: a run of the job's shape for
// the readers (bench/mpi_analyze_bench.sh).
//
// Sampling: the step budget keeps at most N steps per minute on the source;
// at --step-ms per step that is min(1, N * step_s / 60) of the steps (the
// rule StepBudget implements and the core tests check); the collector's
// load is computed from it.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lens/error.h"
#include "lens/file_exporter.h"
#include "lens/in_process_communicator.h"
#include "lens/otlp_proto.h"
#include "lens/step_trace.h"
#include "lens/telemetry.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  int tp = 1, pp = 4, dp = 2, microbatches = 8, steps = 3;
  int layers = 0;  // transformer layers of the model (TP collectives); 0: none
  double step_ms = 1000;
  std::string groups = "per_step,microbatch";
  lens::TraceScope scope = lens::TraceScope::kWorld;
  std::string filter;
  std::string trace_dir;  // --trace-dir: each logical rank's spans written there
  std::uint32_t budget = 0;
  int max_ranks = 512;
};

// Counts what a collector would receive from all logical ranks.
struct Collector {
  std::mutex mu;
  std::map<std::string, std::uint64_t> spans_per_trace;
  std::atomic<std::uint64_t> spans{0}, bytes{0};
};

class CountingExporter : public lens::SpanExporter {
 public:
  explicit CountingExporter(Collector* c) : c_(c) {}
  lens::ExportResult export_spans(const lens::Resource& resource,
                                  std::span<const lens::SpanRecord* const> spans) override {
    buffer_.clear();
    lens::append_otlp_proto(buffer_, resource, spans);
    c_->bytes += buffer_.size();
    c_->spans += spans.size();
    std::lock_guard<std::mutex> lock(c_->mu);
    for (const auto* s : spans) ++c_->spans_per_trace[s->context.trace_id.to_hex()];
    return lens::ExportResult::kSuccess;
  }

 private:
  Collector* c_;
  std::string buffer_;
};

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "lens-scale-sim: %s\n"
               "usage: lens-scale-sim [--tp N] [--pp N] [--dp N] [--microbatches N] [--steps N]\n"
               "         [--step-ms MS] [--groups SPEC] [--scope world|pipeline] [--filter SPEC]\n"
               "         [--budget STEPS_PER_MINUTE] [--max-ranks N] [--layers L]\n"
               "         [--trace-dir DIR]\n",
               why.c_str());
  std::exit(2);
}

long number(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi)
    usage(flag + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return n;
}

Shape parse(int argc, char** argv) {
  Shape s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("missing value for " + a);
    const std::string v = argv[++i];
    if (a == "--tp")
      s.tp = static_cast<int>(number(a, v, 1, 1024));
    else if (a == "--pp")
      s.pp = static_cast<int>(number(a, v, 1, 1024));
    else if (a == "--dp")
      s.dp = static_cast<int>(number(a, v, 1, 65536));
    else if (a == "--microbatches")
      s.microbatches = static_cast<int>(number(a, v, 1, 4096));
    else if (a == "--steps")
      s.steps = static_cast<int>(number(a, v, 1, 1000));
    else if (a == "--step-ms")
      s.step_ms = static_cast<double>(number(a, v, 1, 86400000));
    else if (a == "--groups")
      s.groups = v;
    else if (a == "--scope") {
      if (v == "world")
        s.scope = lens::TraceScope::kWorld;
      else if (v == "pipeline")
        s.scope = lens::TraceScope::kPipeline;
      else
        usage("--scope must be world or pipeline");
    } else if (a == "--filter")
      s.filter = v;
    else if (a == "--budget")
      s.budget = static_cast<std::uint32_t>(number(a, v, 0, 1000000));
    else if (a == "--layers")
      s.layers = static_cast<int>(number(a, v, 0, 100000));
    else if (a == "--trace-dir")
      s.trace_dir = v;
    else if (a == "--max-ranks")
      s.max_ranks = static_cast<int>(number(a, v, 1, 8192));
    else
      usage("unknown option " + a);
  }
  return s;
}

// Smallest dp/tp (keeping the values the filter names) that fit max_ranks.
std::pair<int, int> simulated_dp_tp(const Shape& s, const lens::ExportFilter& f) {
  int dp = s.dp, tp = s.tp;
  const int min_dp = std::min(s.dp, f.dp ? *f.dp + 2 : 2);
  const int min_tp = std::min(s.tp, f.tp ? *f.tp + 2 : 1);
  while (s.pp * dp * tp > s.max_ranks && (tp > min_tp || dp > min_dp)) {
    if (tp > min_tp)
      tp = std::max(min_tp, tp / 2);
    else
      dp = std::max(min_dp, dp / 2);
  }
  return {dp, tp};
}

}  // namespace

int main(int argc, char** argv) {
  const Shape shape = parse(argc, argv);
  lens::ExportFilter filter;
  try {
    filter = lens::ExportFilter::parse(shape.filter.empty() ? "" : shape.filter, "--filter");
  } catch (const lens::ConfigError& e) {
    if (!shape.filter.empty()) usage(e.what());
  }
  lens::SpanGroupSet groups;
  try {
    groups = lens::SpanGroupSet::parse(shape.groups, "--groups");
  } catch (const lens::ConfigError& e) {
    usage(e.what());
  }
  const auto [dp, tp] = simulated_dp_tp(shape, filter);
  const int ranks = shape.pp * dp * tp;
  const long job_ranks = static_cast<long>(shape.pp) * shape.dp * shape.tp;

  Collector collector;
  lens::InProcessGroup world(ranks);
  std::vector<std::unique_ptr<lens::InProcessGroup>> pipelines;  // by (dp, tp)
  for (int i = 0; i < dp * tp; ++i)
    pipelines.push_back(std::make_unique<lens::InProcessGroup>(shape.pp));
  // Per rank and step: wall time in StepScope (waiting for the slowest peer
  // included) and the CPU time this rank spent in it.
  std::vector<std::vector<double>> protocol_us(static_cast<std::size_t>(ranks));
  std::vector<std::vector<double>> protocol_cpu_us(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  // Megatron's order: tp fastest, then dp, then pp.
  for (int r = 0; r < ranks; ++r) {
    const int t = r % tp, d = (r / tp) % dp, p = r / (tp * dp);
    auto comm = shape.scope == lens::TraceScope::kPipeline
                    ? pipelines[static_cast<std::size_t>(d * tp + t)]->communicator(p)
                    : world.communicator(r);
    threads.emplace_back([&, r, t, d, p, comm = std::move(comm)]() mutable {
      lens::TelemetryOptions o;
      o.enabled = true;
      o.span_groups = groups.to_spec();
      o.rank = r;
      o.world_size = ranks;
      o.run_id = "scale-sim";
      o.run_key = 1;
      o.trace_scope = shape.scope;
      o.export_filter = filter;
      o.coordinates = {p, d, t};
      o.max_queue_size = 8192;
      if (shape.trace_dir.empty())
        o.exporter_instance = std::make_shared<CountingExporter>(&collector);
      else  // a run in lens's layout (bench/mpi_analyze_bench.sh), not counted
        o.exporter_instance = std::make_shared<lens::OtlpJsonFileExporter>(
            std::filesystem::path(shape.trace_dir) / ("rank-" + std::to_string(r) + ".otlp.jsonl"));
      auto telemetry = lens::Telemetry::create(o, [](std::string_view) { return std::nullopt; });
      lens::StepTraceOptions so;
      so.pipeline_parallel_size = shape.pp;
      so.pipeline_rank = p;
      lens::StepTrace trace(telemetry.get(), comm.get(), so);
      const lens::Tracer& tr = trace.tracer();
      using lens::SpanGroup;
      const bool first = p == 0, last = p == shape.pp - 1;
      const int m = shape.microbatches;
      const int warmup = std::min(shape.pp - p - 1, m);
      // A span as the reference trainer records it (microbatch id, stage).
      auto emit = [&](lens::SpanGroup g, const char* name, int mb) {
        lens::Span s = tr.start_span(g, name);
        s.set_attribute("dl.microbatch_id", std::int64_t{mb});
        s.set_attribute("dl.pipeline_parallel.rank", std::int64_t{p});
        s.end();
      };
      // The TP collectives of one pass: two per transformer layer of this
      // stage (layers spread evenly, the first stages one more).
      const int stage_layers = shape.layers / shape.pp + (p < shape.layers % shape.pp ? 1 : 0);
      const int collectives_per_pass = shape.tp > 1 ? 2 * stage_layers : 0;
      std::int64_t sequence = 0;
      auto collectives = [&] {
        for (int c = 0; c < collectives_per_pass; ++c) {
          lens::Span s = tr.start_span(SpanGroup::kCommunication, "megatron.tp.all_reduce");
          s.set_attribute("dl.tensor_parallel.rank", std::int64_t{t});
          s.set_attribute("dl.tensor_parallel.size", std::int64_t{shape.tp});
          s.set_attribute("dl.collective.sequence", sequence++);
          s.end();
        }
      };
      for (int step = 0; step < shape.steps; ++step) {
        const double cpu0 = thread_cpu_us();
        const auto t0 = Clock::now();
        lens::StepScope scope(trace, static_cast<std::uint64_t>(step));
        sequence = 0;
        protocol_cpu_us[static_cast<std::size_t>(r)].push_back(thread_cpu_us() - cpu0);
        protocol_us[static_cast<std::size_t>(r)].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        lens::Span fb = tr.start_span(SpanGroup::kForwardBackward, "megatron.forward_backward");
        {
          lens::CurrentSpanScope fb_scope(fb);
          auto forward = [&](int mb, bool linked) {
            if (!first) {
              lens::Span link = linked ? trace.recv_forward_linked(mb) : lens::Span();
              emit(SpanGroup::kCommunication, "megatron.p2p.recv_forward", mb);
            }
            emit(SpanGroup::kMicrobatch, "megatron.microbatch.forward", mb);
            collectives();
            if (!last) emit(SpanGroup::kCommunication, "megatron.p2p.send_forward", mb);
          };
          int next_backward = 0;
          auto backward = [&] {
            const int mb = next_backward++;
            if (!last) emit(SpanGroup::kCommunication, "megatron.p2p.recv_backward", mb);
            emit(SpanGroup::kMicrobatch, "megatron.microbatch.backward", mb);
            collectives();
            if (!first) emit(SpanGroup::kCommunication, "megatron.p2p.send_backward", mb);
          };
          for (int i = 0; i < warmup; ++i) forward(i, true);
          for (int j = 0; j < m - warmup; ++j) {
            forward(warmup + j, j == 0);
            backward();
          }
          for (int j = m - warmup; j < m; ++j) backward();
        }
        fb.end();
        if (shape.dp > 1)
          tr.start_span(SpanGroup::kCommunication, "megatron.grads.all_reduce").end();
        tr.start_span(SpanGroup::kOptimizer, "megatron.optimizer.step").end();
      }
      telemetry->shutdown(std::chrono::seconds(60));
    });
  }
  for (auto& th : threads) th.join();

  // Scale the simulated dp x tp back to the job's, except along a dimension
  // the filter names (its exporting ranks are the same in both).
  const double scale = (filter.dp ? 1.0 : static_cast<double>(shape.dp) / dp) *
                       (filter.tp ? 1.0 : static_cast<double>(shape.tp) / tp);
  const double spans_per_step = scale * static_cast<double>(collector.spans) / shape.steps;
  const double bytes_per_step = scale * static_cast<double>(collector.bytes) / shape.steps;
  // World scope: one trace per step holding every exporting rank's spans.
  // Pipeline scope: one per exporting pipeline (a dp x tp pair).
  const double traces_per_step =
      shape.scope == lens::TraceScope::kWorld
          ? 1.0
          : scale * static_cast<double>(collector.spans_per_trace.size()) / shape.steps;
  const double spans_per_trace = traces_per_step > 0 ? spans_per_step / traces_per_step : 0.0;
  const double steps_per_minute = 60000.0 / shape.step_ms;
  const double kept = shape.budget == 0 ? 1.0 : std::min(1.0, shape.budget / steps_per_minute);
  const double collector_spans_per_s = spans_per_step * kept / (shape.step_ms / 1000.0);
  const double collector_bytes_per_s = bytes_per_step * kept / (shape.step_ms / 1000.0);
  // Step 0 warms up (thread start, first allocations): leave it out.
  auto percentiles = [&](const std::vector<std::vector<double>>& per_rank) {
    std::vector<double> all;
    for (const auto& v : per_rank)
      for (std::size_t i = v.size() > 1 ? 1 : 0; i < v.size(); ++i) all.push_back(v[i]);
    std::sort(all.begin(), all.end());
    return std::pair{all[all.size() / 2], all[std::min(all.size() - 1, all.size() * 99 / 100)]};
  };
  const auto [median_us, p99_us] = percentiles(protocol_us);
  const auto [median_cpu_us, p99_cpu_us] = percentiles(protocol_cpu_us);
  std::printf(
      "shape        tp=%d pp=%d dp=%d (%ld ranks), %d microbatches, step %.0f ms, groups %s, "
      "scope %s, filter %s, budget %s\n",
      shape.tp, shape.pp, shape.dp, job_ranks, shape.microbatches, shape.step_ms,
      groups.to_spec().c_str(), std::string(lens::trace_scope_name(shape.scope)).c_str(),
      filter.empty() ? "none" : filter.to_string().c_str(),
      shape.budget ? (std::to_string(shape.budget) + " steps/min").c_str() : "none");
  std::printf("simulated    %d logical ranks (tp=%d dp=%d), %d steps; counts scaled x%g\n", ranks,
              tp, dp, shape.steps, scale);
  std::printf("spans/step   %.0f\n", spans_per_step);
  std::printf("bytes/step   %.0f (OTLP/protobuf)\n", bytes_per_step);
  std::printf("traces/step  %.0f, spans/trace %.0f\n", traces_per_step, spans_per_trace);
  std::printf("kept steps   %.1f%% (%.1f steps/min)\n", kept * 100, steps_per_minute * kept);
  std::printf("collector    %.0f spans/s, %.2f MB/s\n", collector_spans_per_s,
              collector_bytes_per_s / 1e6);
  std::printf(
      "protocol     per rank per step in StepScope, %d in-process ranks on %u cores: CPU %.1f us "
      "median (p99 %.1f); wall %.0f us median (p99 %.0f), waiting for peers included\n",
      ranks, std::thread::hardware_concurrency(), median_cpu_us, p99_cpu_us, median_us, p99_us);
  return 0;
}
