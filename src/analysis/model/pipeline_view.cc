#include "pipeline_view.h"

#include <algorithm>

#include "lens/semconv.h"

namespace lens::analysis {

int stage_of_step_span(const SpanRow& step_span) {
  return static_cast<int>(step_span.int_attr(semconv::kPipelineRank, step_span.rank));
}

PipelineView build_view(const Run& run) {
  PipelineView view;
  std::map<std::int64_t, StepView> steps;
  // (rank, trace id) -> step number; the ids are the rows' own
  std::map<std::pair<int, std::string_view>, std::int64_t> step_of_trace;
  int max_stage = -1;
  for (const auto& f : run.files) {
    view.ranks.push_back(f.rank);
    for (const auto& s : f.spans) {
      view.by_span_id.add(s.span_id, &s);
      if (s.has(semconv::kPipelineSize))
        view.pipeline_stages = std::max<int>(
            view.pipeline_stages, static_cast<int>(s.int_attr(semconv::kPipelineSize)));
      if (s.has(semconv::kNumMicrobatches))
        view.microbatches = std::max<int>(
            view.microbatches, static_cast<int>(s.int_attr(semconv::kNumMicrobatches)));
      if (s.has(semconv::kVirtualPipelineSize))
        view.virtual_stages = std::max<int>(
            view.virtual_stages, static_cast<int>(s.int_attr(semconv::kVirtualPipelineSize)));
      if (!is_step_span(s)) continue;
      const std::int64_t step = s.int_attr(semconv::kStep);
      StepOnRank& sr = steps[step].ranks[s.rank];
      steps[step].step = step;
      sr.rank = s.rank;
      sr.stage = stage_of_step_span(s);
      sr.step_span = &s;
      max_stage = std::max(max_stage, sr.stage);
      step_of_trace[{s.rank, s.trace_id.view()}] = step;
    }
  }
  for (const auto& f : run.files) {
    for (const auto& s : f.spans) {
      auto it = step_of_trace.find({s.rank, s.trace_id.view()});
      if (it == step_of_trace.end()) continue;
      steps[it->second].ranks[s.rank].spans.push_back(&s);
    }
  }
  view.by_span_id.seal();
  if (view.pipeline_stages == 0) view.pipeline_stages = max_stage + 1;
  for (auto& [step, sv] : steps) {
    for (auto& [rank, sr] : sv.ranks)
      std::sort(sr.spans.begin(), sr.spans.end(),
                [](const SpanRow* a, const SpanRow* b) { return a->start_ns < b->start_ns; });
    view.steps.push_back(std::move(sv));
  }
  if (view.microbatches == 0 && !view.steps.empty()) {
    for (const auto& [rank, sr] : view.steps.front().ranks) {
      if (sr.stage != 0) continue;
      int forwards = 0;
      for (const auto* s : sr.spans) forwards += kind_of(*s) == SpanKind::kForward;
      view.microbatches = std::max(view.microbatches, forwards / view.virtual_stages);
    }
  }
  return view;
}

double theoretical_bubble(int stages, int microbatches, int virtual_stages) {
  if (stages <= 0 || microbatches <= 0) return -1;
  return static_cast<double>(stages - 1) /
         (static_cast<double>(std::max(1, virtual_stages)) * microbatches + stages - 1);
}

const char* theoretical_bubble_formula(int virtual_stages) {
  return virtual_stages > 1 ? "(P-1)/(VM+P-1)" : "(P-1)/(M+P-1)";
}

}  // namespace lens::analysis
