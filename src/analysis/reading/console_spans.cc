// The OTel Python SDK's console exporter format, read (console_spans.h).
#include "console_spans.h"

#include <cctype>
#include <stdexcept>
#include <string>

namespace lens::analysis {
namespace {

using json = nlohmann::json;

// Days from 1970-01-01 to the civil date (proleptic Gregorian).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

bool digits(std::string_view s, std::size_t at, std::size_t n, int& out) {
  if (at + n > s.size()) return false;
  out = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

// "0x" and 2 x `bytes` hex digits, as lowercase hex without the prefix.
std::string hex_id(const json& v, std::size_t bytes, const char* field) {
  if (!v.is_string()) throw std::runtime_error(std::string(field) + " is not a string");
  std::string s = v.get<std::string>();
  if (s.starts_with("0x") || s.starts_with("0X")) s = s.substr(2);
  if (s.size() != 2 * bytes)
    throw std::runtime_error(std::string(field) + " '" + v.get<std::string>() + "' is not " +
                             std::to_string(2 * bytes) + " hex digits");
  for (char& c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      throw std::runtime_error(std::string(field) + " '" + v.get<std::string>() +
                               "' is not hex");
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return s;
}

std::string unix_ns_text(const json& v, const char* field) {
  const auto ns = v.is_string() ? iso8601_unix_ns(v.get<std::string>()) : std::nullopt;
  if (!ns) throw std::runtime_error(std::string(field) + " is not an ISO-8601 UTC time");
  return std::to_string(*ns);
}

json any_value(const json& v) {
  if (v.is_boolean()) return {{"boolValue", v.get<bool>()}};
  if (v.is_number_integer()) return {{"intValue", std::to_string(v.get<std::int64_t>())}};
  if (v.is_number_unsigned()) return {{"intValue", std::to_string(v.get<std::uint64_t>())}};
  if (v.is_number_float()) return {{"doubleValue", v.get<double>()}};
  if (v.is_string()) return {{"stringValue", v.get<std::string>()}};
  if (v.is_array()) {
    json values = json::array();
    for (const auto& item : v) values.push_back(any_value(item));
    return {{"arrayValue", {{"values", values}}}};
  }
  return {{"stringValue", v.dump()}};
}

json attributes_of(const json& object) {
  json out = json::array();
  if (object.is_object())
    for (const auto& [key, value] : object.items())
      if (!value.is_null()) out.push_back({{"key", key}, {"value", any_value(value)}});
  return out;
}

int kind_of(const json& v) {
  const std::string k = v.is_string() ? v.get<std::string>() : "";
  if (k.ends_with("SERVER")) return 2;
  if (k.ends_with("CLIENT")) return 3;
  if (k.ends_with("PRODUCER")) return 4;
  if (k.ends_with("CONSUMER")) return 5;
  return 1;
}

}  // namespace

std::optional<std::int64_t> iso8601_unix_ns(std::string_view s) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  if (!digits(s, 0, 4, y) || s.size() < 19 || s[4] != '-' || !digits(s, 5, 2, mo) ||
      s[7] != '-' || !digits(s, 8, 2, d) || (s[10] != 'T' && s[10] != ' ') ||
      !digits(s, 11, 2, h) || s[13] != ':' || !digits(s, 14, 2, mi) || s[16] != ':' ||
      !digits(s, 17, 2, se))
    return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return std::nullopt;
  std::size_t at = 19;
  std::int64_t fraction_ns = 0;
  if (at < s.size() && s[at] == '.') {
    ++at;
    int n = 0;
    std::int64_t scale = 100'000'000;
    while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at]))) {
      if (n < 9) fraction_ns += (s[at] - '0') * scale;
      scale /= 10;
      ++n;
      ++at;
    }
    if (n == 0) return std::nullopt;
  }
  const std::string_view zone = s.substr(at);
  if (zone != "Z" && zone != "+00:00" && zone != "+0000") return std::nullopt;
  const std::int64_t seconds = days_from_civil(y, static_cast<unsigned>(mo),
                                               static_cast<unsigned>(d)) *
                                   86400 +
                               h * 3600 + mi * 60 + se;
  return seconds * 1'000'000'000 + fraction_ns;
}

bool is_console_span(const json& line) {
  if (!line.is_object() || !line.contains("name")) return false;
  const auto c = line.find("context");
  return c != line.end() && c->is_object() && c->contains("trace_id");
}

json request_of_console_span(const json& in) {
  const json& context = in.at("context");
  json span = {{"traceId", hex_id(context.at("trace_id"), 16, "context.trace_id")},
               {"spanId", hex_id(context.value("span_id", json()), 8, "context.span_id")},
               {"name", in.at("name").is_string() ? in.at("name").get<std::string>() : ""},
               {"kind", kind_of(in.value("kind", json()))},
               {"startTimeUnixNano", unix_ns_text(in.value("start_time", json()), "start_time")},
               {"endTimeUnixNano", unix_ns_text(in.value("end_time", json()), "end_time")},
               {"attributes", attributes_of(in.value("attributes", json()))}};
  if (const auto p = in.find("parent_id"); p != in.end() && !p->is_null())
    span["parentSpanId"] = hex_id(*p, 8, "parent_id");
  json events = json::array();
  for (const auto& e : in.value("events", json::array())) {
    if (!e.is_object()) continue;
    events.push_back({{"name", e.value("name", "")},
                      {"timeUnixNano", unix_ns_text(e.value("timestamp", json()), "event timestamp")},
                      {"attributes", attributes_of(e.value("attributes", json()))}});
  }
  span["events"] = events;
  json links = json::array();
  for (const auto& l : in.value("links", json::array())) {
    if (!l.is_object() || !l.contains("context")) continue;
    const json& lc = l.at("context");
    links.push_back({{"traceId", hex_id(lc.at("trace_id"), 16, "link trace_id")},
                     {"spanId", hex_id(lc.value("span_id", json()), 8, "link span_id")},
                     {"attributes", attributes_of(l.value("attributes", json()))}});
  }
  span["links"] = links;
  const json status = in.value("status", json::object());
  const std::string code = status.is_object() ? status.value("status_code", "UNSET") : "UNSET";
  span["status"] = {{"code", code == "OK" ? 1 : code == "ERROR" ? 2 : 0}};
  if (status.is_object() && status.contains("description") && status["description"].is_string())
    span["status"]["message"] = status["description"];
  const json resource = in.value("resource", json::object());
  const json resource_attributes =
      attributes_of(resource.is_object() ? resource.value("attributes", json::object()) : json());
  return {{"resourceSpans",
           json::array({{{"resource", {{"attributes", resource_attributes}}},
                         {"scopeSpans", json::array({{{"scope", json::object()},
                                                      {"spans", json::array({span})}}})}}})}};
}

}  // namespace lens::analysis
