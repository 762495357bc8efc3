// Span recording: start, attribute/event/link updates, end, and the current
// span of each thread.
#include "lens/span.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "lens/tracer.h"
#include "span_clock.h"
#include "telemetry_core.h"

namespace lens {
namespace detail {

SpinLock& open_spans_lock() {
  static SpinLock lock;
  return lock;
}

namespace {

void unlink(LiveSpan* s) {
  s->prev->next = s->next;
  s->next->prev = s->prev;
  s->prev = s->next = nullptr;
}

}  // namespace

void TelemetryCore::register_open(LiveSpan* s) {
  std::lock_guard<SpinLock> lock(open_spans_lock());
  s->core = this;
  s->next = &open_head;
  s->prev = open_head.prev;
  open_head.prev->next = s;
  open_head.prev = s;
}

std::uint64_t TelemetryCore::truncate_open_spans() {
  std::uint64_t count = 0;
  const std::int64_t now = steady_now_ns();
  std::lock_guard<SpinLock> lock(open_spans_lock());
  while (open_head.next != &open_head) {
    LiveSpan* s = open_head.next;
    unlink(s);
    s->core = nullptr;
    ++count;
    if (!s->context.sampled()) continue;
    LiveSpan* copy = acquire_record();
    static_cast<SpanRecord&>(*copy) = static_cast<const SpanRecord&>(*s);
    copy->end_time_unix_ns = s->start_time_unix_ns + (now - s->start_steady_ns);
    // The marker goes in even past the attribute limit: it is what tells a
    // reader that the span did not really end here.
    copy->attributes.push_back({"nemo.span.truncated", true});
    processor->enqueue(copy);
  }
  spans_truncated.fetch_add(count, std::memory_order_relaxed);
  return count;
}

std::vector<std::string> TelemetryCore::mark_open_spans(std::string_view event,
                                                        std::string_view detail) {
  std::vector<std::string> lines;
  const std::int64_t now = steady_now_ns();
  std::lock_guard<SpinLock> lock(open_spans_lock());
  std::string last_ended = "(none)";
  if (last_ended_length > 0) {
    last_ended.assign(last_ended_name, last_ended_length);
    last_ended +=
        " (ended " + std::to_string((now - last_ended_steady_ns) / 1000000) + " ms before)";
  }
  for (LiveSpan* s = open_head.next; s != &open_head; s = s->next) {
    std::string line = s->name;
    for (const auto& a : s->attributes) {
      if (!a.key.starts_with("dl.")) continue;
      if (const auto* i = std::get_if<std::int64_t>(&a.value))
        line += " " + a.key + "=" + std::to_string(*i);
    }
    const double open_ms = static_cast<double>(now - s->start_steady_ns) / 1e6;
    line += " (open " + std::to_string(static_cast<std::int64_t>(open_ms)) + " ms)";
    lines.push_back(std::move(line));
    if (s->events.size() < limits.event_count) {
      SpanEvent& e = s->events.emplace_back();
      e.name.assign(event);
      e.time_unix_ns = s->start_time_unix_ns + (now - s->start_steady_ns);
      e.attributes = {{"lens.detail", std::string(detail)}, {"lens.last_ended", last_ended}};
    } else {
      ++s->dropped_events_count;
    }
  }
  lines.push_back("last span ended: " + last_ended);
  return lines;
}

void finish_span(LiveSpan* s) {
  const std::int64_t end_steady = steady_now_ns();
  bool queued = false;
  {
    std::lock_guard<SpinLock> lock(open_spans_lock());
    TelemetryCore* core = s->core;
    if (core != nullptr) {
      unlink(s);
      s->core = nullptr;
      s->end_time_unix_ns = s->start_time_unix_ns + (end_steady - s->start_steady_ns);
      const std::size_t n = std::min(s->name.size(), sizeof core->last_ended_name);
      std::memcpy(core->last_ended_name, s->name.data(), n);
      core->last_ended_length = static_cast<std::uint8_t>(n);
      core->last_ended_steady_ns = end_steady;
      // Queued under the lock: the core cannot be destroyed meanwhile.
      if (s->context.sampled()) {
        core->processor->enqueue(s);
        queued = true;
      }
    }
  }
  if (!queued) release_record(s);
}

namespace {

struct CurrentContext {
  bool has = false;
  SpanContext context;
};

CurrentContext& current() {
  thread_local CurrentContext c;
  return c;
}

// The slot for key: the existing attribute, a new one, or nullptr (dropped).
Attribute* attribute_slot(LiveSpan* s, std::string_view key) {
  for (auto& a : s->attributes)
    if (a.key == key) return &a;
  if (s->core == nullptr) return nullptr;
  if (s->attributes.size() >= s->core->limits.attribute_count) {
    ++s->dropped_attributes_count;
    return nullptr;
  }
  Attribute& a = s->new_attribute();
  a.key.assign(key);
  return &a;
}

void limit_attributes(Attributes& attributes, std::uint32_t limit, std::uint32_t& dropped) {
  if (attributes.size() > limit) {
    dropped += static_cast<std::uint32_t>(attributes.size() - limit);
    attributes.resize(limit);
  }
}

}  // namespace
}  // namespace detail

using detail::LiveSpan;

LiveSpan* Tracer::start_recording(SpanGroup group, std::string_view name,
                                  const StartOptions* options) const {
  LiveSpan* s = detail::acquire_record();
  s->name.assign(name);
  s->group = group;
  s->scope = scope_;
  s->kind = options ? options->kind : SpanKind::kInternal;

  const SpanContext* parent = nullptr;
  if (options && options->parent && options->parent->valid()) {
    parent = &*options->parent;
  } else if (!(options && (options->root || options->parent || options->context))) {
    auto& cur = detail::current();
    if (cur.has) parent = &cur.context;
  }
  const Sampler& sampler = core_->sampler;
  if (parent != nullptr) {
    s->context.trace_id = parent->trace_id;
    s->context.trace_flags = parent->trace_flags;
    s->context.tracestate = parent->tracestate;
    s->parent_span_id = parent->span_id;
    s->parent_remote = parent->remote;
    if (!sampler.parent_based) {
      s->context.trace_flags = sampler.should_sample_root(s->context.trace_id)
                                   ? (parent->trace_flags | TraceFlags::kSampled)
                                   : (parent->trace_flags & ~TraceFlags::kSampled);
    }
  } else if (options && options->context) {
    const SpanContext& decided = *options->context;
    s->context.trace_id = decided.trace_id.valid() ? decided.trace_id : IdGenerator::new_trace_id();
    s->context.trace_flags = decided.trace_flags;
    s->context.tracestate = decided.tracestate;
  } else {
    s->context.trace_id = IdGenerator::new_trace_id();
    s->context.trace_flags =
        sampler.should_sample_root(s->context.trace_id) ? TraceFlags::kSampled : 0;
  }
  s->context.span_id = options && options->context && options->context->span_id.valid()
                           ? options->context->span_id
                           : IdGenerator::new_span_id();

  if (options && !options->links.empty()) {
    for (const auto& link : options->links) {
      if (!link.context.valid()) continue;
      if (s->links.size() >= core_->limits.link_count) {
        ++s->dropped_links_count;
        continue;
      }
      s->links.push_back(link);
      detail::limit_attributes(s->links.back().attributes, core_->limits.attribute_per_link_count,
                               s->links.back().dropped_attributes_count);
    }
  }

  s->start_steady_ns = detail::steady_now_ns();
  s->start_time_unix_ns = detail::unix_ns_from_steady(s->start_steady_ns);
  core_->register_open(s);
  return s;
}

SpanContext Span::context() const { return live_ ? live_->context : SpanContext(); }

void Span::set_bool(std::string_view key, bool value) {
  if (auto* a = detail::attribute_slot(live_, key)) a->value = value;
}
void Span::set_int(std::string_view key, std::int64_t value) {
  if (auto* a = detail::attribute_slot(live_, key)) a->value = value;
}
void Span::set_double(std::string_view key, double value) {
  if (auto* a = detail::attribute_slot(live_, key)) a->value = value;
}
void Span::set_string(std::string_view key, std::string_view value) {
  auto* a = detail::attribute_slot(live_, key);
  if (a == nullptr) return;
  if (auto* str = std::get_if<std::string>(&a->value))
    str->assign(value);
  else
    a->value = std::string(value);
}
void Span::set_value(std::string_view key, AttributeValue value) {
  if (auto* a = detail::attribute_slot(live_, key)) a->value = std::move(value);
}

void Span::add_event(std::string_view name, Attributes attributes) {
  if (!live_ || live_->core == nullptr) return;
  const auto& limits = live_->core->limits;
  if (live_->events.size() >= limits.event_count) {
    ++live_->dropped_events_count;
    return;
  }
  SpanEvent& e = live_->events.emplace_back();
  e.name.assign(name);
  e.time_unix_ns = live_->start_time_unix_ns + (detail::steady_now_ns() - live_->start_steady_ns);
  e.attributes = std::move(attributes);
  detail::limit_attributes(e.attributes, limits.attribute_per_event_count,
                           e.dropped_attributes_count);
}

void Span::add_link(const SpanContext& context, Attributes attributes) {
  if (!live_ || live_->core == nullptr || !context.valid()) return;
  const auto& limits = live_->core->limits;
  if (live_->links.size() >= limits.link_count) {
    ++live_->dropped_links_count;
    return;
  }
  SpanLink& l = live_->links.emplace_back();
  l.context = context;
  l.attributes = std::move(attributes);
  detail::limit_attributes(l.attributes, limits.attribute_per_link_count,
                           l.dropped_attributes_count);
}

void Span::set_status(StatusCode code, std::string_view message) {
  if (!live_) return;
  // OTel: Ok is final; Unset never overrides; the message only goes with Error.
  if (live_->status_code == StatusCode::kOk || code == StatusCode::kUnset) return;
  live_->status_code = code;
  live_->status_message.assign(code == StatusCode::kError ? message : std::string_view());
}

void Span::update_name(std::string_view name) {
  if (live_) live_->name.assign(name);
}

void Span::end_recording() { detail::finish_span(std::exchange(live_, nullptr)); }

Scope::Scope(const Span& span) {
  if (!span.live_) return;
  auto& cur = detail::current();
  if (cur.has) previous_ = cur.context;
  cur.has = true;
  cur.context = span.live_->context;
  active_ = true;
}

Scope::~Scope() {
  if (!active_) return;
  auto& cur = detail::current();
  cur.has = previous_.has_value();
  if (previous_) cur.context = std::move(*previous_);
}

SpanContext current_span_context() {
  auto& cur = detail::current();
  return cur.has ? cur.context : SpanContext();
}

}  // namespace lens
