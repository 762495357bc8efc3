// The registry as one OTLP ExportMetricsServiceRequest, in the JSON and the
// protobuf encodings (lens/metrics.h): cumulative temporality, one
// ResourceMetrics with one ScopeMetrics. Field numbers follow
// opentelemetry/proto/metrics/v1/metrics.proto and its collector service.
#include <string>

#include "lens/metrics.h"
#include "lens/otlp_json.h"
#include "lens/otlp_proto_writer.h"
#include "lens/version.h"

namespace lens {
namespace {

using Kind = MetricFamilySnapshot::Kind;
constexpr int kCumulative = 2;  // AggregationTemporality
constexpr std::string_view kScope = "nemo.lens";

Attributes attributes_of(const MetricLabels& labels) {
  Attributes attributes;
  for (const auto& [k, v] : labels) attributes.push_back({k, v});
  return attributes;
}

void append_quoted_uint(std::string& out, std::uint64_t v) { out += '"' + std::to_string(v) + '"'; }

// A point's attributes and times, the opening brace included.
void json_point_head(std::string& out, const MetricLabels& labels, std::int64_t start,
                     std::int64_t now) {
  out += '{';
  append_otlp_json_attributes(out, attributes_of(labels));
  out += ",\"startTimeUnixNano\":\"" + std::to_string(start) + "\",\"timeUnixNano\":\"" +
         std::to_string(now) + '"';
}

void json_histogram_point(std::string& out, const Histogram::Snapshot& s) {
  out += ",\"count\":";
  append_quoted_uint(out, s.count);
  out += ",\"sum\":";
  append_otlp_json_double(out, s.sum);
  out += ",\"bucketCounts\":[";
  for (std::size_t i = 0; i < s.counts.size(); ++i) {
    if (i) out += ',';
    append_quoted_uint(out, s.counts[i]);
  }
  out += "],\"explicitBounds\":[";
  for (std::size_t i = 0; i < s.bounds.size(); ++i) {
    if (i) out += ',';
    append_otlp_json_double(out, s.bounds[i]);
  }
  out += "],\"exemplars\":[";
  bool first = true;
  for (const auto& e : s.exemplars) {
    if (!e) continue;
    if (!first) out += ',';
    first = false;
    out += "{\"timeUnixNano\":\"" + std::to_string(e->time_unix_ns) + "\",\"asDouble\":";
    append_otlp_json_double(out, e->value);
    out +=
        ",\"traceId\":\"" + e->trace_id.to_hex() + "\",\"spanId\":\"" + e->span_id.to_hex() + "\"}";
  }
  out += "]}";
}

void json_family(std::string& out, const MetricFamilySnapshot& f, std::int64_t start,
                 std::int64_t now) {
  out += "{\"name\":";
  append_json_string(out, f.otel_name);
  out += ",\"description\":";
  append_json_string(out, f.help);
  out += ",\"unit\":";
  append_json_string(out, f.unit);
  out += f.kind == Kind::kCounter ? ",\"sum\":"
         : f.kind == Kind::kGauge ? ",\"gauge\":"
                                  : ",\"histogram\":";
  out += "{\"dataPoints\":[";
  bool first = true;
  for (const auto& p : f.points) {
    if (!first) out += ',';
    first = false;
    json_point_head(out, p.labels, start, now);
    if (f.kind == Kind::kHistogram) {
      json_histogram_point(out, p.histogram);
    } else {
      out += ",\"asDouble\":";
      append_otlp_json_double(out, p.value);
      out += '}';
    }
  }
  out += ']';
  if (f.kind == Kind::kCounter) out += ",\"aggregationTemporality\":2,\"isMonotonic\":true";
  if (f.kind == Kind::kHistogram) out += ",\"aggregationTemporality\":2";
  out += "}}";
}

// NumberDataPoint: start 2, time 3, as_double 4, attributes 7.
// HistogramDataPoint: start 2, time 3, count 4, sum 5, bucket_counts 6
// (packed), explicit_bounds 7 (packed), exemplars 8, attributes 9.
// Exemplar: time 2, as_double 3, span_id 4, trace_id 5.
void proto_point(ProtoWriter& w, Kind kind, const MetricFamilySnapshot::Point& p,
                 std::int64_t start, std::int64_t now) {
  const bool histogram = kind == Kind::kHistogram;
  append_otlp_proto_attributes(w, histogram ? 9 : 7, attributes_of(p.labels));
  w.fixed64_field(2, static_cast<std::uint64_t>(start));
  w.fixed64_field(3, static_cast<std::uint64_t>(now));
  if (!histogram) {
    w.double_field(4, p.value);
    return;
  }
  const Histogram::Snapshot& s = p.histogram;
  w.fixed64_field(4, s.count);
  w.double_field(5, s.sum);
  const auto counts = w.begin(6);
  for (std::uint64_t c : s.counts) w.raw64(c);
  w.end(counts);
  if (!s.bounds.empty()) {
    const auto bounds = w.begin(7);
    for (double b : s.bounds) w.raw64(ProtoWriter::double_bits(b));
    w.end(bounds);
  }
  for (const auto& e : s.exemplars) {
    if (!e) continue;
    const auto ex = w.begin(8);
    w.fixed64_field(2, static_cast<std::uint64_t>(e->time_unix_ns));
    w.double_field(3, e->value);
    w.bytes_field(4, e->span_id.bytes().data(), SpanId::kSize);
    w.bytes_field(5, e->trace_id.bytes().data(), TraceId::kSize);
    w.end(ex);
  }
}

// Metric: name 1, description 2, unit 3, gauge 5, sum 7, histogram 9; each
// with data_points 1, aggregation_temporality 2, (a sum's) is_monotonic 3.
void proto_family(ProtoWriter& w, const MetricFamilySnapshot& f, std::int64_t start,
                  std::int64_t now) {
  w.string_field(1, f.otel_name);
  w.string_field(2, f.help);
  w.string_field(3, f.unit);
  const auto data = w.begin(f.kind == Kind::kCounter ? 7 : f.kind == Kind::kGauge ? 5 : 9);
  for (const auto& p : f.points) {
    const auto point = w.begin(1);
    proto_point(w, f.kind, p, start, now);
    w.end(point);
  }
  if (f.kind != Kind::kGauge) w.uint_field(2, kCumulative);
  if (f.kind == Kind::kCounter) w.bool_field(3, true);
  w.end(data);
}

}  // namespace

std::string MetricRegistry::otlp_json(const Resource& resource, std::int64_t start_unix_ns,
                                      std::int64_t now_unix_ns) const {
  const std::vector<MetricFamilySnapshot> families = collect();
  std::string out = "{\"resourceMetrics\":[{\"resource\":{";
  append_otlp_json_attributes(out, resource.attributes);
  out += "},\"scopeMetrics\":[{\"scope\":{\"name\":\"" + std::string(kScope) +
         "\",\"version\":\"" LENS_VERSION_STRING "\"},\"metrics\":[";
  for (std::size_t i = 0; i < families.size(); ++i) {
    if (i) out += ',';
    json_family(out, families[i], start_unix_ns, now_unix_ns);
  }
  out += "]}]}]}";
  return out;
}

// ExportMetricsServiceRequest: resource_metrics 1. ResourceMetrics: resource
// 1 (attributes 1), scope_metrics 2. ScopeMetrics: scope 1 (name 1, version
// 2), metrics 2.
std::string MetricRegistry::otlp_proto(const Resource& resource, std::int64_t start_unix_ns,
                                       std::int64_t now_unix_ns) const {
  const std::vector<MetricFamilySnapshot> families = collect();
  std::string out;
  ProtoWriter w(out);
  const auto rm = w.begin(1);
  const auto res = w.begin(1);
  append_otlp_proto_attributes(w, 1, resource.attributes);
  w.end(res);
  const auto sm = w.begin(2);
  const auto scope = w.begin(1);
  w.string_field(1, kScope);
  w.string_field(2, LENS_VERSION_STRING);
  w.end(scope);
  for (const MetricFamilySnapshot& f : families) {
    const auto metric = w.begin(2);
    proto_family(w, f, start_unix_ns, now_unix_ns);
    w.end(metric);
  }
  w.end(sm);
  w.end(rm);
  return out;
}

}  // namespace lens
