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

// Text for HTML: & < > " escaped.
std::string html_escape(const std::string& text);

// The wave alone, for a page of its own or another's (the run report): an
// <svg> with the given element id (ids inside it start with it), drawn
// with wave_style()'s classes, and what it drew.
struct Wave {
  std::string svg;
  std::size_t lanes = 0, links = 0, critical_segments = 0;
  std::int64_t chunks = 0;  // model chunks seen (interleaved schedule)
  bool tensor_parallel = false;
};
Wave render_wave(const analysis::PipelineView& view, const TimelineOptions& options,
                 const std::string& id);
// The wave's CSS rules, and its legend (a <div class="legend">).
std::string wave_style();
std::string wave_legend(const Wave& wave);

}  // namespace lens::tools
