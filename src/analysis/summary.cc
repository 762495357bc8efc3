#include "summary.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "json_text.h"
#include "lens/semconv.h"

namespace lens::analysis {

namespace {
double ms(const SpanRow& s) { return static_cast<double>(s.end_ns - s.start_ns) / 1e6; }
}  // namespace

SummaryRows SummaryBuilder::rows_of(const PipelineView& view) {
  SummaryRows out;
  out.pipeline_stages = view.pipeline_stages;
  out.microbatches = view.microbatches;
  out.virtual_stages = view.virtual_stages;
  for (const auto& sv : view.steps) {
    for (const auto& [rank, sr] : sv.ranks) {
      StageStep row;
      row.step = sv.step;
      row.rank = rank;
      row.stage = sr.stage;
      row.step_ms = ms(*sr.step_span);
      double window = 0;
      for (const SpanRow* s : sr.spans) {
        switch (kind_of(*s)) {
          case SpanKind::kForward:
            row.forward_ms += ms(*s);
            break;
          case SpanKind::kBackward:
            row.backward_ms += ms(*s);
            break;
          case SpanKind::kP2p:
            row.p2p_ms += ms(*s);
            break;
          case SpanKind::kCollective:  // inside a forward or backward
            row.collective_ms += ms(*s);
            out.tensor_collectives = true;
            break;
          case SpanKind::kOptimizer:
            row.optimizer_ms += ms(*s);
            break;
          case SpanKind::kForwardBackward:
            window += ms(*s);
            break;
          default:
            break;
        }
      }
      row.idle_ms = std::max(
          0.0, row.step_ms - row.forward_ms - row.backward_ms - row.p2p_ms - row.optimizer_ms);
      // The pipeline's bubble: a stage at a TP collective is busy with a
      // microbatch.
      const double busy = row.forward_ms + row.backward_ms;
      if (window > 0 && busy > 0) row.bubble = std::max(0.0, 1.0 - busy / window);
      out.rows.push_back(row);
    }
  }
  return out;
}

void SummaryRows::append(const SummaryRows& more) {
  pipeline_stages = std::max(pipeline_stages, more.pipeline_stages);
  microbatches = std::max(microbatches, more.microbatches);
  virtual_stages = std::max(virtual_stages, more.virtual_stages);
  tensor_collectives = tensor_collectives || more.tensor_collectives;
  rows.insert(rows.end(), more.rows.begin(), more.rows.end());
}

void SummaryBuilder::add(const SummaryRows& part) {
  out_.pipeline_stages = std::max(out_.pipeline_stages, part.pipeline_stages);
  out_.microbatches = std::max(out_.microbatches, part.microbatches);
  out_.virtual_stages = std::max(out_.virtual_stages, part.virtual_stages);
  out_.tensor_collectives = out_.tensor_collectives || part.tensor_collectives;
  for (const StageStep& row : part.rows) {
    if (row.bubble >= 0) {
      bubble_sum_ += row.bubble;
      ++bubble_rows_;
    }
    // The slowest stage is judged by its own compute.
    compute_by_stage_[row.stage].first += row.forward_ms + row.backward_ms - row.collective_ms;
    compute_by_stage_[row.stage].second += 1;
    out_.rows.push_back(row);
  }
}

std::string TailReport::describe() const {
  if (meetings == 0) return "";
  std::string out = "tail selection: " + std::to_string(held) + " steps held, " +
                    std::to_string(kept.size()) + " kept (";
  bool first = true;
  for (const auto& [reason, n] : kept_by_reason) {
    out += (first ? "" : ", ") + std::to_string(n) + " " + reason;
    first = false;
  }
  return out + "), " + std::to_string(not_selected) + " not selected, over " +
         std::to_string(meetings) + " meetings";
}

Summary SummaryBuilder::finish(const PipelineView& rest) {
  add(rest);
  // Tail selection: every rank chose alike; the lowest rank's spans say it.
  for (const auto& [id, span] : rest.by_span_id) {
    if (span->name == semconv::kTailSelectionSpan && (tail_rank_ < 0 || span->rank < tail_rank_))
      tail_rank_ = span->rank;
  }
  std::vector<const SpanRow*> meetings;
  for (const auto& [id, span] : rest.by_span_id)
    if (span->name == semconv::kTailSelectionSpan && span->rank == tail_rank_)
      meetings.push_back(span);
  std::sort(meetings.begin(), meetings.end(), [](const SpanRow* a, const SpanRow* b) {
    return a->int_attr("lens.tail.first_step") < b->int_attr("lens.tail.first_step");
  });
  TailReport& tail = out_.tail;
  for (const SpanRow* m : meetings) {
    ++tail.meetings;
    tail.held += std::max<std::int64_t>(0, m->int_attr("lens.tail.held", 0));
    tail.not_selected += std::max<std::int64_t>(0, m->int_attr("lens.tail.not_selected", 0));
    const std::optional<std::string_view> kept = m->attributes.text("lens.tail.kept");
    if (!kept) continue;
    // "12:slowest,15:baseline": a step and why, comma-separated.
    std::size_t from = 0;
    while (from < kept->size()) {
      std::size_t to = kept->find(',', from);
      if (to == std::string::npos) to = kept->size();
      const std::string item(kept->substr(from, to - from));
      const std::size_t colon = item.find(':');
      if (colon != std::string::npos && colon > 0) {
        char* end = nullptr;
        const long long step = std::strtoll(item.c_str(), &end, 10);
        if (end == item.c_str() + colon) {
          tail.kept.push_back(step);
          ++tail.kept_by_reason[item.substr(colon + 1)];
        }
      }
      from = to + 1;
    }
  }
  Summary out = std::move(out_);
  out.theoretical_bubble =
      theoretical_bubble(out.pipeline_stages, out.microbatches, out.virtual_stages);
  if (bubble_rows_ > 0) out.measured_bubble = bubble_sum_ / bubble_rows_;
  for (const auto& [stage, c] : compute_by_stage_) {
    const double per_step = c.first / c.second;
    if (per_step > out.slowest_stage_compute_ms) {
      out.slowest_stage_compute_ms = per_step;
      out.slowest_stage = stage;
    }
  }
  return out;
}

Summary summarize_run(const PipelineView& view) {
  SummaryBuilder builder;
  return builder.finish(view);
}

Summary summarize_dir(const OpenedRun& run, const StreamOptions& options,
                      std::vector<std::string>* warnings) {
  SummaryBuilder builder;
  Run rest = stream_steps(
      run, [&](StepWindow& w) { builder.add(build_view(w.run)); }, options);
  if (warnings)
    for (const auto& f : rest.files)
      warnings->insert(warnings->end(), f.warnings.begin(), f.warnings.end());
  return builder.finish(build_view(rest));
}

std::string format_table(const Summary& s) {
  std::string out;
  char line[256];
  // With TP collectives, a column for them (they are inside fwd and bwd).
  const bool tp = s.tensor_collectives;
  std::snprintf(line, sizeof line, "%6s %5s %5s %9s %9s %9s %s%9s %9s %9s %7s\n", "step", "rank",
                "stage", "step ms", "fwd ms", "bwd ms", tp ? "    tp ms " : "", "p2p ms", "opt ms",
                "idle ms", "bubble");
  out += line;
  for (const auto& r : s.rows) {
    char bubble[16] = "n/a";
    if (r.bubble >= 0) std::snprintf(bubble, sizeof bubble, "%.2f", r.bubble);
    char collectives[16] = "";
    if (tp) std::snprintf(collectives, sizeof collectives, "%9.2f ", r.collective_ms);
    std::snprintf(line, sizeof line, "%6lld %5d %5d %9.2f %9.2f %9.2f %s%9.2f %9.2f %9.2f %7s\n",
                  static_cast<long long>(r.step), r.rank, r.stage, r.step_ms, r.forward_ms,
                  r.backward_ms, collectives, r.p2p_ms, r.optimizer_ms, r.idle_ms, bubble);
    out += line;
  }
  if (tp)
    out +=
        "(tp ms: the tensor-parallel collectives, inside fwd and bwd; the slowest stage counts "
        "compute without them)\n";
  if (s.virtual_stages > 1)
    std::snprintf(line, sizeof line,
                  "pipeline: %d stages of %d chunks (interleaved), %d microbatches per step\n",
                  s.pipeline_stages, s.virtual_stages, s.microbatches);
  else
    std::snprintf(line, sizeof line, "pipeline: %d stages, %d microbatches per step\n",
                  s.pipeline_stages, s.microbatches);
  out += line;
  const char* formula = theoretical_bubble_formula(s.virtual_stages);
  if (s.measured_bubble >= 0) {
    std::snprintf(line, sizeof line,
                  "bubble: measured %.3f (mean over steps and ranks), theoretical %s = %.3f\n",
                  s.measured_bubble, formula, s.theoretical_bubble);
  } else {
    std::snprintf(line, sizeof line,
                  "bubble: not measurable (needs the forward_backward and microbatch span "
                  "groups); theoretical %s = %.3f\n",
                  formula, s.theoretical_bubble);
  }
  out += line;
  if (s.slowest_stage >= 0 && s.slowest_stage_compute_ms > 0) {
    std::snprintf(line, sizeof line, "slowest stage: %d (%.2f ms of forward+backward%s per step)\n",
                  s.slowest_stage, s.slowest_stage_compute_ms, tp ? " less TP collectives" : "");
    out += line;
  }
  out += s.clock.describe() + "\n";
  if (const std::string l = s.left_out.describe(); !l.empty()) out += l + "\n";
  if (const std::string t = s.tail.describe(); !t.empty()) out += t + "\n";
  return out;
}

std::string format_json(const Summary& s) {
  // Written straight to text (json_text.h): the bytes nlohmann's dump(1)
  // writes for the same document, without a DOM node per member of a row.
  JsonObjectText j(1, 0);
  j.add("pipeline_stages", s.pipeline_stages);
  j.add("microbatches", s.microbatches);
  j.add("virtual_stages", s.virtual_stages);
  j.add("measured_bubble", or_null(s.measured_bubble));
  j.add("theoretical_bubble", or_null(s.theoretical_bubble));
  j.add("slowest_stage", s.slowest_stage);
  j.add("clock", s.clock.to_json());
  j.add("left_out", s.left_out.to_json());
  add_rows(j, "rows", s.rows, [&](JsonObjectText& o, const StageStep& r) {
    o.add("step", r.step);
    o.add("rank", r.rank);
    o.add("stage", r.stage);
    o.add("step_ms", r.step_ms);
    o.add("forward_ms", r.forward_ms);
    o.add("backward_ms", r.backward_ms);
    o.add("p2p_ms", r.p2p_ms);
    o.add("collective_ms", r.collective_ms);
    o.add("optimizer_ms", r.optimizer_ms);
    o.add("idle_ms", r.idle_ms);
    o.add("bubble", or_null(r.bubble));
  });
  if (s.tail.meetings > 0)
    j.add("tail_selection", nlohmann::json{{"meetings", s.tail.meetings},
                                           {"held", s.tail.held},
                                           {"kept", s.tail.kept},
                                           {"kept_by_reason", s.tail.kept_by_reason},
                                           {"not_selected", s.tail.not_selected}});
  std::string out;
  j.write(out);
  out += "\n";
  return out;
}

}  // namespace lens::analysis
