// OTLP encoding throughput: batches of 512 spans with 4 attributes and 1
// link each, encoded as protobuf and as JSON on one core. The spans/s figure
// is Google Benchmark's items_per_second.
#include <benchmark/benchmark.h>

#include <vector>

#include "lens/otlp_json.h"
#include "lens/otlp_proto.h"

namespace {

struct Batch {
  lens::InstrumentationScope scope{"nemo.lens", "0.1.0"};
  lens::Resource resource;
  std::vector<lens::SpanRecord> records;
  std::vector<const lens::SpanRecord*> view;

  Batch() {
    resource.set("service.name", std::string("megatron-lm"));
    resource.set("nemo.run.id", std::string("20261201-070512-3fa2c1"));
    resource.set("dl.rank", std::int64_t{3});
    lens::SpanContext remote;
    remote.trace_id = lens::IdGenerator::new_trace_id();
    remote.span_id = lens::IdGenerator::new_span_id();
    remote.trace_flags = 1;
    remote.remote = true;
    records.resize(512);
    std::int64_t t = 1764572400000000000;
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto& r = records[i];
      r.context.trace_id = remote.trace_id;
      r.context.span_id = lens::IdGenerator::new_span_id();
      r.context.trace_flags = 1;
      r.parent_span_id = lens::IdGenerator::new_span_id();
      r.name = "megatron.pp.recv_forward.linked";
      r.start_time_unix_ns = t;
      r.end_time_unix_ns = t + 123456;
      t += 200000;
      r.attributes = {{"dl.pipeline_parallel.rank", std::int64_t{1}},
                      {"dl.microbatch_id", static_cast<std::int64_t>(i)},
                      {"dl.step", std::int64_t{1200}},
                      {"dl.loss", 0.4321}};
      r.links.push_back({remote, {}, 0});
      r.scope = &scope;
      view.push_back(&r);
    }
  }
};

void BM_EncodeOtlpProtobuf(benchmark::State& state) {
  Batch b;
  std::string out;
  for (auto _ : state) {
    out.clear();
    lens::append_otlp_proto(out, b.resource, b.view);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(b.view.size()));
  state.counters["bytes_per_span"] = static_cast<double>(out.size()) / b.view.size();
}
BENCHMARK(BM_EncodeOtlpProtobuf);

void BM_EncodeOtlpJson(benchmark::State& state) {
  Batch b;
  std::string out;
  for (auto _ : state) {
    out.clear();
    lens::append_otlp_json(out, b.resource, b.view);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(b.view.size()));
  state.counters["bytes_per_span"] = static_cast<double>(out.size()) / b.view.size();
}
BENCHMARK(BM_EncodeOtlpJson);

}  // namespace
