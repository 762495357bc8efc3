// PipelineView: a run's spans arranged by step and rank, with each span's
// kind (forward, backward, p2p, linked, optimizer, ...), for the `lens`
// command's check, summary, timeline and exports.
//
// A span belongs to step s on rank r when it is on rank r and in the trace
// of rank r's megatron.train_step span for step s (dl.step).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "run_reader.h"
#include "span_kind.h"

namespace lens::analysis {

struct StepOnRank {
  int rank = -1;
  int stage = -1;
  const SpanRow* step_span = nullptr;
  std::vector<const SpanRow*> spans;  // the step's spans on this rank, step span included
};

struct StepView {
  std::int64_t step = 0;
  std::map<int, StepOnRank> ranks;  // by rank
};

struct PipelineView {
  int pipeline_stages = 0;      // from dl.pipeline_parallel.size, else the largest stage + 1
  int microbatches = 0;         // from dl.num_microbatches, else forward spans per step on stage 0
  int virtual_stages = 1;       // model chunks per stage, from dl.virtual_pipeline.size
  std::vector<int> ranks;       // ranks with a file
  std::vector<StepView> steps;  // by step number
  std::map<std::string, const SpanRow*> by_span_id;
};

PipelineView build_view(const Run& run);

// The schedule's idle share of the forward-backward window: (P-1) slots of
// one chunk's forward + backward against V M of them busy (Megatron's
// (P-1)/(VM) of the ideal time); -1 when P or M is unknown. And its formula
// as the reports print it.
double theoretical_bubble(int stages, int microbatches, int virtual_stages);
const char* theoretical_bubble_formula(int virtual_stages);

}  // namespace lens::analysis
