// Span: attribute, event, link, status and name updates on an open span,
// and its end.
#include "lens/span.h"

#include <algorithm>

#include "live_span.h"
#include "open_span_access.h"
#include "same_bytes.h"
#include "span_clock.h"
#include "telemetry_core.h"

namespace lens {
namespace detail {
namespace {

// The slot for key: the existing attribute, a new one (a slot kept from the
// record's earlier use when there is one, its key compared before it is
// copied), or nullptr (dropped).
Attribute* attribute_slot(LiveSpan* s, std::string_view key) {
  for (auto& a : s->used_attributes())
    if (same_bytes(a.key, key)) return &a;
  if (s->core == nullptr) return nullptr;
  if (s->attributes_used >= s->core->limits.attribute_count) {
    ++s->dropped_attributes_count;
    return nullptr;
  }
  Attribute& a = s->new_attribute();
  if (!same_bytes(a.key, key)) a.key.assign(key);
  return &a;
}

// The common case of setting an attribute of type T, tried before the
// general path: the key is new to the span (no attribute of its length
// yet: one of that length may be a duplicate, which the general path
// resolves), the next kept slot already holds it and a T, and the limit
// allows it. True when it set the value; false, having changed nothing,
// when the general path must (or a foreign thread holds the record). For a
// bool, int or double it makes no call, so its caller needs no stack frame.
template <typename T, typename V>
[[gnu::always_inline]] inline bool set_in_kept_slot(LiveSpan* s, std::string_view key, V& value) {
  if (!owner_try_begin(s)) [[unlikely]]
    return false;
  Attribute* const slots = s->attributes.data();
  const std::uint32_t used = s->attributes_used;
  Attribute* const next = slots + used;
  bool done = false;
  if (next != slots + s->attributes.size() && same_bytes(next->key, key)) {
    T* held = std::get_if<T>(&next->value);
    bool fresh = held != nullptr && s->core != nullptr && used < s->core->limits.attribute_count;
    for (const Attribute* a = slots; fresh && a != next; ++a) fresh = a->key.size() != key.size();
    if (fresh) [[likely]] {
      *held = std::move(value);
      s->attributes_used = used + 1;
      done = true;
    }
  }
  owner_done(s);
  return done;
}

// The general path (out of line, so that the common case's caller needs no
// stack frame): the slot searched for, and the value set in place when the
// slot held a T before (no visit of the old alternative).
template <typename T, typename V>
[[gnu::noinline]] void set_generally(LiveSpan* s, std::string_view key, V value) {
  OwnerChange change(s);
  Attribute* a = attribute_slot(s, key);
  if (a == nullptr) return;
  if (T* held = std::get_if<T>(&a->value))
    *held = std::move(value);
  else
    a->value = T(std::move(value));
}

// Sets key to a T made from value: the common case, else the general path.
template <typename T, typename V>
[[gnu::always_inline]] inline void set_typed(LiveSpan* s, std::string_view key, V value) {
  if (!set_in_kept_slot<T>(s, key, value)) [[unlikely]]
    set_generally<T>(s, key, std::move(value));
}

// A new link of the span, or nullptr: its telemetry has ended it, or the
// link limit drops it (counted). A kept slot is reused in place, emptied.
[[gnu::always_inline]] inline SpanLink* new_link(LiveSpan* s) {
  if (s->core == nullptr) return nullptr;
  const std::uint32_t used = s->links_used;
  if (used >= s->core->limits.link_count) {
    ++s->dropped_links_count;
    return nullptr;
  }
  s->links_used = used + 1;
  if (s->links.data() + used == s->links.data() + s->links.size()) return &s->links.emplace_back();
  SpanLink& kept = s->links[used];
  if (!kept.context.tracestate.empty()) kept.context.tracestate.clear();
  if (!kept.attributes.empty()) kept.attributes.clear();
  kept.dropped_attributes_count = 0;
  return &kept;
}

// A new link's context: its parts, the tracestate copied only when there
// is one (the link's is empty).
[[gnu::always_inline]] inline void set_link_context(SpanContext& link, const SpanContext& context) {
  link.trace_id = context.trace_id;
  link.span_id = context.span_id;
  link.trace_flags = context.trace_flags;
  link.remote = context.remote;
  if (!context.tracestate.empty()) link.tracestate = context.tracestate;
}

}  // namespace
}  // namespace detail

SpanContext Span::context() const { return live_ ? live_->context : SpanContext(); }

void Span::set_bool(std::string_view key, bool value) {
  detail::set_typed<bool>(live_, key, value);
}
void Span::set_int(std::string_view key, std::int64_t value) {
  detail::set_typed<std::int64_t>(live_, key, value);
}
void Span::set_double(std::string_view key, double value) {
  detail::set_typed<double>(live_, key, value);
}
void Span::set_string(std::string_view key, std::string_view value) {
  detail::set_typed<std::string>(live_, key, value);
}
void Span::set_value(std::string_view key, AttributeValue value) {
  std::visit(
      [&](auto& v) { detail::set_typed<std::decay_t<decltype(v)>>(live_, key, std::move(v)); },
      value);
}

void Span::add_event(std::string_view name, Attributes attributes) {
  if (!live_) return;
  detail::OwnerChange change(live_);
  if (live_->core == nullptr) return;
  const auto& limits = live_->core->limits;
  if (live_->events.size() >= limits.event_count) {
    ++live_->dropped_events_count;
    return;
  }
  SpanEvent& e = live_->events.emplace_back();
  e.name.assign(name);
  e.time_unix_ns =
      live_->start_time_unix_ns +
      detail::skewed_elapsed(detail::steady_now_ns() - live_->start_steady_ns, live_->clock_drift);
  e.attributes = std::move(attributes);
  detail::limit_attributes(e.attributes, limits.attribute_per_event_count,
                           e.dropped_attributes_count);
}

void Span::add_link(const SpanContext& context, Attributes attributes) {
  if (!live_ || !context.valid()) return;
  detail::OwnerChange change(live_);
  SpanLink* l = detail::new_link(live_);
  if (l == nullptr) return;
  detail::set_link_context(l->context, context);
  l->attributes = std::move(attributes);
  detail::limit_attributes(l->attributes, live_->core->limits.attribute_per_link_count,
                           l->dropped_attributes_count);
}

void Span::add_bare_link(const SpanContext& context) {
  if (!context.valid()) return;
  detail::OwnerChange change(live_);
  if (SpanLink* l = detail::new_link(live_)) detail::set_link_context(l->context, context);
}

void Span::set_status(StatusCode code, std::string_view message) {
  if (!live_) return;
  detail::OwnerChange change(live_);
  // OTel: Ok is final; Unset never overrides; the message only goes with Error.
  if (live_->status_code == StatusCode::kOk || code == StatusCode::kUnset) return;
  live_->status_code = code;
  live_->status_message.assign(code == StatusCode::kError ? message : std::string_view());
}

void Span::update_name(std::string_view name) {
  if (!live_) return;
  detail::OwnerChange change(live_);
  live_->name.assign(name);
}

// Span::end_recording is open_spans.cc's, beside the end it makes.

void Span::end_at(std::int64_t end_unix_ns) {
  if (live_ == nullptr) return end();
  detail::LiveSpan* s = std::exchange(live_, nullptr);
  const std::int64_t elapsed = std::max<std::int64_t>(0, end_unix_ns - s->start_time_unix_ns);
  detail::finish_span_at(s, s->start_steady_ns + elapsed);
}

}  // namespace lens
