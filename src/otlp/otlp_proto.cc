#include "lens/otlp_proto.h"

#include <cstring>
#include <vector>

#include "otlp_encoding.h"
#include "utf8.h"

namespace lens {
namespace {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void varint(std::uint64_t v) {
    char buf[10];
    int n = 0;
    while (v >= 0x80) {
      buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    buf[n++] = static_cast<char>(v);
    out_.append(buf, static_cast<std::size_t>(n));
  }
  void tag(std::uint32_t field, WireType type) {
    varint((static_cast<std::uint64_t>(field) << 3) | type);
  }

  void uint_field(std::uint32_t field, std::uint64_t v) {
    if (v == 0) return;  // proto3 default
    tag(field, kVarint);
    varint(v);
  }
  void int64_field(std::uint32_t field, std::int64_t v) {
    if (v == 0) return;
    tag(field, kVarint);
    varint(static_cast<std::uint64_t>(v));
  }
  void bool_field(std::uint32_t field, bool v) {
    tag(field, kVarint);
    varint(v ? 1 : 0);
  }
  void fixed64_field(std::uint32_t field, std::uint64_t v) {
    if (v == 0) return;
    tag(field, kFixed64);
    char buf[8];
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (8 * i));
    out_.append(buf, 8);
  }
  void fixed32_field(std::uint32_t field, std::uint32_t v) {
    if (v == 0) return;
    tag(field, kFixed32);
    char buf[4];
    for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>(v >> (8 * i));
    out_.append(buf, 4);
  }
  void double_field(std::uint32_t field, double v) {
    tag(field, kFixed64);
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    char buf[8];
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(bits >> (8 * i));
    out_.append(buf, 8);
  }
  void bytes_field(std::uint32_t field, const void* data, std::size_t n, bool keep_empty = false) {
    if (n == 0 && !keep_empty) return;
    tag(field, kLength);
    varint(n);
    out_.append(static_cast<const char*>(data), n);
  }
  // OTLP strings must be UTF-8: invalid bytes become U+FFFD, as in JSON.
  void string_field(std::uint32_t field, std::string_view s, bool keep_empty = false) {
    if (detail::valid_utf8(s)) {
      bytes_field(field, s.data(), s.size(), keep_empty);
    } else {
      const std::string fixed = detail::with_invalid_utf8_replaced(s);
      bytes_field(field, fixed.data(), fixed.size(), keep_empty);
    }
  }

  // Starts a nested message; returns the position of its length slot.
  std::size_t begin(std::uint32_t field) {
    tag(field, kLength);
    const std::size_t at = out_.size();
    out_.append(4, '\0');
    return at;
  }
  // Fills the slot with the message's length as a 4-byte varint, which
  // holds at most 2^28 - 1: a longer message marks the request as too large.
  void end(std::size_t at) {
    const std::size_t n = out_.size() - at - 4;
    if (n >= kMaxNestedBytes) too_large_ = true;
    out_[at] = static_cast<char>((n & 0x7f) | 0x80);
    out_[at + 1] = static_cast<char>(((n >> 7) & 0x7f) | 0x80);
    out_[at + 2] = static_cast<char>(((n >> 14) & 0x7f) | 0x80);
    out_[at + 3] = static_cast<char>((n >> 21) & 0x7f);
  }

  static constexpr std::size_t kMaxNestedBytes = std::size_t{1} << 28;
  bool too_large() const { return too_large_; }

 private:
  std::string& out_;
  bool too_large_ = false;
};

// AnyValue: string 1, bool 2, int 3, double 4, array 5 (ArrayValue.values 1).
void scalar(Writer& w, bool v) { w.bool_field(2, v); }
void scalar(Writer& w, std::int64_t v) {
  w.tag(3, kVarint);
  w.varint(static_cast<std::uint64_t>(v));
}
void scalar(Writer& w, double v) { w.double_field(4, v); }
void scalar(Writer& w, const std::string& v) { w.string_field(1, v, true); }

template <typename Vector>
void array(Writer& w, const Vector& values) {
  const auto arr = w.begin(5);
  for (const auto& v : values) {
    const auto item = w.begin(1);
    if constexpr (std::is_same_v<Vector, std::vector<bool>>)
      scalar(w, static_cast<bool>(v));  // vector<bool> yields proxies
    else
      scalar(w, v);
    w.end(item);
  }
  w.end(arr);
}

void any_value(Writer& w, const AttributeValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::int64_t> ||
                      std::is_same_v<T, double> || std::is_same_v<T, std::string>)
          scalar(w, v);
        else
          array(w, v);
      },
      value);
}

// KeyValue: key 1, value 2.
void attributes(Writer& w, std::uint32_t field, const Attributes& attrs) {
  for (const auto& a : attrs) {
    const auto kv = w.begin(field);
    w.string_field(1, a.key);
    const auto v = w.begin(2);
    any_value(w, a.value);
    w.end(v);
    w.end(kv);
  }
}

void span(Writer& w, const SpanRecord& s) {
  w.bytes_field(1, s.context.trace_id.bytes().data(), TraceId::kSize);
  w.bytes_field(2, s.context.span_id.bytes().data(), SpanId::kSize);
  w.string_field(3, s.context.tracestate);
  if (s.has_parent()) w.bytes_field(4, s.parent_span_id.bytes().data(), SpanId::kSize);
  w.string_field(5, s.name);
  w.uint_field(6, static_cast<std::uint64_t>(s.kind));
  w.fixed64_field(7, static_cast<std::uint64_t>(s.start_time_unix_ns));
  w.fixed64_field(8, static_cast<std::uint64_t>(s.end_time_unix_ns));
  attributes(w, 9, s.attributes);
  w.uint_field(10, s.dropped_attributes_count);
  for (const auto& e : s.events) {
    const auto ev = w.begin(11);
    w.fixed64_field(1, static_cast<std::uint64_t>(e.time_unix_ns));
    w.string_field(2, e.name);
    attributes(w, 3, e.attributes);
    w.uint_field(4, e.dropped_attributes_count);
    w.end(ev);
  }
  w.uint_field(12, s.dropped_events_count);
  for (const auto& l : s.links) {
    const auto ln = w.begin(13);
    w.bytes_field(1, l.context.trace_id.bytes().data(), TraceId::kSize);
    w.bytes_field(2, l.context.span_id.bytes().data(), SpanId::kSize);
    w.string_field(3, l.context.tracestate);
    attributes(w, 4, l.attributes);
    w.uint_field(5, l.dropped_attributes_count);
    w.fixed32_field(6, detail::otlp_flags(l.context.trace_flags, l.context.remote));
    w.end(ln);
  }
  w.uint_field(14, s.dropped_links_count);
  if (s.status_code != StatusCode::kUnset || !s.status_message.empty()) {
    const auto st = w.begin(15);
    w.string_field(2, s.status_message);
    w.uint_field(3, static_cast<std::uint64_t>(s.status_code));
    w.end(st);
  }
  w.fixed32_field(16, detail::otlp_flags(s.context.trace_flags, s.parent_remote));
}

}  // namespace

bool append_otlp_proto(std::string& out, const Resource& resource,
                       std::span<const SpanRecord* const> spans) {
  const std::vector<const InstrumentationScope*> scopes = detail::scopes_in_order(spans);
  Writer w(out);
  const auto rs = w.begin(1);   // ExportTraceServiceRequest.resource_spans
  const auto res = w.begin(1);  // ResourceSpans.resource
  attributes(w, 1, resource.attributes);
  w.end(res);
  for (const InstrumentationScope* scope : scopes) {
    const auto ss = w.begin(2);  // ResourceSpans.scope_spans
    const auto sc = w.begin(1);  // ScopeSpans.scope
    if (scope) {
      w.string_field(1, scope->name);
      w.string_field(2, scope->version);
    }
    w.end(sc);
    for (const SpanRecord* s : spans) {
      if (s->scope != scope) continue;
      const auto sp = w.begin(2);  // ScopeSpans.spans
      span(w, *s);
      w.end(sp);
    }
    w.end(ss);
  }
  w.end(rs);
  return !w.too_large();
}

}  // namespace lens
