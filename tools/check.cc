#include "check.h"

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

std::vector<Violation> check_run(const Run& run, const PipelineView& view) {
  std::vector<Violation> out;

  // Missing ranks: the resources say how many there should be, unless an
  // export filter left some out on purpose.
  const int world = run.declared_world_size();
  std::set<int> present(view.ranks.begin(), view.ranks.end());
  std::string filter;
  bool pipeline_scope = false;
  std::map<int, int> replica_of;  // rank -> dl.data_parallel.rank
  for (const auto& f : run.files) {
    if (!f.export_filter.empty()) filter = f.export_filter;
    pipeline_scope |= f.trace_scope == "pipeline";
    replica_of[f.rank] = f.replica;
  }
  if (world > 0 && filter.empty()) {
    for (int r = 0; r < world; ++r)
      if (!present.count(r))
        out.push_back(
            {-1, r,
             "no trace file for this rank (the run has " + std::to_string(world) + " ranks)"});
  }
  std::set<std::string> run_ids;
  for (const auto& f : run.files)
    if (!f.run_id.empty()) run_ids.insert(f.run_id);
  if (run_ids.size() > 1)
    out.push_back({-1, -1,
                   "files of " + std::to_string(run_ids.size()) +
                       " different runs (nemo.run.id) are mixed in this directory"});

  // Links must resolve to a span of the run, in the trace they name.
  for (const auto& f : run.files) {
    for (const auto& s : f.spans) {
      for (const auto& [trace, span] : s.links) {
        auto it = view.by_span_id.find(span);
        if (it == view.by_span_id.end() || it->second->trace_id != trace)
          out.push_back({s.int_attr("dl.step", -1), s.rank,
                         s.name + " links to span " + span + " of trace " + trace +
                             ", which is not in the run"});
      }
      auto t = s.attributes.find("nemo.span.truncated");
      if (t != s.attributes.end() && t->second == "true")
        out.push_back({-1, s.rank,
                       s.name + " was still open when its process shut down "
                                "(nemo.span.truncated)"});
    }
  }

  // Per step: one trace for all ranks (in `pipeline` scope: per replica,
  // each linked to global rank 0's step span); linked spans in place.
  std::map<int, std::set<std::size_t>> linked_counts;  // rank -> distinct counts per step
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
        out.push_back({sv.step, r, "no megatron.train_step span for this step"});
    for (const auto& [rank, sr] : sv.ranks) {
      const StepOnRank* source = sources[replica(rank)];
      if (pipeline_scope && source != global_source &&
          sr.step_span->trace_id != global_source->step_span->trace_id) {
        bool linked_to_global = false;
        for (const auto& [t, sp] : sr.step_span->links)
          linked_to_global |= sp == global_source->step_span->span_id;
        if (!linked_to_global)
          out.push_back({sv.step, rank,
                         "step span of replica " + std::to_string(replica(rank)) +
                             " does not link to rank " + std::to_string(global_source->rank) +
                             "'s step span"});
      }
      if (sr.step_span->trace_id != source->step_span->trace_id)
        out.push_back({sv.step, rank,
                       "trace id " + sr.step_span->trace_id + " differs from rank " +
                           std::to_string(source->rank) + "'s " + source->step_span->trace_id +
                           ": this rank's step is not in the shared trace"});
      std::size_t linked = 0;
      for (const SpanRow* s : sr.spans) {
        if (kind_of(*s) != SpanKind::kLinked) continue;
        ++linked;
        if (sr.stage == 0)
          out.push_back({sv.step, rank,
                         "a linked span on the first pipeline stage (only later "
                         "stages link to the source)"});
        if (s->parent_span_id != sr.step_span->span_id)
          out.push_back({sv.step, rank, "linked span is not a child of this rank's step span"});
        if (s->links.size() != 1 || s->links[0].second != source->step_span->span_id)
          out.push_back({sv.step, rank,
                         "linked span does not link to rank " + std::to_string(source->rank) +
                             "'s step span"});
      }
      linked_counts[rank].insert(linked);
      if (view.pipeline_stages > 0 && sr.stage > 0 &&
          linked > static_cast<std::size_t>(view.pipeline_stages - sr.stage))
        out.push_back({sv.step, rank,
                       std::to_string(linked) + " linked spans, more than the " +
                           std::to_string(view.pipeline_stages - sr.stage) +
                           " warmup and pre-1F1B receives of stage " + std::to_string(sr.stage) +
                           ": the span count grows with the microbatches"});
    }
  }
  for (const auto& [rank, counts] : linked_counts)
    if (counts.size() > 1)
      out.push_back({-1, rank, "the number of linked spans changes from step to step"});
  return out;
}

}  // namespace lens::tools
