// `lens summary`: per step and per stage, where the time went (forward,
// backward, p2p waiting, optimizer, idle; with tensor parallelism the TP
// collectives inside the forwards and backwards), the measured pipeline
// bubble next to the theoretical (P-1)/(M+P-1), and the slowest stage.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "clock_alignment.h"
#include "pipeline_view.h"
#include "step_stream.h"

namespace lens::analysis {

struct StageStep {
  std::int64_t step = 0;
  int rank = 0, stage = 0;
  double step_ms = 0, forward_ms = 0, backward_ms = 0, p2p_ms = 0, optimizer_ms = 0, idle_ms = 0;
  // Its tensor-parallel collectives (megatron.tp.*), which run inside its
  // forwards and backwards: part of those, not added to them.
  double collective_ms = 0;
  // 1 - (forward + backward) / forward_backward window; -1 when unknown.
  double bubble = -1;
};

// Tail selection (docs/tail-selection.md), from the lowest rank's
// lens.tail_selection spans, one a meeting: how many steps its hold had,
// which it kept and why, how many it did not select.
struct TailReport {
  int meetings = 0;
  std::int64_t held = 0, not_selected = 0;
  std::map<std::string, int> kept_by_reason;  // "slowest", "baseline", "onset of rank 3"
  std::vector<std::int64_t> kept;             // the kept steps, in order
  std::string describe() const;               // empty when there was no tail selection
};

struct Summary {
  int pipeline_stages = 0, microbatches = 0;
  int virtual_stages = 1;  // model chunks per stage (the interleaved schedule)
  std::vector<StageStep> rows;
  double measured_bubble = -1;      // mean over rows that have one
  double theoretical_bubble = -1;   // (P-1)/(VM+P-1): V = 1 without interleaving
  int slowest_stage = -1;           // most forward+backward time per step (less TP collectives)
  bool tensor_collectives = false;  // some rank recorded TP collectives
  double slowest_stage_compute_ms = 0;
  ClockReport clock;   // how the times were put on one clock (set by the caller)
  LateSpans left_out;  // spans the step windows left out (set by the caller)
  TailReport tail;
};

// One or more views' rows, and what they say of the run's shape.
struct SummaryRows {
  int pipeline_stages = 0, microbatches = 0, virtual_stages = 1;
  bool tensor_collectives = false;
  std::vector<StageStep> rows;
  // Another view's shape and rows, after these.
  void append(const SummaryRows& more);
};

// Builds a summary a part at a time: each step's view as it is read, then
// the view of what is left (it carries the job span's sizes). Split over
// processes (partial_analysis.h), each part's rows are added in step order.
class SummaryBuilder {
 public:
  static SummaryRows rows_of(const PipelineView& view);
  void add(const SummaryRows& rows);
  void add(const PipelineView& view) { add(rows_of(view)); }
  Summary finish(const PipelineView& rest);

 private:
  Summary out_;
  int tail_rank_ = -1;  // the rank whose tail selection spans are read
  std::map<int, std::pair<double, int>> compute_by_stage_;  // total ms, rows
  double bubble_sum_ = 0;
  int bubble_rows_ = 0;
};

Summary summarize_run(const PipelineView& view);
// The run, read a step at a time (step_stream.h).
Summary summarize_dir(const OpenedRun& run, const StreamOptions& options,
                      std::vector<std::string>* warnings);
std::string format_table(const Summary& s);
std::string format_json(const Summary& s);

}  // namespace lens::analysis
