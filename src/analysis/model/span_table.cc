#include "span_table.h"

#include <algorithm>
#include <map>

#include "clock_alignment.h"
#include "pipeline_view.h"
#include "step_stream.h"
#include "lens/semconv.h"

namespace lens::analysis {

namespace {

void add_row(SpanTable& t, const RankFile& file, const SpanRow& s, int stage, std::int64_t step,
             bool aligned) {
  t.rank.push_back(file.rank);
  t.replica.push_back(std::max(file.replica, 0));
  t.tensor.push_back(std::max(file.tensor_rank, 0));
  t.stage.push_back(stage);
  t.step.push_back(step);
  t.microbatch.push_back(s.int_attr(semconv::kMicrobatchId));
  t.chunk.push_back(s.int_attr(semconv::kVirtualPipelineRank));
  t.name.push_back(s.name);
  t.kind.push_back(kind_name(kind_of(s)));
  t.start_ns.push_back(s.start_ns);
  t.end_ns.push_back(s.end_ns);
  t.aligned.push_back(aligned ? 1 : 0);
  t.trace_id.push_back(s.trace_id.str());
  t.span_id.push_back(s.span_id.str());
  t.parent_span_id.push_back(s.parent_span_id.str());
  t.links.push_back(static_cast<int>(s.links.size()));
  t.status_code.push_back(s.status_code);
}

}  // namespace

SpanTable read_span_table(const OpenedRun& run, bool raw_clock,
                          std::vector<std::string>* warnings) {
  ClockAlignment clock;
  if (!raw_clock) clock = read_clock_alignment(run);
  LateSpans late;
  const StreamOptions so = aligned_stream(clock, nullptr, &late);
  const auto aligned = [&](const RankFile& f, const SpanRow& s) {
    return so.clock != nullptr && clock.has(f.rank, s.process);
  };
  SpanTable t;
  Run rest = stream_steps(
      run,
      [&](StepWindow& w) {
        const PipelineView view = build_view(w.run);
        std::map<int, int> stage_of;
        for (const auto& sv : view.steps)
          for (const auto& [rank, sr] : sv.ranks) stage_of[rank] = sr.stage;
        for (const auto& f : w.run.files) {
          const auto st = stage_of.find(f.rank);
          for (const auto& s : f.spans)
            add_row(t, f, s, st == stage_of.end() ? -1 : st->second, w.step, aligned(f, s));
        }
      },
      so);
  for (const auto& f : rest.files) {
    if (warnings) warnings->insert(warnings->end(), f.warnings.begin(), f.warnings.end());
    for (const auto& s : f.spans) add_row(t, f, s, -1, -1, aligned(f, s));
  }
  return t;
}

}  // namespace lens::analysis
