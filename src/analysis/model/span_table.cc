#include "span_table.h"

#include <algorithm>
#include <map>
#include <string>

#include "clock_alignment.h"
#include "pipeline_view.h"
#include "span_kind.h"
#include "step_stream.h"
#include "lens/semconv.h"

namespace lens::analysis {

std::int32_t TextDictionary::code(std::string_view text) {
  if (const auto it = codes_.find(text); it != codes_.end()) return it->second;
  const auto code = static_cast<std::int32_t>(texts_.size());
  texts_.emplace_back(text);
  codes_.emplace(texts_.back(), code);
  return code;
}

void IdColumn::add(std::string_view id) {
  // The reader keeps ids of at most 32 hex digits (hex_id.h); a longer one
  // is cut rather than spilling into the next row.
  const std::size_t at = bytes.size();
  bytes.resize(at + width, '\0');
  id.copy(bytes.data() + at, std::min(id.size(), width));
}

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
  t.name.push_back(t.names.code(s.name));
  t.kind.push_back(t.kinds.code(kind_name(kind_of(s))));
  t.start_ns.push_back(s.start_ns);
  t.end_ns.push_back(s.end_ns);
  t.aligned.push_back(aligned ? 1 : 0);
  t.trace_id.add(s.trace_id);
  t.span_id.add(s.span_id);
  t.parent_span_id.add(s.parent_span_id);
  t.links.push_back(static_cast<std::int64_t>(s.links.size()));
  t.status_code.push_back(s.status_code);
  for (AttributeColumn& c : t.attributes) {
    const auto text = s.attributes.text(c.key);
    if (!text) {
      c.value.push_back(-1);
      continue;
    }
    thread_local std::string typed;  // its type character, then its text
    typed.assign(1, s.attributes.type(c.key));
    typed.append(*text);
    c.value.push_back(c.values.code(typed));
  }
}

}  // namespace

SpanTable read_span_table(const OpenedRun& run, bool raw_clock,
                          std::vector<std::string>* warnings,
                          const std::vector<std::string>& attribute_keys) {
  ClockAlignment clock;
  if (!raw_clock) clock = read_clock_alignment(run);
  LateSpans late;
  const StreamOptions so = aligned_stream(clock, nullptr, &late);
  const auto aligned = [&](const RankFile& f, const SpanRow& s) {
    return so.clock != nullptr && clock.has(f.rank, s.process);
  };
  SpanTable t;
  for (const auto& key : attribute_keys) t.attributes.push_back({key, {}, {}});
  Run rest = stream_steps(
      run,
      [&](StepWindow& w) {
        // Each rank's stage in the window's step, as the pipeline view puts
        // it; without a step span, none.
        for (const auto& f : w.run.files) {
          int stage = -1;
          for (const auto& s : f.spans)
            if (is_step_span(s))
              stage = stage_of_step_span(s);
          for (const auto& s : f.spans) add_row(t, f, s, stage, w.step, aligned(f, s));
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
