// create_linked_span (linked_span.h).
#include "lens/linked_span.h"

#include "pipeline_counters.h"

namespace lens {

namespace {

// The span: started under the caller's current span (or in the remote's
// trace when there is none), its attributes set by `set_attributes`, then
// linked to the remote.
template <typename SetAttributes>
Span linked_span(const Tracer& tracer, std::string_view name,
                 const std::optional<SpanContext>& remote, SetAttributes&& set_attributes) {
  if (!tracer.enabled(SpanGroup::kCommunication)) return Span();
  Span span;
  if (!current_span_context().valid() && remote && remote->valid()) {
    // No local parent (e.g. the step group is off): still join the remote's
    // trace, so the stages of a step stay in one trace.
    StartOptions join;
    join.context = SpanContext{remote->trace_id, SpanId(), remote->trace_flags};
    span = tracer.start_span(SpanGroup::kCommunication, name, join);
  } else {
    span = tracer.start_span(SpanGroup::kCommunication, name);
  }
  set_attributes(span);
  auto& counters = detail::pipeline_counters();
  if (remote && remote->valid()) {
    span.add_link(*remote);
    detail::count(counters.linked_spans);
  } else {
    detail::count(counters.linked_spans_without_link);
  }
  return span;
}

}  // namespace

Span create_linked_span(const Tracer& tracer, std::string_view name,
                        const std::optional<SpanContext>& remote, Attributes attributes) {
  return linked_span(tracer, name, remote, [&](Span& span) {
    for (auto& a : attributes) span.set_attribute(a.key, std::move(a.value));
  });
}

Span create_linked_span(const Tracer& tracer, std::string_view name,
                        const std::optional<SpanContext>& remote,
                        std::initializer_list<BorrowedAttribute> attributes) {
  return linked_span(tracer, name, remote, [&](Span& span) {
    for (const auto& a : attributes)
      std::visit([&](const auto& value) { span.set_attribute(a.key, value); }, a.value);
  });
}

}  // namespace lens
