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
  return {c.broadcasts.load(),      c.frames_malformed.load(), c.frames_without_context.load(),
          c.step_mismatches.load(), c.linked_spans.load(),     c.linked_spans_without_link.load()};
}

void reset_pipeline_stats() {
  auto& c = detail::pipeline_counters();
  c.broadcasts = 0;
  c.frames_malformed = 0;
  c.frames_without_context = 0;
  c.step_mismatches = 0;
  c.linked_spans = 0;
  c.linked_spans_without_link = 0;
}

}  // namespace lens
