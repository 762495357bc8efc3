#include "lens/otlp_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "otlp_encoding.h"
#include "utf8.h"

namespace lens {
namespace {

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void append_quoted_int(std::string& out, std::int64_t v) {
  out.push_back('"');
  append_int(out, v);
  out.push_back('"');
}

void append_double(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "\"NaN\"";
  } else if (std::isinf(v)) {
    out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  } else {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
  }
}

void append_hex_id(std::string& out, const TraceId& id) {
  const std::size_t at = out.size();
  out.append(34, '"');
  id.write_hex(out.data() + at + 1);
}

void append_hex_id(std::string& out, const SpanId& id) {
  const std::size_t at = out.size();
  out.append(18, '"');
  id.write_hex(out.data() + at + 1);
}

template <typename T>
void append_array(std::string& out, const std::vector<T>& values,
                  void (*one)(std::string&, const T&)) {
  out += "{\"arrayValue\":{\"values\":[";
  bool first = true;
  for (const auto& v : values) {
    if (!first) out.push_back(',');
    first = false;
    one(out, v);
  }
  out += "]}}";
}

void append_any_string(std::string& out, const std::string& v) {
  out += "{\"stringValue\":";
  append_json_string(out, v);
  out.push_back('}');
}
void append_any_bool(std::string& out, const bool& v) {
  out += v ? "{\"boolValue\":true}" : "{\"boolValue\":false}";
}
void append_any_int(std::string& out, const std::int64_t& v) {
  out += "{\"intValue\":";
  append_quoted_int(out, v);
  out.push_back('}');
}
void append_any_double(std::string& out, const double& v) {
  out += "{\"doubleValue\":";
  append_double(out, v);
  out.push_back('}');
}

void append_any_value(std::string& out, const AttributeValue& value) {
  struct Visitor {
    std::string& out;
    void operator()(bool v) const { append_any_bool(out, v); }
    void operator()(std::int64_t v) const { append_any_int(out, v); }
    void operator()(double v) const { append_any_double(out, v); }
    void operator()(const std::string& v) const { append_any_string(out, v); }
    void operator()(const std::vector<bool>& v) const {
      out += "{\"arrayValue\":{\"values\":[";
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out.push_back(',');
        append_any_bool(out, v[i]);
      }
      out += "]}}";
    }
    void operator()(const std::vector<std::int64_t>& v) const {
      append_array<std::int64_t>(out, v, &append_any_int);
    }
    void operator()(const std::vector<double>& v) const {
      append_array<double>(out, v, &append_any_double);
    }
    void operator()(const std::vector<std::string>& v) const {
      append_array<std::string>(out, v, &append_any_string);
    }
  };
  std::visit(Visitor{out}, value);
}

void append_attributes(std::string& out, const Attributes& attributes) {
  out += "\"attributes\":[";
  bool first = true;
  for (const auto& a : attributes) {
    if (!first) out.push_back(',');
    first = false;
    out += "{\"key\":";
    append_json_string(out, a.key);
    out += ",\"value\":";
    append_any_value(out, a.value);
    out.push_back('}');
  }
  out.push_back(']');
}

void append_span(std::string& out, const SpanRecord& s) {
  out += "{\"traceId\":";
  append_hex_id(out, s.context.trace_id);
  out += ",\"spanId\":";
  append_hex_id(out, s.context.span_id);
  if (!s.context.tracestate.empty()) {
    out += ",\"traceState\":";
    append_json_string(out, s.context.tracestate);
  }
  if (s.has_parent()) {
    out += ",\"parentSpanId\":";
    append_hex_id(out, s.parent_span_id);
  }
  out += ",\"flags\":";
  append_uint(out, detail::otlp_flags(s.context.trace_flags, s.parent_remote));
  out += ",\"name\":";
  append_json_string(out, s.name);
  out += ",\"kind\":";
  append_uint(out, static_cast<unsigned>(s.kind));
  out += ",\"startTimeUnixNano\":";
  append_quoted_int(out, s.start_time_unix_ns);
  out += ",\"endTimeUnixNano\":";
  append_quoted_int(out, s.end_time_unix_ns);
  out.push_back(',');
  append_attributes(out, s.attributes);
  out += ",\"droppedAttributesCount\":";
  append_uint(out, s.dropped_attributes_count);
  out += ",\"events\":[";
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& e = s.events[i];
    if (i) out.push_back(',');
    out += "{\"timeUnixNano\":";
    append_quoted_int(out, e.time_unix_ns);
    out += ",\"name\":";
    append_json_string(out, e.name);
    out.push_back(',');
    append_attributes(out, e.attributes);
    out += ",\"droppedAttributesCount\":";
    append_uint(out, e.dropped_attributes_count);
    out.push_back('}');
  }
  out += "],\"droppedEventsCount\":";
  append_uint(out, s.dropped_events_count);
  out += ",\"links\":[";
  for (std::size_t i = 0; i < s.links.size(); ++i) {
    const auto& l = s.links[i];
    if (i) out.push_back(',');
    out += "{\"traceId\":";
    append_hex_id(out, l.context.trace_id);
    out += ",\"spanId\":";
    append_hex_id(out, l.context.span_id);
    if (!l.context.tracestate.empty()) {
      out += ",\"traceState\":";
      append_json_string(out, l.context.tracestate);
    }
    out.push_back(',');
    append_attributes(out, l.attributes);
    out += ",\"droppedAttributesCount\":";
    append_uint(out, l.dropped_attributes_count);
    out += ",\"flags\":";
    append_uint(out, detail::otlp_flags(l.context.trace_flags, l.context.remote));
    out.push_back('}');
  }
  out += "],\"droppedLinksCount\":";
  append_uint(out, s.dropped_links_count);
  out += ",\"status\":{";
  if (!s.status_message.empty()) {
    out += "\"message\":";
    append_json_string(out, s.status_message);
    out.push_back(',');
  }
  out += "\"code\":";
  append_uint(out, static_cast<unsigned>(s.status_code));
  out += "}}";
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
      ++i;
      continue;
    }
    const std::size_t len = detail::utf8_sequence_length(s, i);
    if (len == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD for each byte that is not valid UTF-8
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  out.push_back('"');
}

void append_otlp_json_attributes(std::string& out, const Attributes& attributes) {
  append_attributes(out, attributes);
}

void append_otlp_json_double(std::string& out, double value) { append_double(out, value); }

void append_otlp_json(std::string& out, const Resource& resource,
                      std::span<const SpanRecord* const> spans) {
  const std::vector<const InstrumentationScope*> scopes = detail::scopes_in_order(spans);
  out += "{\"resourceSpans\":[{\"resource\":{";
  append_attributes(out, resource.attributes);
  out += ",\"droppedAttributesCount\":0},\"scopeSpans\":[";
  for (std::size_t k = 0; k < scopes.size(); ++k) {
    if (k) out.push_back(',');
    out += "{\"scope\":{\"name\":";
    append_json_string(out, scopes[k] ? std::string_view(scopes[k]->name) : std::string_view());
    if (scopes[k] && !scopes[k]->version.empty()) {
      out += ",\"version\":";
      append_json_string(out, scopes[k]->version);
    }
    out += "},\"spans\":[";
    bool first = true;
    for (const SpanRecord* s : spans) {
      if (s->scope != scopes[k]) continue;
      if (!first) out.push_back(',');
      first = false;
      append_span(out, *s);
    }
    out += "]}";
  }
  out += "]}]}";
}

}  // namespace lens
