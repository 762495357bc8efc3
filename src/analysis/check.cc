#include "check.h"

#include <algorithm>
#include <map>
#include <set>

namespace lens::tools {

std::string format_violation(const Violation& v) {
  std::string where;
  if (v.step >= 0) where += "step " + std::to_string(v.step);
  if (v.rank >= 0)
    where += std::string(where.empty() ? "" : ", ") + "rank " + std::to_string(v.rank);
  return (where.empty() ? "" : where + ": ") + v.what;
}

void RunChecker::check_spans(const Run& part, const PipelineView& view,
                             const std::map<std::string, std::int64_t>& step_of_span) {
  // Links must resolve to a span of the run, in the trace they name; what
  // is not in this part is looked for at the end.
  for (const auto& f : part.files) {
    for (const auto& s : f.spans) {
      auto st = step_of_span.find(s.span_id);
      const std::int64_t step = st != step_of_span.end() ? st->second : s.int_attr("dl.step", -1);
      for (const auto& [trace, span] : s.links) {
        auto it = view.by_span_id.find(span);
        if (it == view.by_span_id.end())
          pending_.push_back({step, s.rank, s.name, trace, span});
        else if (it->second->trace_id != trace)
          found_.push_back({step, s.rank,
                            s.name + " links to span " + span + " of trace " + trace +
                                ", which is not in the run"});
      }
      auto t = s.attributes.find("nemo.span.truncated");
      if (t != s.attributes.end() && t->second == "true")
        found_.push_back({-1, s.rank,
                          s.name + " was still open when its process shut down "
                                   "(nemo.span.truncated)"});
    }
  }
}

void RunChecker::add(const Run& run, const PipelineView& view) {
  pipeline_stages_ = std::max(pipeline_stages_, view.pipeline_stages);
  std::map<std::string, std::int64_t> step_of_span;
  for (const auto& sv : view.steps)
    for (const auto& [rank, sr] : sv.ranks)
      for (const SpanRow* s : sr.spans) step_of_span[s->span_id] = sv.step;
  check_spans(run, view, step_of_span);
  steps_ += view.steps.size();

  bool pipeline_scope = false;
  std::map<int, int> replica_of;  // rank -> dl.data_parallel.rank
  for (const auto& f : run.files) {
    pipeline_scope |= f.trace_scope == "pipeline";
    replica_of[f.rank] = f.replica;
  }
  // Per step: one trace for all ranks (in `pipeline` scope: per replica,
  // each linked to global rank 0's step span); linked spans in place.
  for (const auto& sv : view.steps) {
    std::map<int, const StepOnRank*> sources;  // by replica (all: -1 in world scope)
    auto replica = [&](int rank) { return pipeline_scope ? replica_of[rank] : -1; };
    for (const auto& [rank, sr] : sv.ranks) {
      const StepOnRank*& src = sources[replica(rank)];
      if (!src || sr.rank < src->rank) src = &sr;
    }
    if (sources.empty()) continue;
    const StepOnRank* global_source = sources.begin()->second;
    for (const auto& [r, src] : sources)
      if (src->rank < global_source->rank) global_source = src;
    for (int r : view.ranks)
      if (!sv.ranks.count(r))
        found_.push_back({sv.step, r, "no megatron.train_step span for this step"});
    for (const auto& [rank, sr] : sv.ranks) {
      const StepOnRank* source = sources[replica(rank)];
      if (pipeline_scope && source != global_source &&
          sr.step_span->trace_id != global_source->step_span->trace_id) {
        bool linked_to_global = false;
        for (const auto& [t, sp] : sr.step_span->links)
          linked_to_global |= sp == global_source->step_span->span_id;
        if (!linked_to_global)
          found_.push_back({sv.step, rank,
                            "step span of replica " + std::to_string(replica(rank)) +
                                " does not link to rank " + std::to_string(global_source->rank) +
                                "'s step span"});
      }
      if (sr.step_span->trace_id != source->step_span->trace_id)
        found_.push_back({sv.step, rank,
                          "trace id " + sr.step_span->trace_id + " differs from rank " +
                              std::to_string(source->rank) + "'s " + source->step_span->trace_id +
                              ": this rank's step is not in the shared trace"});
      std::size_t linked = 0;
      for (const SpanRow* s : sr.spans) {
        if (kind_of(*s) != SpanKind::kLinked) continue;
        ++linked;
        if (sr.stage == 0)
          found_.push_back({sv.step, rank,
                            "a linked span on the first pipeline stage (only later "
                            "stages link to the source)"});
        if (s->parent_span_id != sr.step_span->span_id)
          found_.push_back({sv.step, rank, "linked span is not a child of this rank's step span"});
        if (s->links.size() != 1 || s->links[0].second != source->step_span->span_id)
          found_.push_back({sv.step, rank,
                            "linked span does not link to rank " + std::to_string(source->rank) +
                                "'s step span"});
      }
      linked_counts_[rank].insert(linked);
      // Judged at the end, when the number of stages is known for sure.
      if (sr.stage > 0 && linked > 0) linked_.push_back({sv.step, rank, sr.stage, linked});
    }
  }
}

std::vector<Violation> RunChecker::finish(const Run& files, const FindSpans& find_spans) {
  std::vector<Violation> out;
  // Missing ranks: the resources say how many there should be, unless an
  // export filter left some out on purpose.
  const int world = files.declared_world_size();
  std::set<int> present;
  std::string filter;
  std::set<std::string> run_ids;
  for (const auto& f : files.files) {
    present.insert(f.rank);
    if (!f.export_filter.empty()) filter = f.export_filter;
    if (!f.run_id.empty()) run_ids.insert(f.run_id);
  }
  if (world > 0 && filter.empty()) {
    for (int r = 0; r < world; ++r)
      if (!present.count(r))
        out.push_back(
            {-1, r,
             "no trace file for this rank (the run has " + std::to_string(world) + " ranks)"});
  }
  if (run_ids.size() > 1)
    out.push_back({-1, -1,
                   "files of " + std::to_string(run_ids.size()) +
                       " different runs (nemo.run.id) are mixed in this directory"});

  // The spans in no step: their links and truncation, and what they say of
  // the pipeline's size (the job span carries it).
  const PipelineView rest = build_view(files);
  pipeline_stages_ = std::max(pipeline_stages_, rest.pipeline_stages);
  check_spans(files, rest, {});
  std::map<std::string, std::string> wanted;  // span id -> trace id, when found
  for (const auto& p : pending_) {
    auto it = rest.by_span_id.find(p.span);
    if (it == rest.by_span_id.end()) wanted[p.span];
  }
  if (!wanted.empty()) find_spans(wanted);
  for (const auto& p : pending_) {
    std::string trace;
    if (auto it = rest.by_span_id.find(p.span); it != rest.by_span_id.end())
      trace = it->second->trace_id;
    else if (auto w = wanted.find(p.span); w != wanted.end())
      trace = w->second;
    if (trace != p.trace)
      found_.push_back({p.step, p.rank,
                        p.name + " links to span " + p.span + " of trace " + p.trace +
                            ", which is not in the run"});
  }
  pending_.clear();

  for (const auto& c : linked_)
    if (pipeline_stages_ > 0 && c.linked > static_cast<std::size_t>(pipeline_stages_ - c.stage))
      found_.push_back({c.step, c.rank,
                        std::to_string(c.linked) + " linked spans, more than the " +
                            std::to_string(pipeline_stages_ - c.stage) +
                            " warmup and pre-1F1B receives of stage " + std::to_string(c.stage) +
                            ": the span count grows with the microbatches"});
  std::stable_sort(found_.begin(), found_.end(),
                   [](const Violation& a, const Violation& b) { return a.step < b.step; });
  out.insert(out.end(), found_.begin(), found_.end());
  found_.clear();
  for (const auto& [rank, counts] : linked_counts_)
    if (counts.size() > 1)
      out.push_back({-1, rank, "the number of linked spans changes from step to step"});
  return out;
}

std::vector<Violation> check_run(const Run& run, const PipelineView& view) {
  RunChecker checker;
  checker.add(run, view);
  Run files;
  files.dir = run.dir;
  for (const auto& f : run.files) files.files.push_back(f.without_spans());
  // Every span of the run was in `view`: what add() did not find is not there.
  return checker.finish(files, [](std::map<std::string, std::string>&) {});
}

CheckResult check_dir(const std::filesystem::path& dir, const StreamOptions& options) {
  CheckResult result;
  RunChecker checker;
  Run rest = stream_steps(
      dir,
      [&](StepWindow& w) {
        result.spans += w.run.span_count();
        checker.add(w.run, build_view(w.run));
      },
      options);
  result.spans += rest.span_count();
  result.files = rest.files.size();
  for (const auto& f : rest.files) result.pipeline_scope |= f.trace_scope == "pipeline";
  for (const auto& f : rest.files)
    result.warnings.insert(result.warnings.end(), f.warnings.begin(), f.warnings.end());
  result.violations = checker.finish(rest, [&](std::map<std::string, std::string>& wanted) {
    scan_spans(dir, [&](const RankFile&, const std::vector<SpanRow>& spans) {
      for (const auto& s : spans)
        if (auto it = wanted.find(s.span_id); it != wanted.end()) it->second = s.trace_id;
    });
  });
  result.steps = checker.steps();
  return result;
}

}  // namespace lens::tools
