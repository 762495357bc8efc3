// A rank's step figures as metrics (lens/step_metrics.h).
#include "lens/step_metrics.h"

#include <string>

namespace lens {
namespace {

const char* figure_help(StepFigure f) {
  switch (f) {
    case StepFigure::kCompute:
      return "Forward and backward time of one step on this rank.";
    case StepFigure::kP2pWait:
      return "Time one step on this rank spent in pipeline receives (waiting for the peer stage "
             "included).";
    case StepFigure::kP2pSend:
      return "Time one step on this rank spent in pipeline sends.";
    case StepFigure::kAllReduce:
      return "Time of one step's data-parallel gradient all-reduce on this rank.";
    case StepFigure::kOptimizer:
      return "Time of one step's optimizer on this rank.";
    case StepFigure::kNone:
      break;
  }
  return "";
}

}  // namespace

StepMetrics::StepMetrics(MetricRegistry& registry, const MetricLabels& labels)
    : step_(registry.histogram("lens_step_duration_seconds",
                               "Time of one training step on this rank.", "seconds", kStepBounds,
                               labels)),
      steps_(registry.counter("lens_steps", "Training steps this rank has run.", labels)),
      spans_ended_(registry.counter("lens_spans_ended", "Spans this rank has ended.", labels)),
      spans_dropped_(registry.counter(
          "lens_spans_dropped",
          "Spans this rank ended and could not deliver (queue full, shutdown, export error).",
          labels)) {
  for (int i = 1; i < kStepFigureCount; ++i) {
    const auto f = static_cast<StepFigure>(i);
    const std::string name = "lens_step_" + std::string(step_figure_name(f)) + "_seconds";
    figures_[i] = &registry.histogram(name, figure_help(f), "seconds", kStepBounds, labels);
    // OpenTelemetry's name keeps the figure's name one word.
    registry.set_otel_name(name, "lens.step." + std::string(step_figure_name(f)));
  }
}

void StepMetrics::record_step(double step_seconds, const StepFigureTotals& figures,
                              const SpanContext& step, std::int64_t time_unix_ns) {
  step_.record(step_seconds, step, time_unix_ns);
  for (int i = 1; i < kStepFigureCount; ++i) {
    if (figures.spans[i] == 0) continue;
    figures_[i]->record(figures.seconds(static_cast<StepFigure>(i)), step, time_unix_ns);
  }
  steps_.add();
}

void StepMetrics::record_spans(std::uint64_t ended, std::uint64_t dropped) {
  spans_ended_.advance_to(static_cast<double>(ended));
  spans_dropped_.advance_to(static_cast<double>(dropped));
}

}  // namespace lens
