// Span: attribute, event, link, status and name updates on an open span,
// and its end.
#include "lens/span.h"

#include "live_span.h"
#include "open_span_access.h"
#include "same_bytes.h"
#include "span_clock.h"
#include "telemetry_core.h"

namespace lens {
namespace detail {
namespace {

// A slot for a new key past the kept ones (a record's first use, or more
// attributes than its last use had), or nullptr (dropped).
[[gnu::noinline]] Attribute* new_attribute_slot(LiveSpan* s, std::string_view key) {
  if (s->core == nullptr) return nullptr;
  if (s->attributes_used >= s->core->limits.attribute_count) {
    ++s->dropped_attributes_count;
    return nullptr;
  }
  Attribute& a = s->new_attribute();
  if (!same_bytes(a.key, key)) a.key.assign(key);
  return &a;
}

// The slot for key: the existing attribute, a new one, or nullptr
// (dropped). Inline: most spans set a few attributes once each, in the
// order their call site always sets them, so the slot is the next kept one
// and already holds the key (compared, not copied).
[[gnu::always_inline]] inline Attribute* attribute_slot(LiveSpan* s, std::string_view key) {
  Attribute* const slots = s->attributes.data();
  Attribute* const next = slots + s->attributes_used;
  for (Attribute* a = slots; a != next; ++a)
    if (same_bytes(a->key, key)) return a;
  if (next != s->attributes.data() + s->attributes.size() && s->core != nullptr &&
      s->attributes_used < s->core->limits.attribute_count) [[likely]] {
    ++s->attributes_used;
    if (!same_bytes(next->key, key)) next->key.assign(key);
    return next;
  }
  return new_attribute_slot(s, key);
}

// Sets key's value with `assign`, as the span's owner.
template <typename Assign>
[[gnu::always_inline]] inline void change_attribute(LiveSpan* s, std::string_view key,
                                                    Assign&& assign) {
  OwnerChange change(s);
  if (Attribute* a = attribute_slot(s, key)) assign(a->value);
}

// The common case of setting an attribute, tried before the general path:
// the key is new to the span (no attribute of its length yet: one of that
// length may be a duplicate, which the general path resolves), the next
// kept slot already holds it and a value of the same type, and the limit
// allows it. True when it set the value; false, having changed nothing,
// when the general path must (or a foreign thread holds the record). Its
// calls are all on the general path, so this one needs no stack frame.
template <typename T>
[[gnu::always_inline]] inline bool set_in_kept_slot(LiveSpan* s, std::string_view key, T value) {
  if (!owner_try_begin(s)) [[unlikely]]
    return false;
  Attribute* const slots = s->attributes.data();
  const std::uint32_t used = s->attributes_used;
  Attribute* const next = slots + used;
  bool done = false;
  if (next != s->attributes.data() + s->attributes.size() && same_bytes(next->key, key)) {
    T* held = std::get_if<T>(&next->value);
    bool fresh = held != nullptr && s->core != nullptr && used < s->core->limits.attribute_count;
    for (const Attribute* a = slots; fresh && a != next; ++a) fresh = a->key.size() != key.size();
    if (fresh) [[likely]] {
      *held = value;
      s->attributes_used = used + 1;
      done = true;
    }
  }
  owner_done(s);
  return done;
}

// The general path of a bool, int or double attribute (out of line, so that
// the common case's caller needs no stack frame).
template <typename T>
[[gnu::noinline]] void set_generally(LiveSpan* s, std::string_view key, T value) {
  change_attribute(s, key, [value](AttributeValue& v) {
    // In place when the slot held this type before: no visit of the old
    // alternative.
    if (auto* held = std::get_if<T>(&v))
      *held = value;
    else
      v = value;
  });
}

}  // namespace
}  // namespace detail

SpanContext Span::context() const { return live_ ? live_->context : SpanContext(); }

void Span::set_bool(std::string_view key, bool value) {
  if (detail::set_in_kept_slot(live_, key, value)) [[likely]]
    return;
  detail::set_generally(live_, key, value);
}
void Span::set_int(std::string_view key, std::int64_t value) {
  if (detail::set_in_kept_slot(live_, key, value)) [[likely]]
    return;
  detail::set_generally(live_, key, value);
}
void Span::set_double(std::string_view key, double value) {
  if (detail::set_in_kept_slot(live_, key, value)) [[likely]]
    return;
  detail::set_generally(live_, key, value);
}
void Span::set_string(std::string_view key, std::string_view value) {
  detail::change_attribute(live_, key, [value](AttributeValue& v) {
    if (auto* str = std::get_if<std::string>(&v))
      str->assign(value);
    else
      v = std::string(value);
  });
}
void Span::set_value(std::string_view key, AttributeValue value) {
  detail::change_attribute(live_, key, [&value](AttributeValue& v) { v = std::move(value); });
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
  if (live_->core == nullptr) return;
  const auto& limits = live_->core->limits;
  if (live_->links.size() >= limits.link_count) {
    ++live_->dropped_links_count;
    return;
  }
  // Built from its parts (a value-initialised link would be zeroed first).
  SpanLink& l = live_->links.emplace_back(context, std::move(attributes));
  detail::limit_attributes(l.attributes, limits.attribute_per_link_count,
                           l.dropped_attributes_count);
}

void Span::add_bare_link(const SpanContext& context) {
  if (!context.valid()) return;
  detail::LiveSpan* s = live_;
  detail::OwnerChange change(s);
  if (s->core == nullptr) return;
  if (s->links.size() >= s->core->limits.link_count) {
    ++s->dropped_links_count;
    return;
  }
  // The context's parts, its tracestate copied only when it has one.
  SpanLink& l = s->links.emplace_back();
  l.context.trace_id = context.trace_id;
  l.context.span_id = context.span_id;
  l.context.trace_flags = context.trace_flags;
  l.context.remote = context.remote;
  if (!context.tracestate.empty()) l.context.tracestate = context.tracestate;
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

void Span::end_recording() { detail::finish_span(std::exchange(live_, nullptr)); }

}  // namespace lens
