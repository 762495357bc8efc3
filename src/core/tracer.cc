// Tracer::start_recording: a span's start, where its trace, parent, sampling
// decision, ids and links are settled.
#include "lens/tracer.h"

#include "current_span.h"
#include "lens/ids.h"
#include "same_bytes.h"
#include "span_clock.h"
#include "span_ids.h"
#include "telemetry_core.h"

namespace lens {

using detail::LiveSpan;

namespace {

// The parent a span without options nests under: the thread's current
// span, if any.
const SpanContext* current_parent() {
  auto& cur = detail::current_context();
  return cur.has ? &cur.context : nullptr;
}

// A span's start. Inline in both entry points: the one without options
// (most spans) is compiled with options null, its branches gone.
[[gnu::always_inline]] inline LiveSpan* start(detail::TelemetryCore* core,
                                              const InstrumentationScope* scope, SpanGroup group,
                                              std::string_view name, const StartOptions* options,
                                              StepFigure figure) {
  LiveSpan* s = detail::acquire_record();
  // A pooled record keeps its last span's name, most often this one (a
  // call site's spans reuse the records it released): compared, not copied.
  if (!detail::same_bytes(s->name, name)) s->name.assign(name);
  s->group = group;
  s->scope = scope;
  s->kind = options ? options->kind : SpanKind::kInternal;
  s->figure = figure != StepFigure::kNone && detail::g_step_figures.load(std::memory_order_relaxed)
                  ? figure
                  : StepFigure::kNone;

  const SpanContext* parent = nullptr;
  if (options == nullptr) [[likely]] {
    parent = current_parent();
  } else if (options->parent && options->parent->valid()) {
    parent = &*options->parent;
  } else if (!(options->root || options->parent || options->context)) {
    parent = current_parent();
  }
  const Sampler& sampler = core->sampler;
  if (parent != nullptr) {
    s->context.trace_id = parent->trace_id;
    s->context.trace_flags = parent->trace_flags;
    if (!parent->tracestate.empty()) s->context.tracestate = parent->tracestate;
    s->parent_span_id = parent->span_id;
    s->parent_remote = parent->remote;
    // A sampler that is not parent-based decides again for a remote parent
    // only. A local parent's decision stands for its children: a step span's
    // was made once for the whole step (the sampler on the step's, or in
    // pipeline scope the anchor's, trace id, and the step budget), and a
    // child deciding again would be exported under a parent that is not, or
    // dropped under one that is.
    if (!sampler.parent_based && parent->remote) {
      s->context.trace_flags = sampler.should_sample_root(s->context.trace_id)
                                   ? (parent->trace_flags | TraceFlags::kSampled)
                                   : (parent->trace_flags & ~TraceFlags::kSampled);
    }
  } else if (options && options->context) {
    const SpanContext& decided = *options->context;
    s->context.trace_id = decided.trace_id.valid() ? decided.trace_id : IdGenerator::new_trace_id();
    s->context.trace_flags = decided.trace_flags;
    s->context.tracestate = decided.tracestate;
  }
  if (options && options->context && options->context->span_id.valid()) {
    s->context.span_id = options->context->span_id;
  } else {
    const bool root = parent == nullptr && !(options && options->context);
    detail::new_span_ids(s->context, root);
    if (root)
      s->context.trace_flags =
          sampler.should_sample_root(s->context.trace_id) ? TraceFlags::kSampled : 0;
  }

  if (options && !options->links.empty()) {
    s->links.clear();  // the kept slots: these links are copied whole
    for (const auto& link : options->links) {
      if (!link.context.valid()) continue;
      if (s->links.size() >= core->limits.link_count) {
        ++s->dropped_links_count;
        continue;
      }
      s->links.push_back(link);
      detail::limit_attributes(s->links.back().attributes, core->limits.attribute_per_link_count,
                               s->links.back().dropped_attributes_count);
    }
    s->links_used = static_cast<std::uint32_t>(s->links.size());
  }

  const std::int64_t now_steady = detail::steady_now_ns();
  const detail::ClockSkew& skew = core->clock_skew;
  s->clock_drift = skew.drift;
  s->start_steady_ns = now_steady;
  s->start_time_unix_ns = skew.unix_ns(now_steady);
  if (options && options->start_time_unix_ns) {
    // Started earlier: the elapsed time since is part of its duration.
    s->start_steady_ns -= s->start_time_unix_ns - *options->start_time_unix_ns;
    s->start_time_unix_ns = *options->start_time_unix_ns;
  }
  // Timed on a device: only a sampled span, whose times are exported.
  if (options && options->device_stream && core->device != nullptr && s->context.sampled())
    core->device->begin(s, *options->device_stream);
  core->register_open(s);
  return s;
}

}  // namespace

LiveSpan* Tracer::start_recording(SpanGroup group, std::string_view name,
                                  const StartOptions* options, StepFigure figure) const {
  return start(core_, scope_, group, name, options, figure);
}

LiveSpan* Tracer::start_plain(SpanGroup group, std::string_view name, StepFigure figure) const {
  return start(core_, scope_, group, name, nullptr, figure);
}

}  // namespace lens
