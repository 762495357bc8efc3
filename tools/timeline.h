// `lens timeline`: one self-contained HTML file (inline SVG and script, no
// network) drawing the pipeline wave: one swimlane per rank over time for the
// chosen steps, spans coloured by kind, an arrow for every link from the
// source rank's step span to the linked span, details on hover.
#pragma once

#include <string>

#include "pipeline_view.h"

namespace lens::tools {

struct TimelineOptions {
  std::int64_t first_step = 0;
  std::int64_t last_step = 2;  // inclusive
  std::string title;
};

std::string render_timeline(const PipelineView& view, const TimelineOptions& options);

}  // namespace lens::tools
