/// \file
/// Metrics: counters, gauges and histograms with exemplars, and their
/// OpenMetrics text (docs/metrics.md).
///
/// A MetricRegistry holds metric families by name; each metric of a family
/// has its own labels (a rank's, a stage's). A Histogram has explicit
/// bucket bounds and keeps, per bucket, an exemplar: the latest observation
/// that fell in it and was made inside a sampled trace (its trace id and
/// span id, so that a point on a dashboard opens the trace; OpenTelemetry's
/// trace-based exemplar filter). openmetrics() writes the registry as the
/// OpenMetrics 1.0 text format that Prometheus scrapes.
///
/// Names follow Prometheus's rules ([a-zA-Z_:][a-zA-Z0-9_:]*; label names
/// without ':'); a bad name is std::invalid_argument when the metric is
/// made, never at a scrape. Label values and help are escaped as the format
/// says.
///
/// Thread safety: every method from any thread. Recording takes one
/// uncontended mutex per metric (a scrape holds it while it copies).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lens/resource.h"
#include "lens/span_context.h"

namespace lens {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

/// A sampled observation a histogram bucket points at.
struct MetricExemplar {
  double value = 0;
  TraceId trace_id;
  SpanId span_id;
  std::int64_t time_unix_ns = 0;
};

class Counter {
 public:
  void add(double delta = 1);
  /// Brings the counter up to `total`, a count kept elsewhere (a lower or
  /// NaN total leaves it as it is: a counter never goes down).
  void advance_to(double total);
  double value() const;

 private:
  mutable std::mutex mu_;
  double value_ = 0;
};

class Gauge {
 public:
  void set(double value);
  double value() const;

 private:
  mutable std::mutex mu_;
  double value_ = 0;
};

class Histogram {
 public:
  /// `bounds`: the buckets' upper bounds, strictly increasing and finite
  /// (std::invalid_argument otherwise); a last bucket +Inf is implied.
  explicit Histogram(std::vector<double> bounds);

  /// Counts `value`; with a sampled, valid `context` the value's bucket
  /// keeps it as its exemplar (at `time_unix_ns`). NaN is not counted.
  void record(double value, const SpanContext& context = {}, std::int64_t time_unix_ns = 0);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;  // per bucket, not cumulative; bounds.size() + 1
    std::vector<std::optional<MetricExemplar>> exemplars;  // per bucket
    std::uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;
  /// Replaces the counts, sum and exemplars with `s`'s (a copy of another
  /// process's histogram, for an endpoint that serves a job); false, and
  /// nothing changed, when its buckets are not this histogram's.
  bool assign(const Snapshot& s);

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<std::uint64_t> counts_;
  std::vector<std::optional<MetricExemplar>> exemplars_;
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

/// One family as a collection found it: what the OTLP encoders write.
struct MetricFamilySnapshot {
  enum class Kind { kCounter, kGauge, kHistogram };
  std::string otel_name;  ///< OpenTelemetry's name (MetricRegistry::set_otel_name)
  std::string help;
  std::string unit;  ///< UCUM ("s" for seconds)
  Kind kind = Kind::kCounter;
  struct Point {
    MetricLabels labels;
    double value = 0;               ///< a counter's or a gauge's
    Histogram::Snapshot histogram;  ///< a histogram's
  };
  std::vector<Point> points;
};

class MetricRegistry {
 public:
  /// The metric of family `name` with `labels`, made on first use. A family
  /// keeps the kind, help and unit it was made with (std::invalid_argument
  /// when asked for as another kind, or with other bounds). `unit` is
  /// OpenMetrics's (e.g. "seconds"); a family's name must then end in
  /// "_<unit>". A counter's name is given without "_total".
  Counter& counter(const std::string& name, const std::string& help,
                   const MetricLabels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const std::string& unit = {},
               const MetricLabels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const std::string& unit,
                       const std::vector<double>& bounds, const MetricLabels& labels = {});

  /// Every family in the OpenMetrics 1.0 text format, ending in "# EOF".
  std::string openmetrics() const;

  /// Every family as one OTLP/JSON ExportMetricsServiceRequest (no
  /// newline), for an OTLP JSON lines file: cumulative temporality from
  /// `start_unix_ns` to `now_unix_ns`, the resource's attributes, scope
  /// "nemo.lens". Names as OpenTelemetry writes them: the family's name
  /// without its unit suffix, '_' as '.' (lens_step_duration_seconds ->
  /// lens.step.duration), the unit as UCUM ("seconds" -> "s"); histogram
  /// buckets per bucket (not cumulative), exemplars with their trace and
  /// span ids.
  std::string otlp_json(const Resource& resource, std::int64_t start_unix_ns,
                        std::int64_t now_unix_ns) const;
  /// The same request in the OTLP protobuf encoding (what /v1/metrics takes
  /// as application/x-protobuf).
  std::string otlp_proto(const Resource& resource, std::int64_t start_unix_ns,
                         std::int64_t now_unix_ns) const;

  /// The name family `name` has in OTLP, where the default (its name without
  /// the unit, '_' as '.') splits a word ("lens.step.p2p_wait", not
  /// "lens.step.p2p.wait"). std::invalid_argument when there is no such
  /// family, or `otel_name` is empty.
  void set_otel_name(const std::string& name, const std::string& otel_name);

  /// Every family, its metrics read one at a time (each under its own
  /// mutex), in the order the families were made.
  std::vector<MetricFamilySnapshot> collect() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    std::string name, help, unit;
    std::string otel_name;  // empty: the default
    Kind kind;
    std::vector<double> bounds;
    // Stable addresses: handed out by reference.
    std::deque<std::pair<MetricLabels, std::unique_ptr<Counter>>> counters;
    std::deque<std::pair<MetricLabels, std::unique_ptr<Gauge>>> gauges;
    std::deque<std::pair<MetricLabels, std::unique_ptr<Histogram>>> histograms;
  };
  // The family `name`, made on first use (under mu_).
  Family& family(const std::string& name, const std::string& help, const std::string& unit,
                 Kind kind, const std::vector<double>& bounds);

  mutable std::mutex mu_;
  std::deque<Family> families_;
};

}  // namespace lens
