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

}  // namespace
}  // namespace detail

SpanContext Span::context() const { return live_ ? live_->context : SpanContext(); }

void Span::set_bool(std::string_view key, bool value) {
  detail::change_attribute(live_, key, [value](AttributeValue& v) { v = value; });
}
void Span::set_int(std::string_view key, std::int64_t value) {
  detail::change_attribute(live_, key, [value](AttributeValue& v) {
    // In place when the slot held an int before (a pooled record's slot
    // most often did): no visit of the old alternative.
    if (auto* held = std::get_if<std::int64_t>(&v))
      *held = value;
    else
      v = value;
  });
}
void Span::set_double(std::string_view key, double value) {
  detail::change_attribute(live_, key, [value](AttributeValue& v) { v = value; });
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
