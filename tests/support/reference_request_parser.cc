// The run reader's request parser as it was over nlohmann::json's DOM: the
// reference the On-Demand parser (run_reader.cc) is compared with, line by
// line (RunReader.TheParserReadsEveryLineAsTheDomReferenceDoes).
#include "reference_request_parser.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "json_depth.h"

namespace lens::analysis {

using json = nlohmann::json;

namespace {

std::int64_t int_field(const json& v, const char* what) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_string())
    if (auto i = strict_int(v.get_ref<const std::string&>())) return *i;
  throw std::runtime_error(std::string(what) + " is not an integer");
}

// An AnyValue as text. proto3 JSON leaves out a default value, so {} is "".
std::string scalar_text(const json& v) {
  if (!v.is_object()) throw std::runtime_error("attribute value is not an object");
  if (auto it = v.find("stringValue"); it != v.end()) return it->get<std::string>();
  if (auto it = v.find("intValue"); it != v.end())
    return std::to_string(int_field(*it, "intValue"));
  if (auto it = v.find("boolValue"); it != v.end()) return it->get<bool>() ? "true" : "false";
  if (auto it = v.find("doubleValue"); it != v.end()) {
    if (it->is_number()) {
      // The shortest text that reads back as the same double.
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, it->get<double>());
      return std::string(buf, r.ptr);
    }
    const std::string& d = it->get_ref<const std::string&>();  // "NaN", "Infinity", "-Infinity"
    if (d != "NaN" && d != "Infinity" && d != "-Infinity")
      throw std::runtime_error("doubleValue is not a number");
    return d;
  }
  if (auto it = v.find("bytesValue"); it != v.end()) return it->get<std::string>();
  // arrayValue, kvlistValue: their JSON text; the line's depth was checked
  // before it was parsed, so printing it recurses a bounded number of times.
  return v.empty() ? std::string() : v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The type scalar_text's value had: 'i', 'd' (a finite number), 'b', or 's'.
char scalar_type(const json& v) {
  if (!v.is_object()) return 's';
  if (v.contains("intValue")) return 'i';
  if (v.contains("boolValue")) return 'b';
  if (auto it = v.find("doubleValue"); it != v.end() && it->is_number()) return 'd';
  return 's';
}

// A fixed64 time in nanoseconds: a decimal string (OTLP/JSON) or a number.
std::int64_t nanos(const json& v, const char* what) {
  const std::int64_t n = int_field(v, what);
  if (n < 0) throw std::runtime_error(std::string(what) + " is negative");
  return n;
}

// A trace or span id of `hex_digits` hex digits, in either case; returned in
// lowercase. An empty id is "none" where `optional`; an id of zeros is
// invalid (OTel), except for a parent, where it also means "none".
std::string id_field(const json& v, std::size_t hex_digits, const char* what, bool optional) {
  if (!v.is_string()) throw std::runtime_error(std::string(what) + " is not a string");
  std::string id = v.get<std::string>();
  if (id.empty() && optional) return id;
  bool zero = true;
  for (char& c : id) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      throw std::runtime_error(std::string(what) + " '" + id.substr(0, 40) + "' is not hex");
    zero &= c == '0';
  }
  if (id.size() != hex_digits)
    throw std::runtime_error(std::string(what) + " '" + id.substr(0, 40) + "' is not " +
                             std::to_string(hex_digits) + " hex digits");
  if (zero) {
    if (optional) return std::string();
    throw std::runtime_error(std::string(what) + " is all zeros (an invalid id)");
  }
  return id;
}

// An enum in proto3 JSON: its number, or its name (looked up in `names`).
int enum_field(const json& v, std::initializer_list<std::string_view> names, const char* what) {
  if (v.is_string()) {
    int i = 0;
    for (auto n : names) {
      if (v.get_ref<const std::string&>() == n) return i;
      ++i;
    }
  }
  return static_cast<int>(int_field(v, what));
}

// An array member that proto3 JSON may leave out when empty.
const json& array_or_empty(const json& object, const char* key) {
  static const json kEmpty = json::array();
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return kEmpty;
  if (!it->is_array()) throw std::runtime_error(std::string(key) + " is not an array");
  return *it;
}

std::string string_or_empty(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return {};
  return it->get<std::string>();
}

}  // namespace

void parse_request_reference(RankFile& file, const std::string& line) {
  if (!json_depth_within(line))
    throw std::runtime_error("nested deeper than " + std::to_string(kMaxJsonDepth) +
                             " levels (the reader's limit)");
  json req = json::parse(line);
  if (!req.is_object()) throw std::runtime_error("the line is not a JSON object");
  for (const auto& rs : array_or_empty(req, "resourceSpans")) {
    std::map<std::string, std::string> resource;
    if (auto r = rs.find("resource"); r != rs.end() && r->is_object())
      for (const auto& kv : array_or_empty(*r, "attributes")) {
        const std::string key = string_or_empty(kv, "key");
        resource[key] = kv.contains("value") ? scalar_text(kv.at("value")) : std::string();
        file.resource_types[key] = kv.contains("value") ? scalar_type(kv.at("value")) : 's';
      }
    const int rank = take_resource(file, resource);
    const std::uint64_t process = file.process;
    for (const auto& ss : array_or_empty(rs, "scopeSpans")) {
      for (const auto& s : array_or_empty(ss, "spans")) {
        SpanRow row;
        row.rank = rank;
        row.process = process;
        if (!s.contains("traceId") || !s.contains("spanId"))
          throw std::runtime_error("a span has no traceId or spanId");
        row.trace_id = id_field(s.at("traceId"), 32, "traceId", false);
        row.span_id = id_field(s.at("spanId"), 16, "spanId", false);
        if (auto p = s.find("parentSpanId"); p != s.end())
          row.parent_span_id = id_field(*p, 16, "parentSpanId", true);
        row.name = string_or_empty(s, "name");
        if (auto t = s.find("startTimeUnixNano"); t != s.end())
          row.start_ns = nanos(*t, "startTimeUnixNano");
        if (auto t = s.find("endTimeUnixNano"); t != s.end())
          row.end_ns = nanos(*t, "endTimeUnixNano");
        if (auto k = s.find("kind"); k != s.end())
          row.kind = enum_field(*k,
                                {"SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
                                 "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"},
                                "kind");
        if (auto st = s.find("status"); st != s.end() && st->is_object()) {
          if (auto c = st->find("code"); c != st->end())
            row.status_code = enum_field(
                *c, {"STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"}, "status code");
          row.status_message = string_or_empty(*st, "message");
        }
        for (const auto& kv : array_or_empty(s, "attributes")) {
          const std::string key = string_or_empty(kv, "key");
          if (kv.contains("value"))
            row.attributes.set(key, scalar_text(kv.at("value")), scalar_type(kv.at("value")));
          else
            row.attributes.set(key, "", 's');
        }
        for (const auto& l : array_or_empty(s, "links")) {
          if (!l.contains("traceId") || !l.contains("spanId"))
            throw std::runtime_error("a link has no traceId or spanId");
          row.links.emplace_back(id_field(l.at("traceId"), 32, "link traceId", false),
                                 id_field(l.at("spanId"), 16, "link spanId", false));
        }
        file.spans.push_back(std::move(row));
      }
    }
  }
}

}  // namespace lens::analysis
