// The OpenMetrics 1.0 text format (openmetrics_text.h).
#include "openmetrics_text.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace lens::detail {
namespace {

bool name_char(char c, bool first, bool colon) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return letter || (colon && c == ':') || (!first && c >= '0' && c <= '9');
}

void append_labels(std::string& out, const MetricLabels& labels, std::string_view le = {}) {
  if (labels.empty() && le.empty()) return;
  out += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += key;
    out += "=\"";
    append_escaped(out, value, true);
    out += '"';
  }
  if (!le.empty()) {
    if (!first) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
}

}  // namespace

void check_metric_name(const std::string& name, const std::string& unit) {
  bool ok = !name.empty();
  for (std::size_t i = 0; ok && i < name.size(); ++i) ok = name_char(name[i], i == 0, true);
  if (!ok)
    throw std::invalid_argument("metric name '" + name + "' is not [a-zA-Z_:][a-zA-Z0-9_:]*");
  if (!unit.empty() && !name.ends_with("_" + unit))
    throw std::invalid_argument("metric name '" + name + "' must end in _" + unit + ", its unit");
}

void check_label_name(const std::string& name) {
  bool ok = !name.empty() && name != "le";
  for (std::size_t i = 0; ok && i < name.size(); ++i) ok = name_char(name[i], i == 0, false);
  if (!ok)
    throw std::invalid_argument("label name '" + name + "' is not [a-zA-Z_][a-zA-Z0-9_]* (nor le)");
}

void append_number(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    std::array<char, 32> buf{};
    const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), value);
    out.append(buf.data(), r.ptr);
  }
}

void append_escaped(std::string& out, std::string_view text, bool quotes) {
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quotes)
      out += "\\\"";
    else
      out += c;
  }
}

void write_family_header(std::string& out, const std::string& name, const char* type,
                         const std::string& help, const std::string& unit) {
  out += "# TYPE " + name + " " + type + "\n";
  if (!unit.empty()) out += "# UNIT " + name + " " + unit + "\n";
  if (!help.empty()) {
    out += "# HELP " + name + " ";
    append_escaped(out, help, true);
    out += '\n';
  }
}

void write_sample(std::string& out, const std::string& name, const MetricLabels& labels,
                  double value) {
  out += name;
  append_labels(out, labels);
  out += ' ';
  append_number(out, value);
  out += '\n';
}

void write_histogram(std::string& out, const std::string& name, const MetricLabels& labels,
                     const Histogram::Snapshot& h) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    std::string le;
    if (i < h.bounds.size())
      append_number(le, h.bounds[i]);
    else
      le = "+Inf";
    out += name + "_bucket";
    append_labels(out, labels, le);
    out += ' ' + std::to_string(cumulative);
    if (const auto& e = h.exemplars[i]) {
      out +=
          " # {trace_id=\"" + e->trace_id.to_hex() + "\",span_id=\"" + e->span_id.to_hex() + "\"} ";
      append_number(out, e->value);
      if (e->time_unix_ns > 0) {
        // Seconds, exactly: whole seconds, then the nine digits of the rest.
        const std::int64_t s = e->time_unix_ns / 1'000'000'000;
        const std::int64_t ns = e->time_unix_ns % 1'000'000'000;
        std::array<char, 16> frac{};
        std::snprintf(frac.data(), frac.size(), "%09lld", static_cast<long long>(ns));
        out += ' ' + std::to_string(s) + '.' + frac.data();
      }
    }
    out += '\n';
  }
  out += name + "_count";
  append_labels(out, labels);
  out += ' ' + std::to_string(h.count) + '\n';
  out += name + "_sum";
  append_labels(out, labels);
  out += ' ';
  append_number(out, h.sum);
  out += '\n';
}

}  // namespace lens::detail
