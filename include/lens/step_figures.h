/// \file
/// Step figures: what a training thread spent this step on each kind of
/// work, measured by the spans its instrumentation opens anyway, recorded or
/// not (docs/metrics.md).
///
/// With step figures on (set_step_figures(true), process-wide), every span
/// that counts toward a figure adds its duration to its thread's totals when
/// it ends: a recorded span from the times it is exported with, a span that
/// is not recorded (its group off, telemetry not initialised) from two reads
/// of the monotonic clock and nothing else. Off (the default), a span that is
/// not recorded costs what it always did plus one load and one test.
///
/// Which figure a span counts toward: the one its start names
/// (StartOptions::figure, Tracer::start_span(group, name, figure)), else its
/// group's (default_step_figure: `microbatch` spans are compute, `optimizer`
/// spans the optimizer; a `communication` span counts only when its start
/// names a figure, since a collective inside a forward is part of the
/// compute, and a linked receive wraps a receive that counts already).
/// Spans that nest inside one another must not name the same figure.
///
/// The totals are the thread's: the training loop takes them at the end of
/// each step (take_step_figures) and records them (StepMetrics, metrics.h).
///
/// Thread safety: set_step_figures from any thread; the totals are per
/// thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "lens/span_groups.h"

namespace lens {

enum class StepFigure : std::uint8_t {
  kNone = 0,
  kCompute,    ///< forwards and backwards
  kP2pWait,    ///< blocked in pipeline receives (a send and receive pair included)
  kP2pSend,    ///< pipeline sends
  kAllReduce,  ///< the data-parallel gradient all-reduce
  kOptimizer,  ///< the optimizer step
};
inline constexpr int kStepFigureCount = 6;  // kNone included

/// The figure's name in metric names: "compute", "p2p_wait", "p2p_send",
/// "all_reduce", "optimizer" ("none" for kNone).
std::string_view step_figure_name(StepFigure figure);

/// The figure a span of `group` counts toward when its start names none.
constexpr StepFigure default_step_figure(SpanGroup group) {
  switch (group) {
    case SpanGroup::kMicrobatch:
      return StepFigure::kCompute;
    case SpanGroup::kOptimizer:
      return StepFigure::kOptimizer;
    default:
      return StepFigure::kNone;
  }
}

/// A thread's totals since it last took them: per figure, nanoseconds and
/// spans (index: the StepFigure's value; [0] unused).
struct StepFigureTotals {
  std::array<std::int64_t, kStepFigureCount> ns{};
  std::array<std::uint32_t, kStepFigureCount> spans{};

  std::int64_t operator[](StepFigure f) const { return ns[static_cast<int>(f)]; }
  double seconds(StepFigure f) const { return static_cast<double>((*this)[f]) * 1e-9; }
};

/// Turns step figures on or off for every thread of the process.
void set_step_figures(bool on);
bool step_figures_on();

/// This thread's totals since its last take (or its start); resets them.
StepFigureTotals take_step_figures();

/// Adds `ns` to this thread's figure (what a span ending does; for
/// instrumentation that times work without a span).
void add_step_figure(StepFigure figure, std::int64_t ns);

namespace detail {
extern std::atomic<bool> g_step_figures;
}  // namespace detail

}  // namespace lens
