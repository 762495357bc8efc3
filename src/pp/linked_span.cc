// create_linked_span (linked_span.h).
#include "lens/linked_span.h"

#include "pipeline_counters.h"

namespace lens {

Span create_linked_span(const Tracer& tracer, std::string_view name,
                        const std::optional<SpanContext>& remote, Attributes attributes) {
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
  for (auto& a : attributes) span.set_attribute(a.key, std::move(a.value));
  auto& counters = detail::pipeline_counters();
  if (remote && remote->valid()) {
    span.add_link(*remote);
    detail::count(counters.linked_spans);
  } else {
    detail::count(counters.linked_spans_without_link);
  }
  return span;
}

}  // namespace lens
