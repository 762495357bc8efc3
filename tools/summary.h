// `lens summary`: per step and per stage, where the time went (forward,
// backward, p2p waiting, optimizer, idle), the measured pipeline bubble next
// to the theoretical (P-1)/(M+P-1), and the slowest stage.
#pragma once

#include <string>
#include <vector>

#include "pipeline_view.h"

namespace lens::tools {

struct StageStep {
  std::int64_t step = 0;
  int rank = 0, stage = 0;
  double step_ms = 0, forward_ms = 0, backward_ms = 0, p2p_ms = 0, optimizer_ms = 0, idle_ms = 0;
  double bubble = -1;  // 1 - compute / forward_backward window; -1 when unknown
};

struct Summary {
  int pipeline_stages = 0, microbatches = 0;
  std::vector<StageStep> rows;
  double measured_bubble = -1;     // mean over rows that have one
  double theoretical_bubble = -1;  // (P-1)/(M+P-1)
  int slowest_stage = -1;          // most forward+backward time per step
  double slowest_stage_compute_ms = 0;
};

Summary summarize_run(const PipelineView& view);
std::string format_table(const Summary& s);
std::string format_json(const Summary& s);

}  // namespace lens::tools
