#include "span_kind.h"

#include <cstdlib>
#include <string>

#include "lens/semconv.h"

namespace lens::analysis {
namespace {

// LENS_STEP_SPAN: one more step span name, read once (the provider reads the
// same setting, so a run it recorded is read as it was written).
const std::string& step_span_setting() {
  static const std::string name = [] {
    const char* v = std::getenv(semconv::kStepSpanSetting);
    return std::string(v != nullptr ? v : "");
  }();
  return name;
}

}  // namespace

SpanKind kind_of(const SpanRow& s) {
  const std::string& n = s.name;
  // lens's names and Megatron-LM upstream's (megatron.train.iteration, its
  // forward_backward and optimizer children), as lens.otel records them.
  if (is_step_name(n)) return SpanKind::kStep;
  if (n == semconv::kForwardBackwardSpan || n == semconv::kUpstreamForwardBackwardSpan)
    return SpanKind::kForwardBackward;
  if (n == semconv::kUpstreamOptimizerSpan) return SpanKind::kOptimizer;
  if (n.ends_with(".linked")) return SpanKind::kLinked;
  if (n.starts_with("megatron.p2p.")) return SpanKind::kP2p;
  if (n.starts_with("megatron.tp.")) return SpanKind::kCollective;
  if (n == semconv::kMicrobatchForwardSpan) return SpanKind::kForward;
  if (n == semconv::kMicrobatchBackwardSpan) return SpanKind::kBackward;
  if (n.starts_with("megatron.optimizer")) return SpanKind::kOptimizer;
  return SpanKind::kOther;
}

bool is_step_name(std::string_view n) {
  if (n == semconv::kStepSpan || n == semconv::kUpstreamStepSpan) return true;
  const std::string& setting = step_span_setting();
  return !setting.empty() && n == setting;
}

std::string step_names_looked_for() {
  std::string names = std::string(semconv::kStepSpan) + ", " + semconv::kUpstreamStepSpan;
  if (!step_span_setting().empty()) names += ", " + step_span_setting() + " (LENS_STEP_SPAN)";
  return names;
}

bool is_step_span(const SpanRow& s) {
  // kind_of's first test alone (it says kStep exactly for these names): the
  // stream asks this of every row, most of which are not steps.
  return is_step_name(s.name) && s.has(semconv::kStep);
}

const char* kind_name(SpanKind kind) {
  switch (kind) {
    case SpanKind::kStep:
      return "step";
    case SpanKind::kForwardBackward:
      return "forward_backward";
    case SpanKind::kForward:
      return "forward";
    case SpanKind::kBackward:
      return "backward";
    case SpanKind::kP2p:
      return "p2p";
    case SpanKind::kCollective:
      return "collective";
    case SpanKind::kLinked:
      return "linked";
    case SpanKind::kOptimizer:
      return "optimizer";
    case SpanKind::kOther:
      return "other";
  }
  return "other";
}

int lane_row(SpanKind k) {
  switch (k) {
    case SpanKind::kStep:
    case SpanKind::kForwardBackward:
      return 0;
    case SpanKind::kForward:
    case SpanKind::kBackward:
    case SpanKind::kOptimizer:
      return 1;
    case SpanKind::kLinked:
      return 3;
    default:
      return 2;
  }
}

}  // namespace lens::analysis
