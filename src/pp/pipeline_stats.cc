// The pipeline-parallel counters (pipeline_stats.h).
#include "lens/pipeline_stats.h"

#include "pipeline_counters.h"

namespace lens {

detail::PipelineCounters& detail::pipeline_counters() {
  static PipelineCounters counters;
  return counters;
}

PipelineStats pipeline_stats() {
  const auto& c = detail::pipeline_counters();
  PipelineStats s;
  s.broadcasts = c.broadcasts.load();
  s.frames_malformed = c.frames_malformed.load();
  s.frames_without_context = c.frames_without_context.load();
  s.step_mismatches = c.step_mismatches.load();
  s.linked_spans = c.linked_spans.load();
  s.linked_spans_without_link = c.linked_spans_without_link.load();
  s.derived_steps = c.derived_steps.load();
  s.step_checks = c.step_checks.load();
  return s;
}

void reset_pipeline_stats() {
  auto& c = detail::pipeline_counters();
  c.broadcasts = 0;
  c.frames_malformed = 0;
  c.frames_without_context = 0;
  c.step_mismatches = 0;
  c.linked_spans = 0;
  c.linked_spans_without_link = 0;
  c.derived_steps = 0;
  c.step_checks = 0;
}

}  // namespace lens
