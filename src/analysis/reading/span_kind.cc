#include "span_kind.h"

#include "lens/semconv.h"

namespace lens::analysis {

SpanKind kind_of(const SpanRow& s) {
  const std::string& n = s.name;
  // lens's names and Megatron-LM upstream's (train.iteration, its
  // forward_backward child), as lens.otel records them.
  if (is_step_name(n)) return SpanKind::kStep;
  if (n == semconv::kForwardBackwardSpan || n == "train.iteration.forward_backward")
    return SpanKind::kForwardBackward;
  if (n.ends_with(".linked")) return SpanKind::kLinked;
  if (n.starts_with("megatron.p2p.")) return SpanKind::kP2p;
  if (n.starts_with("megatron.tp.")) return SpanKind::kCollective;
  if (n == semconv::kMicrobatchForwardSpan) return SpanKind::kForward;
  if (n == semconv::kMicrobatchBackwardSpan) return SpanKind::kBackward;
  if (n.starts_with("megatron.optimizer")) return SpanKind::kOptimizer;
  return SpanKind::kOther;
}

bool is_step_name(std::string_view n) { return n == semconv::kStepSpan || n == "train.iteration"; }

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
