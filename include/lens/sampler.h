/// \file
/// Sampler: decides once, at a trace's root, whether its spans are kept.
///
/// Configured by OTEL_TRACES_SAMPLER (always_on, always_off, traceidratio,
/// parentbased_always_on, parentbased_always_off, parentbased_traceidratio;
/// default parentbased_always_on) and OTEL_TRACES_SAMPLER_ARG (the ratio, 0..1,
/// default 1.0). The ratio decision is a deterministic function of the trace
/// id, so every process that sees the same trace id decides alike. In the step
/// protocol only the source rank decides; the decision travels in the frame's
/// trace flags.
///
/// Thread safety: a value type; should_sample is const.
#pragma once

#include <string>

#include "lens/ids.h"

namespace lens {

struct Sampler {
  enum class Kind { kAlwaysOn, kAlwaysOff, kTraceIdRatio };
  Kind kind = Kind::kAlwaysOn;
  bool parent_based = true;
  double ratio = 1.0;

  /// The decision for a span without a (valid) parent in trace `trace_id`
  /// (the default, always on, without a call: the span start asks it).
  bool should_sample_root(const TraceId& trace_id) const {
    return kind == Kind::kAlwaysOn || decide_root(trace_id);
  }

  /// "parentbased_always_on", "traceidratio{0.25}", ...
  std::string describe() const;

 private:
  bool decide_root(const TraceId& trace_id) const;
};

}  // namespace lens
