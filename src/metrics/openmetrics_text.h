// The OpenMetrics 1.0 text format, written (lens/metrics.h). Internal header
// of the metrics part.
//
// What the writer guarantees: names checked when a metric is made; label
// values and help escaped (backslash, double quote, line feed); numbers as
// the shortest text that reads back the same (+Inf, -Inf, NaN spelled as
// the format says); histogram buckets cumulative with their "le" label and
// a last "+Inf" bucket equal to _count; an exemplar after a bucket only
// when the bucket has one, its labels trace_id and span_id (48 of the 128
// characters the format allows) and its timestamp in seconds.
#pragma once

#include <string>
#include <string_view>

#include "lens/metrics.h"

namespace lens::detail {

// std::invalid_argument unless [a-zA-Z_:][a-zA-Z0-9_:]*, and, with a unit,
// the name ends in "_<unit>".
void check_metric_name(const std::string& name, const std::string& unit);
// std::invalid_argument unless [a-zA-Z_][a-zA-Z0-9_]* and not "le".
void check_label_name(const std::string& name);

void append_number(std::string& out, double value);
void append_escaped(std::string& out, std::string_view text, bool quotes);
void write_family_header(std::string& out, const std::string& name, const char* type,
                         const std::string& help, const std::string& unit);
void write_sample(std::string& out, const std::string& name, const MetricLabels& labels,
                  double value);
void write_histogram(std::string& out, const std::string& name, const MetricLabels& labels,
                     const Histogram::Snapshot& h);

}  // namespace lens::detail
