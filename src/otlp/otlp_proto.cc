#include "lens/otlp_proto.h"

#include <cstring>
#include <vector>

#include "lens/otlp_proto_writer.h"
#include "otlp_encoding.h"

namespace lens {
namespace {

void span(ProtoWriter& w, const SpanRecord& s) {
  w.bytes_field(1, s.context.trace_id.bytes().data(), TraceId::kSize);
  w.bytes_field(2, s.context.span_id.bytes().data(), SpanId::kSize);
  w.string_field(3, s.context.tracestate);
  if (s.has_parent()) w.bytes_field(4, s.parent_span_id.bytes().data(), SpanId::kSize);
  w.string_field(5, s.name);
  w.uint_field(6, static_cast<std::uint64_t>(s.kind));
  w.fixed64_field(7, static_cast<std::uint64_t>(s.start_time_unix_ns));
  w.fixed64_field(8, static_cast<std::uint64_t>(s.end_time_unix_ns));
  append_otlp_proto_attributes(w, 9, s.attributes);
  w.uint_field(10, s.dropped_attributes_count);
  for (const auto& e : s.events) {
    const auto ev = w.begin(11);
    w.fixed64_field(1, static_cast<std::uint64_t>(e.time_unix_ns));
    w.string_field(2, e.name);
    append_otlp_proto_attributes(w, 3, e.attributes);
    w.uint_field(4, e.dropped_attributes_count);
    w.end(ev);
  }
  w.uint_field(12, s.dropped_events_count);
  for (const auto& l : s.links) {
    const auto ln = w.begin(13);
    w.bytes_field(1, l.context.trace_id.bytes().data(), TraceId::kSize);
    w.bytes_field(2, l.context.span_id.bytes().data(), SpanId::kSize);
    w.string_field(3, l.context.tracestate);
    append_otlp_proto_attributes(w, 4, l.attributes);
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
  ProtoWriter w(out);
  const auto rs = w.begin(1);   // ExportTraceServiceRequest.resource_spans
  const auto res = w.begin(1);  // ResourceSpans.resource
  append_otlp_proto_attributes(w, 1, resource.attributes);
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
