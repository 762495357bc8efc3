// Counters, gauges, histograms with exemplars, and the registry
// (lens/metrics.h).
#include "lens/metrics.h"

#include <cmath>
#include <stdexcept>

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

bool Histogram::assign(const Snapshot& s) {
  if (s.bounds != bounds_ || s.counts.size() != counts_.size() ||
      s.exemplars.size() != exemplars_.size())
    return false;
  std::lock_guard<std::mutex> lock(mu_);
  counts_ = s.counts;
  exemplars_ = s.exemplars;
  count_ = s.count;
  sum_ = s.sum;
  return true;
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

// OpenTelemetry's default name for a family: without the unit suffix, dots
// for underscores; and the unit in UCUM.
std::string default_otel_name(const std::string& name, const std::string& unit) {
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

}  // namespace

void MetricRegistry::set_otel_name(const std::string& name, const std::string& otel_name) {
  if (otel_name.empty()) throw std::invalid_argument("metric " + name + ": an empty OTLP name");
  std::lock_guard<std::mutex> lock(mu_);
  for (Family& f : families_) {
    if (f.name != name) continue;
    f.otel_name = otel_name;
    return;
  }
  throw std::invalid_argument("no metric family " + name);
}

std::vector<MetricFamilySnapshot> MetricRegistry::collect() const {
  std::vector<MetricFamilySnapshot> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Family& f : families_) {
    MetricFamilySnapshot& s = out.emplace_back();
    s.otel_name = f.otel_name.empty() ? default_otel_name(f.name, f.unit) : f.otel_name;
    s.help = f.help;
    s.unit = ucum(f.unit);
    if (f.kind == Kind::kCounter) {
      s.kind = MetricFamilySnapshot::Kind::kCounter;
      for (const auto& [labels, c] : f.counters) s.points.push_back({labels, c->value(), {}});
    } else if (f.kind == Kind::kGauge) {
      s.kind = MetricFamilySnapshot::Kind::kGauge;
      for (const auto& [labels, g] : f.gauges) s.points.push_back({labels, g->value(), {}});
    } else {
      s.kind = MetricFamilySnapshot::Kind::kHistogram;
      for (const auto& [labels, h] : f.histograms) s.points.push_back({labels, 0, h->snapshot()});
    }
  }
  return out;
}

}  // namespace lens
