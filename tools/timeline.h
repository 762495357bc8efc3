// `lens timeline`: one self-contained HTML file (inline SVG and script, no
// network) drawing the pipeline wave: one swimlane per rank over time for the
// chosen steps, spans coloured by kind, an arrow for every link from the
// source rank's step span to the linked span, details on hover; over them
// the step analysis (step_analysis.h): the critical path outlined in red,
// late-sender waits shaded on the compute row, transfer waits hatched.
#pragma once

#include <map>
#include <string>

#include "pipeline_view.h"
#include "step_analysis.h"

namespace lens::tools {

struct TimelineOptions {
  std::int64_t first_step = 0;
  std::int64_t last_step = 2;  // inclusive
  std::string title;
  // Each rank's data-parallel replica, for the step analysis drawn over
  // the spans (its critical path outlined, its waits shaded).
  std::map<int, analysis::PipelineKey> pipeline_of;
};

std::string render_timeline(const analysis::PipelineView& view, const TimelineOptions& options);

}  // namespace lens::tools
