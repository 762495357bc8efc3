// The registry as OTLP: the protobuf request decoded with libprotobuf and
// the OTLP metrics schema (tests/support/otlp_metrics.proto), the JSON one
// saying the same, a rank's step metrics under OpenTelemetry's names, and
// the exporter against a real OTLP/HTTP receiver (delivered, refused,
// unreachable).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <tuple>

#include "lens/metrics.h"
#include "lens/metrics_exporter.h"
#include "lens/step_metrics.h"
#include "otlp_receiver.h"
#include "remote_context.h"

namespace lens {
namespace {

using namespace std::chrono_literals;
namespace pb = lens::test::otlp;

constexpr std::int64_t kStart = 1'700'000'000'000'000'000;
constexpr std::int64_t kNow = 1'700'000'060'000'000'000;

SpanContext sampled_context() { return testing::example_sampled_context(); }

Resource rank_resource() {
  Resource r;
  r.set("service.name", std::string("megatron-lm"));
  r.set("dl.rank", std::int64_t{3});
  return r;
}

std::string attribute(const google::protobuf::RepeatedPtrField<pb::KeyValue>& kvs,
                      const std::string& key) {
  for (const auto& kv : kvs)
    if (kv.key() == key)
      return kv.value().has_string_value() ? kv.value().string_value()
                                           : std::to_string(kv.value().int_value());
  return "<none>";
}

const pb::Metric* find_metric(const pb::ExportMetricsServiceRequest& r, const std::string& name) {
  for (const auto& m : r.resource_metrics(0).scope_metrics(0).metrics())
    if (m.name() == name) return &m;
  return nullptr;
}

// A counter, a gauge and a histogram with one exemplar.
void fill(MetricRegistry& r) {
  r.counter("lens_steps", "Steps the rank has run.", {{"rank", "3"}}).add(7);
  r.gauge("lens_straggler_score", "The last score.", {}, {{"rank", "3"}}).set(2.5);
  Histogram& h = r.histogram("lens_step_p2p_wait_seconds", "Waits.", "seconds", {0.1, 1},
                             {{"rank", "3"}, {"stage", "1"}});
  h.record(0.05);
  h.record(0.5, sampled_context(), kStart + 5);
  h.record(3);
  r.set_otel_name("lens_step_p2p_wait_seconds", "lens.step.p2p_wait");
}

TEST(OtlpMetrics, TheProtobufRequestDecodesAsOtlp) {
  MetricRegistry r;
  fill(r);
  pb::ExportMetricsServiceRequest req;
  ASSERT_TRUE(req.ParseFromString(r.otlp_proto(rank_resource(), kStart, kNow)));
  ASSERT_EQ(req.resource_metrics_size(), 1);
  const auto& rm = req.resource_metrics(0);
  EXPECT_EQ(attribute(rm.resource().attributes(), "service.name"), "megatron-lm");
  EXPECT_EQ(attribute(rm.resource().attributes(), "dl.rank"), "3");
  ASSERT_EQ(rm.scope_metrics_size(), 1);
  EXPECT_EQ(rm.scope_metrics(0).scope().name(), "nemo.lens");
  EXPECT_FALSE(rm.scope_metrics(0).scope().version().empty());
  ASSERT_EQ(rm.scope_metrics(0).metrics_size(), 3);

  const pb::Metric* steps = find_metric(req, "lens.steps");
  ASSERT_NE(steps, nullptr);
  ASSERT_TRUE(steps->has_sum());
  EXPECT_TRUE(steps->sum().is_monotonic());
  EXPECT_EQ(steps->sum().aggregation_temporality(), pb::AGGREGATION_TEMPORALITY_CUMULATIVE);
  ASSERT_EQ(steps->sum().data_points_size(), 1);
  EXPECT_DOUBLE_EQ(steps->sum().data_points(0).as_double(), 7);
  EXPECT_EQ(steps->sum().data_points(0).start_time_unix_nano(), static_cast<std::uint64_t>(kStart));
  EXPECT_EQ(steps->sum().data_points(0).time_unix_nano(), static_cast<std::uint64_t>(kNow));
  EXPECT_EQ(attribute(steps->sum().data_points(0).attributes(), "rank"), "3");

  const pb::Metric* score = find_metric(req, "lens.straggler.score");
  ASSERT_NE(score, nullptr);
  ASSERT_TRUE(score->has_gauge());
  EXPECT_DOUBLE_EQ(score->gauge().data_points(0).as_double(), 2.5);

  const pb::Metric* wait = find_metric(req, "lens.step.p2p_wait");
  ASSERT_NE(wait, nullptr) << "the name set for OTLP, one word for the figure";
  EXPECT_EQ(wait->unit(), "s");
  EXPECT_EQ(wait->description(), "Waits.");
  ASSERT_TRUE(wait->has_histogram());
  EXPECT_EQ(wait->histogram().aggregation_temporality(), pb::AGGREGATION_TEMPORALITY_CUMULATIVE);
  const pb::HistogramDataPoint& p = wait->histogram().data_points(0);
  EXPECT_EQ(p.count(), 3u);
  EXPECT_DOUBLE_EQ(p.sum(), 3.55);
  EXPECT_EQ(std::vector<std::uint64_t>(p.bucket_counts().begin(), p.bucket_counts().end()),
            (std::vector<std::uint64_t>{1, 1, 1}));
  EXPECT_EQ(std::vector<double>(p.explicit_bounds().begin(), p.explicit_bounds().end()),
            (std::vector<double>{0.1, 1}));
  EXPECT_EQ(attribute(p.attributes(), "stage"), "1");
  ASSERT_EQ(p.exemplars_size(), 1) << "only the sampled observation";
  const pb::Exemplar& e = p.exemplars(0);
  EXPECT_DOUBLE_EQ(e.as_double(), 0.5);
  EXPECT_EQ(e.time_unix_nano(), static_cast<std::uint64_t>(kStart + 5));
  const SpanContext c = sampled_context();
  EXPECT_EQ(e.trace_id(),
            std::string(reinterpret_cast<const char*>(c.trace_id.bytes().data()), TraceId::kSize));
  EXPECT_EQ(e.span_id(),
            std::string(reinterpret_cast<const char*>(c.span_id.bytes().data()), SpanId::kSize));
}

TEST(OtlpMetrics, TheJsonRequestSaysTheSame) {
  MetricRegistry r;
  fill(r);
  const nlohmann::json j = nlohmann::json::parse(r.otlp_json(rank_resource(), kStart, kNow));
  const auto& metrics = j["resourceMetrics"][0]["scopeMetrics"][0]["metrics"];
  ASSERT_EQ(metrics.size(), 3u);
  EXPECT_EQ(metrics[2]["name"], "lens.step.p2p_wait");
  const auto& p = metrics[2]["histogram"]["dataPoints"][0];
  EXPECT_EQ(p["count"], "3");
  EXPECT_EQ(p["bucketCounts"], nlohmann::json({"1", "1", "1"}));
  EXPECT_EQ(p["exemplars"][0]["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(p["exemplars"][0]["spanId"], "00f067aa0ba902b7");
  EXPECT_THROW(r.set_otel_name("no_such_family", "x"), std::invalid_argument);
  EXPECT_THROW(r.set_otel_name("lens_steps", ""), std::invalid_argument);
}

// A step's totals: `ns` over `spans` spans for each figure given.
StepFigureTotals totals(std::initializer_list<std::tuple<StepFigure, std::int64_t, int>> figures) {
  StepFigureTotals f;
  for (const auto& [figure, ns, spans] : figures) {
    f.ns[static_cast<std::size_t>(figure)] = ns;
    f.spans[static_cast<std::size_t>(figure)] = static_cast<std::uint32_t>(spans);
  }
  return f;
}

TEST(StepMetrics, RecordsTheStepAndTheFiguresItsSpansMeasured) {
  MetricRegistry r;
  StepMetrics m(r, {{"rank", "1"}});
  const StepFigureTotals f =
      totals({{StepFigure::kCompute, 40'000'000, 8}, {StepFigure::kP2pWait, 2'000'000, 4}});
  // No all-reduce, no send, no optimizer span this step: not recorded.
  m.record_step(0.06, f, sampled_context(), kStart);
  m.record_step(0.07, f);
  m.record_spans(120, 2);
  m.record_spans(100, 1);  // a counter never goes back

  pb::ExportMetricsServiceRequest req;
  ASSERT_TRUE(req.ParseFromString(r.otlp_proto(rank_resource(), kStart, kNow)));
  const auto count = [&](const std::string& name) {
    const pb::Metric* metric = find_metric(req, name);
    EXPECT_NE(metric, nullptr) << name;
    return metric ? metric->histogram().data_points(0).count() : 0;
  };
  EXPECT_EQ(count("lens.step.duration"), 2u);
  EXPECT_EQ(count("lens.step.compute"), 2u);
  EXPECT_EQ(count("lens.step.p2p_wait"), 2u);
  EXPECT_EQ(count("lens.step.p2p_send"), 0u);
  EXPECT_EQ(count("lens.step.all_reduce"), 0u);
  EXPECT_EQ(count("lens.step.optimizer"), 0u);
  const pb::HistogramDataPoint& compute =
      find_metric(req, "lens.step.compute")->histogram().data_points(0);
  EXPECT_DOUBLE_EQ(compute.sum(), 0.08);
  ASSERT_EQ(compute.exemplars_size(), 1) << "the sampled step's";
  EXPECT_DOUBLE_EQ(compute.exemplars(0).as_double(), 0.04);
  EXPECT_DOUBLE_EQ(find_metric(req, "lens.steps")->sum().data_points(0).as_double(), 2);
  EXPECT_DOUBLE_EQ(find_metric(req, "lens.spans.ended")->sum().data_points(0).as_double(), 120);
  EXPECT_DOUBLE_EQ(find_metric(req, "lens.spans.dropped")->sum().data_points(0).as_double(), 2);
  // Prometheus's names, for the scrape.
  const std::string text = r.openmetrics();
  EXPECT_NE(text.find("lens_step_p2p_wait_seconds_count{rank=\"1\"} 2"), std::string::npos);
  EXPECT_NE(text.find("lens_spans_dropped_total{rank=\"1\"} 2"), std::string::npos);
}

TEST(StepMetrics, OneRanksMetricsTravelAsWordsToTheRankThatServesTheJob) {
  MetricRegistry mine;
  StepMetrics rank3(mine, {{"rank", "3"}});
  const StepFigureTotals f = totals({{StepFigure::kCompute, 30'000'000, 4}});
  rank3.record_step(0.05, f, sampled_context(), kStart);
  rank3.record_step(3.0, f);
  rank3.record_spans(40, 1);
  const std::vector<std::int64_t> words = rank3.encode();
  ASSERT_EQ(words.size(), StepMetrics::kWords);

  MetricRegistry job;
  StepMetrics copy(job, {{"rank", "3"}});
  ASSERT_TRUE(copy.assign(words));
  const std::string text = job.openmetrics();
  EXPECT_NE(text.find("lens_step_duration_seconds_count{rank=\"3\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("lens_step_duration_seconds_bucket{rank=\"3\",le=\"5\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("lens_step_compute_seconds_count{rank=\"3\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("lens_steps_total{rank=\"3\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("lens_spans_dropped_total{rank=\"3\"} 1\n"), std::string::npos);
  // The sampled step's exemplar, in its bucket, with its ids.
  EXPECT_NE(text.find("le=\"0.05\"} 1 # {trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\","
                      "span_id=\"00f067aa0ba902b7\"} 0.05"),
            std::string::npos)
      << text;
  EXPECT_EQ(copy.encode(), words) << "the same words back";

  // Words that are not step metrics change nothing.
  std::vector<std::int64_t> bad = words;
  bad[0] = 7;  // another version
  EXPECT_FALSE(copy.assign(bad));
  bad = words;
  bad[1] += 1;  // a bucket that does not add up to the count
  EXPECT_FALSE(copy.assign(bad));
  bad = words;
  bad.pop_back();
  EXPECT_FALSE(copy.assign(bad));
  EXPECT_FALSE(copy.assign({}));
  EXPECT_EQ(copy.encode(), words);
}

OtlpHttpOptions options_for(const testing::OtlpReceiver& receiver, bool json) {
  OtlpHttpOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(receiver.port()) + "/v1/metrics";
  o.json = json;
  o.timeout = 2000ms;
  o.initial_backoff = 10ms;
  o.max_attempts = 2;
  o.retry_deadline = 2000ms;
  return o;
}

TEST(OtlpMetricsExporter, ExportsEveryIntervalAndOnceMoreAtShutdown) {
  for (const bool json : {false, true}) {
    testing::OtlpReceiver receiver;
    receiver.start();
    MetricRegistry r;
    Counter& steps = r.counter("lens_steps", "Steps.", {{"rank", "0"}});
    OtlpMetricsExporter exporter(r, rank_resource(), options_for(receiver, json), 50ms, kStart);
    steps.add(1);
    for (int i = 0; i < 400 && exporter.stats().requests < 2; ++i)
      std::this_thread::sleep_for(10ms);
    EXPECT_GE(exporter.stats().requests, 2u) << "one every 50 ms";
    steps.add(4);
    exporter.shutdown();
    exporter.shutdown();  // idempotent
    const MetricsExportStats s = exporter.stats();
    EXPECT_EQ(s.failed, 0u) << s.last_error;
    // The last request carries the totals at the end.
    double last = -1;
    std::string content_type;
    if (json) {
      const auto requests = receiver.metrics_json_requests();
      ASSERT_EQ(requests.size(), s.requests);
      last = requests.back()["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]
                            ["dataPoints"][0]["asDouble"];
    } else {
      const auto requests = receiver.metrics_protobuf_requests();
      ASSERT_EQ(requests.size(), s.requests);
      last = find_metric(requests.back(), "lens.steps")->sum().data_points(0).as_double();
    }
    EXPECT_DOUBLE_EQ(last, 5) << (json ? "json" : "protobuf");
    for (const auto& h : receiver.headers())
      EXPECT_EQ(h.at("Content-Type"), json ? "application/json" : "application/x-protobuf");
  }
}

TEST(OtlpMetricsExporter, CountsWhatItCouldNotDeliverAndNeverHangs) {
  // Refused with 400 (not retried): counted, and the next request is sent.
  testing::OtlpReceiver refusing([](int) { return testing::Reply{400, "", "", 0}; });
  refusing.start();
  MetricRegistry r;
  r.counter("lens_steps", "Steps.").add(1);
  {
    OtlpMetricsExporter exporter(r, rank_resource(), options_for(refusing, false), 1h, kStart);
    EXPECT_FALSE(exporter.export_now());
    exporter.shutdown();
    EXPECT_EQ(exporter.stats().failed, 2u);
    EXPECT_EQ(exporter.stats().requests, 0u);
    EXPECT_NE(exporter.stats().last_error, "");
  }
  // Nobody listening: the shutdown's one attempt fails at once.
  OtlpHttpOptions nowhere = options_for(refusing, false);
  refusing.stop();
  const auto begin = std::chrono::steady_clock::now();
  {
    OtlpMetricsExporter exporter(r, rank_resource(), nowhere, 1h, kStart);
    exporter.shutdown();
    EXPECT_EQ(exporter.stats().failed, 1u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 30s);
  EXPECT_THROW(OtlpMetricsExporter(r, rank_resource(), nowhere, 0ms, kStart),
               std::invalid_argument);
}

}  // namespace
}  // namespace lens
