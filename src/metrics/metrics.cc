// Counters, gauges, histograms with exemplars, and the registry
// (lens/metrics.h).
#include "lens/metrics.h"

#include <cmath>
#include <stdexcept>

#include "lens/otlp_json.h"
#include "openmetrics_text.h"

namespace lens {

void Counter::add(double delta) {
  if (!(delta >= 0)) return;  // a counter only goes up (NaN is not counted)
  std::lock_guard<std::mutex> lock(mu_);
  value_ += delta;
}
void Counter::advance_to(double total) {
  std::lock_guard<std::mutex> lock(mu_);
  if (total > value_) value_ = total;
}
double Counter::value() const {
  std::lock_guard<std::mutex> lock(mu_);
  return value_;
}

void Gauge::set(double value) {
  std::lock_guard<std::mutex> lock(mu_);
  value_ = value;
}
double Gauge::value() const {
  std::lock_guard<std::mutex> lock(mu_);
  return value_;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0), exemplars_(bounds_.size() + 1) {
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && !(bounds_[i] > bounds_[i - 1])))
      throw std::invalid_argument("histogram bounds must be finite and strictly increasing");
  }
}

void Histogram::record(double value, const SpanContext& context, std::int64_t time_unix_ns) {
  if (std::isnan(value)) return;
  std::size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  ++count_;
  sum_ += value;
  if (context.valid() && context.sampled())
    exemplars_[bucket] = MetricExemplar{value, context.trace_id, context.span_id, time_unix_ns};
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  s.counts = counts_;
  s.exemplars = exemplars_;
  s.count = count_;
  s.sum = sum_;
  return s;
}

MetricRegistry::Family& MetricRegistry::family(const std::string& name, const std::string& help,
                                               const std::string& unit, Kind kind,
                                               const std::vector<double>& bounds) {
  for (Family& f : families_) {
    if (f.name != name) continue;
    if (f.kind != kind) throw std::invalid_argument("metric " + name + " exists as another kind");
    if (f.bounds != bounds)
      throw std::invalid_argument("histogram " + name + " exists with other bounds");
    return f;
  }
  detail::check_metric_name(name, unit);
  Family& f = families_.emplace_back();
  f.name = name;
  f.help = help;
  f.unit = unit;
  f.kind = kind;
  f.bounds = bounds;
  return f;
}

namespace {
// The family's metric with `labels`, made from `args` on first use.
template <typename T, typename... Args>
T& find_or_add(std::deque<std::pair<MetricLabels, std::unique_ptr<T>>>& metrics,
               const MetricLabels& labels, const Args&... args) {
  for (auto& [l, m] : metrics)
    if (l == labels) return *m;
  for (const auto& [key, value] : labels) detail::check_label_name(key);
  return *metrics.emplace_back(labels, std::make_unique<T>(args...)).second;
}
}  // namespace

Counter& MetricRegistry::counter(const std::string& name, const std::string& help,
                                 const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, help, {}, Kind::kCounter, {});
  return find_or_add(f.counters, labels);
}

Gauge& MetricRegistry::gauge(const std::string& name, const std::string& help,
                             const std::string& unit, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, help, unit, Kind::kGauge, {});
  return find_or_add(f.gauges, labels);
}

Histogram& MetricRegistry::histogram(const std::string& name, const std::string& help,
                                     const std::string& unit, const std::vector<double>& bounds,
                                     const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, help, unit, Kind::kHistogram, bounds);
  return find_or_add(f.histograms, labels, bounds);
}

std::string MetricRegistry::openmetrics() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Family& f : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter"
                       : f.kind == Kind::kGauge ? "gauge"
                                                : "histogram";
    detail::write_family_header(out, f.name, type, f.help, f.unit);
    for (const auto& [labels, c] : f.counters)
      detail::write_sample(out, f.name + "_total", labels, c->value());
    for (const auto& [labels, g] : f.gauges) detail::write_sample(out, f.name, labels, g->value());
    for (const auto& [labels, h] : f.histograms)
      detail::write_histogram(out, f.name, labels, h->snapshot());
  }
  out += "# EOF\n";
  return out;
}

namespace {

// OpenTelemetry's name for a family: without the unit suffix, dots for
// underscores; and the unit in UCUM.
std::string otel_name(const std::string& name, const std::string& unit) {
  std::string n = unit.empty() ? name : name.substr(0, name.size() - unit.size() - 1);
  for (char& c : n)
    if (c == '_') c = '.';
  return n;
}
std::string ucum(const std::string& unit) {
  if (unit == "seconds") return "s";
  if (unit == "bytes") return "By";
  return unit;
}
void append_quoted_uint(std::string& out, std::uint64_t v) { out += '"' + std::to_string(v) + '"'; }
void append_point_head(std::string& out, const MetricLabels& labels, std::int64_t start,
                       std::int64_t now) {
  Attributes attributes;
  for (const auto& [k, v] : labels) attributes.push_back({k, v});
  out += '{';
  append_otlp_json_attributes(out, attributes);
  out += ",\"startTimeUnixNano\":\"" + std::to_string(start) + "\",\"timeUnixNano\":\"" +
         std::to_string(now) + '"';
}

}  // namespace

std::string MetricRegistry::otlp_json(const Resource& resource, std::int64_t start_unix_ns,
                                      std::int64_t now_unix_ns) const {
  std::string out = "{\"resourceMetrics\":[{\"resource\":{";
  append_otlp_json_attributes(out, resource.attributes);
  out += "},\"scopeMetrics\":[{\"scope\":{\"name\":\"nemo.lens\"},\"metrics\":[";
  std::lock_guard<std::mutex> lock(mu_);
  bool first_family = true;
  for (const Family& f : families_) {
    if (!first_family) out += ',';
    first_family = false;
    out += "{\"name\":";
    append_json_string(out, otel_name(f.name, f.unit));
    out += ",\"description\":";
    append_json_string(out, f.help);
    out += ",\"unit\":";
    append_json_string(out, ucum(f.unit));
    bool first = true;
    const auto sep = [&] {
      if (!first) out += ',';
      first = false;
    };
    // A counter's or a gauge's points: one number each.
    const auto number_points = [&](const auto& metrics) {
      out += "{\"dataPoints\":[";
      for (const auto& [labels, m] : metrics) {
        sep();
        append_point_head(out, labels, start_unix_ns, now_unix_ns);
        out += ",\"asDouble\":";
        append_otlp_json_double(out, m->value());
        out += '}';
      }
      out += ']';
    };
    if (f.kind == Kind::kCounter) {
      out += ",\"sum\":";
      number_points(f.counters);
      out += ",\"aggregationTemporality\":2,\"isMonotonic\":true}}";
    } else if (f.kind == Kind::kGauge) {
      out += ",\"gauge\":";
      number_points(f.gauges);
      out += "}}";
    } else {
      out += ",\"histogram\":{\"dataPoints\":[";
      for (const auto& [labels, h] : f.histograms) {
        sep();
        const Histogram::Snapshot s = h->snapshot();
        append_point_head(out, labels, start_unix_ns, now_unix_ns);
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
        bool first_exemplar = true;
        for (const auto& e : s.exemplars) {
          if (!e) continue;
          if (!first_exemplar) out += ',';
          first_exemplar = false;
          out += "{\"timeUnixNano\":\"" + std::to_string(e->time_unix_ns) + "\",\"asDouble\":";
          append_otlp_json_double(out, e->value);
          out += ",\"traceId\":\"" + e->trace_id.to_hex() + "\",\"spanId\":\"" +
                 e->span_id.to_hex() + "\"}";
        }
        out += "]}";
      }
      out += "],\"aggregationTemporality\":2}}";
    }
  }
  out += "]}]}]}";
  return out;
}

}  // namespace lens
