// CurrentSpanScope and the thread's current span context.
#include "current_span.h"

#include "lens/span.h"
#include "live_span.h"

namespace lens {
namespace detail {

CurrentContext& current_context() {
  thread_local CurrentContext c;
  return c;
}

}  // namespace detail

CurrentSpanScope::CurrentSpanScope(const Span& span) {
  if (!span.live_) return;
  auto& cur = detail::current_context();
  if (cur.has) previous_ = cur.context;
  cur.has = true;
  cur.context = span.live_->context;
  active_ = true;
}

CurrentSpanScope::~CurrentSpanScope() {
  if (!active_) return;
  auto& cur = detail::current_context();
  cur.has = previous_.has_value();
  if (previous_) cur.context = std::move(*previous_);
}

SpanContext current_span_context() {
  auto& cur = detail::current_context();
  return cur.has ? cur.context : SpanContext();
}

}  // namespace lens
