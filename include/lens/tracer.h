/// \file
/// Tracer: starts spans for one instrumentation scope of a Telemetry.
///
/// A Tracer is a small value (two pointers) obtained from Telemetry::tracer().
/// A default-constructed Tracer is disabled: enabled() is false and
/// start_span returns an empty Span. For a disabled group, start_span costs
/// one predictable branch and allocates nothing; format attribute values only
/// after checking enabled() if formatting is costly.
///
/// Thread safety: all methods may be called from any thread. A Tracer must not
/// be used after its Telemetry is destroyed.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "lens/span.h"
#include "lens/span_groups.h"

namespace lens {

namespace detail {
class TelemetryCore;
/// The group switches every Tracer of a Telemetry reads on its hot path.
struct GroupSwitches {
  std::atomic<std::uint32_t> bits{0};
};
/// What a default-constructed Tracer reads: every group off. (A pointer that
/// is never null keeps the disabled check to one load and one test.)
inline constinit const GroupSwitches kNoGroups{};
}  // namespace detail

class Tracer {
 public:
  Tracer() = default;

  bool enabled(SpanGroup group) const noexcept {
    return ((switches_->bits.load(std::memory_order_relaxed) >> static_cast<unsigned>(group)) &
            1u) != 0;
  }

  /// Starts a span in `group`; an empty Span if the group is disabled. The
  /// disabled case is laid out as the straight path: a recorded span costs
  /// a hundred times one jump more. Inline at every call site, so that a
  /// group the call names is a constant there (its step figure and test
  /// folded away).
  /// With step figures on (step_figures.h), a span of a disabled group
  /// that counts toward a figure is still timed (two clock reads).
  [[gnu::always_inline]] Span start_span(SpanGroup group, std::string_view name) const {
    if (!enabled(group)) [[likely]]
      return Span::unrecorded(default_step_figure(group));
    return Span(start_plain(group, name, default_step_figure(group)));
  }
  Span start_span(SpanGroup group, std::string_view name, const StartOptions& options) const {
    const StepFigure figure = options.figure.value_or(default_step_figure(group));
    if (!enabled(group)) [[likely]]
      return Span::unrecorded(figure);
    return Span(start_recording(group, name, &options, figure));
  }
  /// A span that counts toward `figure` (a pipeline receive, a send, the
  /// gradient all-reduce: spans whose group does not say).
  [[gnu::always_inline]] Span start_span(SpanGroup group, std::string_view name,
                                         StepFigure figure) const {
    if (!enabled(group)) [[likely]]
      return Span::unrecorded(figure);
    return Span(start_plain(group, name, figure));
  }

  /// A span lens records for itself (the clock samples readers align by):
  /// whatever the span groups, on every rank that records spans at all (none
  /// on a rank the export filter leaves out). Recorded under the `job` group.
  Span start_lens_span(std::string_view name, const StartOptions& options) const {
    if (switches_->bits.load(std::memory_order_relaxed) == 0) return Span();
    return Span(start_recording(SpanGroup::kJob, name, &options, StepFigure::kNone));
  }

  const InstrumentationScope* scope() const { return scope_; }

 private:
  friend class Telemetry;
  Tracer(detail::TelemetryCore* core, const detail::GroupSwitches* switches,
         const InstrumentationScope* scope)
      : core_(core), switches_(switches), scope_(scope) {}

  detail::LiveSpan* start_recording(SpanGroup group, std::string_view name,
                                    const StartOptions* options, StepFigure figure) const;
  // The same without options (most spans): none of their branches.
  detail::LiveSpan* start_plain(SpanGroup group, std::string_view name, StepFigure figure) const;

  detail::TelemetryCore* core_ = nullptr;
  const detail::GroupSwitches* switches_ = &detail::kNoGroups;
  const InstrumentationScope* scope_ = nullptr;
};

}  // namespace lens
