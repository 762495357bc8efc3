#include "check.h"

#include <algorithm>
#include <map>
#include <set>

#include "upstream_steps.h"
#include "lens/semconv.h"

namespace lens::analysis {
namespace {

std::string span_label(const SpanRow& s) { return s.name + " " + s.span_id; }

// The warmup forwards of Megatron's 1F1B schedules on stage s of P with M
// microbatches and V chunks per stage: min(P-s-1, M) without interleaving;
// min(2(P-s-1) + (V-1)P, MV) with it, or all MV when M = P.
int warmup_forwards(int pipeline_stages, int stage, int microbatches, int virtual_stages) {
  if (virtual_stages <= 1) return std::min(pipeline_stages - stage - 1, microbatches);
  const int total = microbatches * virtual_stages;
  if (microbatches == pipeline_stages) return total;
  return std::min(2 * (pipeline_stages - stage - 1) + (virtual_stages - 1) * pipeline_stages,
                  total);
}

// The linked receives: the warmup ones, and the one before the steady state.
std::size_t expected_linked(int pipeline_stages, int stage, int microbatches, int virtual_stages) {
  const int warmup = warmup_forwards(pipeline_stages, stage, microbatches, virtual_stages);
  const int total = microbatches * std::max(1, virtual_stages);
  return static_cast<std::size_t>(warmup + (total > warmup ? 1 : 0));
}

// The most linked receives any M allows.
std::size_t linked_bound(int pipeline_stages, int stage, int virtual_stages) {
  if (virtual_stages <= 1) return static_cast<std::size_t>(pipeline_stages - stage);
  return static_cast<std::size_t>(2 * (pipeline_stages - stage - 1) +
                                  (virtual_stages - 1) * pipeline_stages + 1);
}

// True when `s` is a descendant of `ancestor` on the same rank (the
// schedule may nest a linked span in forward_backward, inside the step).
bool within(const SpanRow& s, const SpanRow& ancestor, const PipelineView& view) {
  const SpanRow* at = &s;
  for (int depth = 0; depth < 64 && !at->parent_span_id.empty(); ++depth) {
    if (at->parent_span_id == ancestor.span_id) return true;
    const auto it = view.by_span_id.find(at->parent_span_id);
    if (it == view.by_span_id.end() || it->second->rank != s.rank) return false;
    at = it->second;
  }
  return false;
}

// Of the step's spans, in rank order and each rank's order, those whose
// span id an earlier one of the same trace has.
std::vector<bool> repeated_ids(const StepView& sv) {
  struct Seen {
    std::string_view trace, span;
    std::size_t at;
  };
  std::vector<Seen> seen;
  for (const auto& [rank, sr] : sv.ranks)
    for (const SpanRow* s : sr.spans) seen.push_back({s->trace_id, s->span_id, seen.size()});
  std::sort(seen.begin(), seen.end(), [](const Seen& a, const Seen& b) {
    if (id_less(a.span, b.span)) return true;
    if (id_less(b.span, a.span)) return false;
    if (id_less(a.trace, b.trace)) return true;
    if (id_less(b.trace, a.trace)) return false;
    return a.at < b.at;
  });
  std::vector<bool> repeated(seen.size(), false);
  for (std::size_t i = 1; i < seen.size(); ++i)
    if (seen[i].trace == seen[i - 1].trace && seen[i].span == seen[i - 1].span)
      repeated[seen[i].at] = true;
  return repeated;
}

std::string micros(std::int64_t ns) { return std::to_string(ns / 1000) + " us"; }

bool in_schedule(SpanKind kind) {
  return kind == SpanKind::kForward || kind == SpanKind::kBackward || kind == SpanKind::kP2p ||
         kind == SpanKind::kLinked;
}

// What StartOrder::of needs of a file: its host (host.name) and rank.
void note_host_and_rank(const RankFile& f, std::set<std::string>& hosts, std::set<int>& ranks) {
  ranks.insert(f.rank);
  if (auto h = f.resource.find("host.name"); h != f.resource.end() && !h->second.empty())
    hosts.insert(h->second);
}

// The first few distinct link targets of a rank's step spans are counted:
// the job span is one of them (every step links to it); the others (rank
// 0's step span, in pipeline scope) change from step to step.
constexpr std::size_t kCountedLinkTargets = 16;

}  // namespace

StartOrder StartOrder::of(const std::set<std::string>& hosts, const std::set<int>& ranks,
                          const ClockAlignment& clock) {
  StartOrder order;
  const std::vector<int> sampled_list = clock.ranks();
  const std::set<int> sampled(sampled_list.begin(), sampled_list.end());
  const bool every_rank_sampled =
      !clock.empty() && std::all_of(ranks.begin(), ranks.end(),
                                    [&](int r) { return r == 0 || sampled.count(r) != 0; });
  if (every_rank_sampled) {
    order.clock = &clock;
    order.tolerance_ns = kSameHostSlackNs + clock.max_uncertainty_ns();
    order.how = "start times compared on rank 0's clock (the run's clock samples), within " +
                micros(order.tolerance_ns);
  } else if (hosts.size() <= 1) {
    order.how = "start times compared on one host's clock, within " + micros(order.tolerance_ns);
  } else {
    order.judged = false;
    order.how = "start times not compared: the ranks are on " + std::to_string(hosts.size()) +
                " hosts, and not every rank has clock samples (LENS_CLOCK_SYNC)";
  }
  return order;
}

std::int64_t StartOrder::start_of(const SpanRow& span) const {
  return span.start_ns + (clock ? clock->offset_at(span.rank, span.process, span.start_ns) : 0);
}

std::string RunChecker::start_order() const {
  if (!ordered_seen_ && unordered_seen_)
    return "start times not compared: the step contexts are derived or prefetched, which "
           "does not order the ranks' steps";
  return order_.how;
}

std::string format_violation(const Violation& v) {
  std::string where;
  if (v.step >= 0) where += "step " + std::to_string(v.step);
  if (v.rank >= 0)
    where += std::string(where.empty() ? "" : ", ") + "rank " + std::to_string(v.rank);
  return (where.empty() ? "" : where + ": ") + v.what + (v.span.empty() ? "" : " [" + v.span + "]");
}

void RunChecker::check_spans(const Run& part, const PipelineView& view,
                             const IdIndex<std::int64_t>& step_of_span) {
  // Links must resolve to a span of the run, in the trace they name; what
  // is not in this part is looked for at the end.
  for (const auto& f : part.files) {
    for (const auto& s : f.spans) {
      auto st = step_of_span.find(s.span_id);
      const std::int64_t step =
          st != step_of_span.end() ? st->second : s.int_attr(semconv::kStep, -1);
      if (s.has(semconv::kPipelineSize))
        declared_stages_ = std::max(declared_stages_,
                                    static_cast<int>(s.int_attr(semconv::kPipelineSize, 0)));
      for (const auto& [trace, span] : s.links) {
        auto it = view.by_span_id.find(span);
        if (it == view.by_span_id.end())
          pending_.push_back({step, s.rank, s.name, s.span_id.str(), trace.str(), span.str()});
        else if (it->second->trace_id != trace)
          found_.push_back({step, s.rank,
                            s.name + " links to span " + span + " of trace " + trace +
                                ", which is not in the run",
                            span_label(s)});
      }
      if (s.name == semconv::kJobSpan) job_of_rank_[s.rank] = {s.trace_id.str(), s.span_id.str()};
      const bool truncated = s.attributes.text(semconv::kTruncated) == "true";
      // Ended by the signal that stopped the process (lens.stopped_by): the
      // run was stopped on purpose, counted, not a fault.
      if (const auto by = s.attributes.text(semconv::kStoppedBy); truncated && by) {
        ++stopped_spans_;
        stopped_by_ = *by;
      } else if (truncated &&
                 s.attributes.text(semconv::kEndedBy) == semconv::kEndedByCollection)
        found_.push_back({-1, s.rank,
                          s.name + " was never ended: its Python object was collected as "
                                   "garbage (nemo.span.truncated; its end is the collection's "
                                   "time)",
                          span_label(s)});
      else if (truncated)
        found_.push_back({-1, s.rank,
                          s.name + " was still open when its process shut down "
                                   "(nemo.span.truncated)",
                          span_label(s)});
    }
  }
}

void RunChecker::check_start_order(const StepView& sv, const StepOnRank& source,
                                   const std::vector<const StepOnRank*>& pipeline) {
  const SpanRow& first = *source.step_span;
  const std::int64_t first_start = order_.start_of(first);
  for (const StepOnRank* sr : pipeline) {
    if (sr == &source) continue;  // its spans are its step span's children: the parent check
    const SpanRow* earliest = nullptr;
    for (const SpanRow* s : sr->spans) {
      const std::int64_t ahead = first_start - order_.start_of(*s);
      if (kind_of(*s) == SpanKind::kLinked && ahead > order_.tolerance_ns)
        found_.push_back({sv.step, sr->rank,
                          "linked span starts " + micros(ahead) + " before the span it links to (" +
                              span_label(first) + " of rank " + std::to_string(source.rank) + ")",
                          span_label(*s)});
      if (!earliest || s->start_ns < earliest->start_ns) earliest = s;
    }
    if (earliest == nullptr) continue;
    const std::int64_t ahead = first_start - order_.start_of(*earliest);
    if (ahead > order_.tolerance_ns)
      found_.push_back({sv.step, sr->rank,
                        "starts " + micros(ahead) + " before the source's step span (rank " +
                            std::to_string(source.rank) +
                            "'s): the source's step span opens first, before its broadcast",
                        span_label(*earliest)});
  }
}

void RunChecker::check_nesting(const StepView& sv, const StepOnRank& sr, const PipelineView& view) {
  std::vector<const SpanRow*> around;
  for (const SpanRow* s : sr.spans)
    if (kind_of(*s) == SpanKind::kForwardBackward) around.push_back(s);
  if (around.empty()) return;  // the forward_backward group is off: nothing to nest in
  std::size_t outside = 0;
  const SpanRow* first = nullptr;
  for (const SpanRow* s : sr.spans) {
    if (!in_schedule(kind_of(*s))) continue;
    if (std::any_of(around.begin(), around.end(),
                    [&](const SpanRow* fb) { return within(*s, *fb, view); }))
      continue;
    if (outside++ == 0) first = s;
  }
  if (outside > 0)
    found_.push_back({sv.step, sr.rank,
                      std::to_string(outside) +
                          " schedule span(s) (microbatch, p2p, linked) not inside "
                          "megatron.forward_backward, where the schedule runs",
                      span_label(*first)});
}

void RunChecker::check_step(const StepView& sv, const PipelineView& view, bool pipeline_scope,
                            const std::map<int, std::pair<int, int>>& pipeline_of, bool ordered) {
  // The pipelines sharing a trace: every rank in world scope; each (dp, tp)
  // pipeline in pipeline scope.
  const auto pipeline = [&](int rank) {
    if (!pipeline_scope) return std::pair{-1, -1};
    auto it = pipeline_of.find(rank);
    return it != pipeline_of.end() ? it->second : std::pair{-1, -1};
  };
  // Each pipeline's source (global rank 0 in world scope, the first stage in
  // pipeline scope), when its step span is here, and the rank whose trace id
  // the others are compared with (the source, else the lowest stage here).
  std::map<std::pair<int, int>, const StepOnRank*> source, reference;
  for (const auto& [rank, sr] : sv.ranks) {
    const auto p = pipeline(rank);
    if (pipeline_scope ? sr.stage == 0 : rank == 0) source[p] = &sr;
    const StepOnRank*& ref = reference[p];
    if (!ref || std::pair{sr.stage, sr.rank} < std::pair{ref->stage, ref->rank}) ref = &sr;
  }
  for (auto& [p, ref] : reference)
    if (source.count(p)) ref = source[p];
  const auto global = sv.ranks.find(0);
  const StepOnRank* global_source = global != sv.ranks.end() ? &global->second : nullptr;

  // A step some rank was in when a signal stopped it: its spans are
  // checked, but not that every rank got to it or its schedule's counts.
  const bool interrupted = std::any_of(sv.ranks.begin(), sv.ranks.end(), [](const auto& r) {
    return r.second.step_span->has(semconv::kStoppedBy);
  });
  if (interrupted) ++interrupted_steps_;
  for (int r : view.ranks)
    if (!sv.ranks.count(r) && !interrupted)
      found_.push_back({sv.step, r, "no megatron.train_step span for this step", ""});

  const std::vector<bool> repeated = repeated_ids(sv);
  std::size_t at_span = 0;
  std::set<std::string> step_traces;
  for (const auto& [rank, sr] : sv.ranks) {
    const SpanRow& step_span = *sr.step_span;
    const auto p = pipeline(rank);
    const StepOnRank* src = source.count(p) ? source[p] : nullptr;
    const StepOnRank* ref = reference[p];
    if (step_span.trace_id != ref->step_span->trace_id && !inferred_)
      found_.push_back({sv.step, rank,
                        "trace id " + step_span.trace_id + " differs from rank " +
                            std::to_string(ref->rank) + "'s " + ref->step_span->trace_id +
                            ": this rank's step is not in the shared trace",
                        span_label(step_span)});
    if (src != &sr && !step_span.parent_span_id.empty())
      found_.push_back({sv.step, rank,
                        "step span has a parent (" + step_span.parent_span_id +
                            "): only the source's step span may; the other ranks' step spans "
                            "are roots of the shared trace",
                        span_label(step_span)});
    if (pipeline_scope && global_source && p != pipeline(0) &&
        step_span.trace_id != global_source->step_span->trace_id) {
      bool linked_to_global = false;
      for (const auto& [t, sp] : step_span.links)
        linked_to_global |= sp == global_source->step_span->span_id;
      if (!linked_to_global)
        found_.push_back({sv.step, rank,
                          "step span of replica " + std::to_string(p.first) +
                              " does not link to rank 0's step span",
                          span_label(step_span)});
    }
    step_traces.insert(step_span.trace_id.str());
    stages_.push_back({sv.step, rank, sr.stage, span_label(step_span)});
    ++steps_of_rank_[rank];
    auto& targets = step_link_targets_[rank];
    for (const auto& [t, sp] : step_span.links)
      if (targets.count(sp.str()) || targets.size() < kCountedLinkTargets) ++targets[sp.str()];
    check_nesting(sv, sr, view);

    std::size_t linked = 0;
    bool has_p2p = false;
    for (const SpanRow* s : sr.spans) {
      if (repeated[at_span++])
        found_.push_back(
            {sv.step, rank,
             "span id " + s->span_id + " appears more than once in trace " + s->trace_id,
             span_label(*s)});
      if (!s->parent_span_id.empty())
        if (auto it = view.by_span_id.find(s->parent_span_id); it != view.by_span_id.end() &&
                                                               it->second->rank == rank &&
                                                               s->start_ns < it->second->start_ns)
          found_.push_back({sv.step, rank,
                            "starts " +
                                std::to_string((it->second->start_ns - s->start_ns) / 1000) +
                                " us before its parent " + span_label(*it->second),
                            span_label(*s)});
      const SpanKind kind = kind_of(*s);
      has_p2p |= kind == SpanKind::kP2p;
      if (kind != SpanKind::kLinked) continue;
      ++linked;
      if (sr.stage == 0)
        found_.push_back({sv.step, rank,
                          "a linked span on the first pipeline stage (only later "
                          "stages link to the source)",
                          span_label(*s)});
      if (!within(*s, step_span, view))
        found_.push_back(
            {sv.step, rank, "linked span is not within this rank's step span", span_label(*s)});
      // Without the source's step span (an export filter left it out) the
      // link is judged where it resolves, in finish().
      if (src && (s->links.size() != 1 || s->links[0].second != src->step_span->span_id))
        found_.push_back(
            {sv.step, rank,
             "linked span does not link to rank " + std::to_string(src->rank) + "'s step span",
             span_label(*s)});
      const std::int64_t stage_attr = s->int_attr(semconv::kPipelineRank, -1);
      if (stage_attr != sr.stage)
        found_.push_back({sv.step, rank,
                          s->has(semconv::kPipelineRank)
                              ? "linked span says dl.pipeline_parallel.rank=" +
                                    std::string(*s->attributes.text(semconv::kPipelineRank)) +
                                    ", but its rank is stage " + std::to_string(sr.stage)
                              : "linked span has no dl.pipeline_parallel.rank",
                          span_label(*s)});
      const std::int64_t microbatch = s->int_attr(semconv::kMicrobatchId, -1);
      if (microbatch < 0)
        found_.push_back({sv.step, rank, "linked span has no dl.microbatch_id", span_label(*s)});
      else if (view.microbatches > 0 && microbatch >= view.microbatches)
        found_.push_back({sv.step, rank,
                          "linked span's dl.microbatch_id " + std::to_string(microbatch) +
                              " is not below the " + std::to_string(view.microbatches) +
                              " microbatches of a step",
                          span_label(*s)});
    }
    if (interrupted) continue;
    linked_counts_[rank].insert(linked);
    // Judged at the end, when the number of stages is known for sure.
    if (sr.stage > 0) linked_.push_back({sv.step, rank, sr.stage, linked, has_p2p});
  }
  if (ordered && order_.judged) {
    std::map<std::pair<int, int>, std::vector<const StepOnRank*>> members;
    for (const auto& [rank, sr] : sv.ranks) members[pipeline(rank)].push_back(&sr);
    for (const auto& [p, src] : source) check_start_order(sv, *src, members[p]);
  }
  if (part_)
    trace_uses_.push_back({found_.size(), sv.step, {step_traces.begin(), step_traces.end()}});
  else
    note_traces(sv.step, step_traces);
}

template <typename Traces>
void RunChecker::note_traces(std::int64_t step, const Traces& traces) {
  for (const auto& trace : traces) {
    auto [it, fresh] = step_of_trace_.emplace(trace, step);
    if (!fresh && it->second != step)
      found_.push_back({step, -1,
                        "trace id " + trace + " was already step " + std::to_string(it->second) +
                            "'s: two steps share one trace",
                        ""});
  }
}

void RunChecker::absorb(RunChecker&& part) {
  pipeline_stages_ = std::max(pipeline_stages_, part.pipeline_stages_);
  declared_stages_ = std::max(declared_stages_, part.declared_stages_);
  microbatches_ = std::max(microbatches_, part.microbatches_);
  virtual_stages_ = std::max(virtual_stages_, part.virtual_stages_);
  steps_ += part.steps_;
  stopped_spans_ += part.stopped_spans_;
  interrupted_steps_ += part.interrupted_steps_;
  if (!part.stopped_by_.empty()) stopped_by_ = part.stopped_by_;
  inferred_ = inferred_ || part.inferred_;
  unordered_seen_ = unordered_seen_ || part.unordered_seen_;
  ordered_seen_ = ordered_seen_ || part.ordered_seen_;
  // The part's findings with its steps' trace ids judged where one checker
  // would have judged them: against every earlier step's.
  std::size_t at = 0;
  for (const TraceUse& use : part.trace_uses_) {
    for (; at < use.found; ++at) found_.push_back(std::move(part.found_[at]));
    note_traces(use.step, use.traces);
  }
  for (; at < part.found_.size(); ++at) found_.push_back(std::move(part.found_[at]));
  for (auto& p : part.pending_) pending_.push_back(std::move(p));
  linked_.insert(linked_.end(), part.linked_.begin(), part.linked_.end());
  for (auto& s : part.stages_) stages_.push_back(std::move(s));
  for (const auto& [rank, counts] : part.linked_counts_)
    linked_counts_[rank].insert(counts.begin(), counts.end());
  for (auto& [rank, job] : part.job_of_rank_) job_of_rank_[rank] = std::move(job);
  // Targets beyond the counted number are left out as one checker would
  // (which of them first, it alone knows; the job span, linked from every
  // step, is always among a part's first).
  for (const auto& [rank, targets] : part.step_link_targets_) {
    auto& mine = step_link_targets_[rank];
    for (const auto& [target, n] : targets)
      if (mine.count(target) || mine.size() < kCountedLinkTargets) mine[target] += n;
  }
  for (const auto& [rank, n] : part.steps_of_rank_) steps_of_rank_[rank] += n;
}

void RunChecker::check_job(std::vector<Violation>& out) {
  if (job_of_rank_.empty()) return;
  const auto zero = job_of_rank_.find(0);
  const auto& [ref_rank, ref] = zero != job_of_rank_.end() ? *zero : *job_of_rank_.begin();
  for (const auto& [rank, job] : job_of_rank_) {
    const std::string label = "megatron.job " + job.second;
    if (job.first != ref.first)
      out.push_back({-1, rank,
                     "megatron.job is in trace " + job.first + ", rank " +
                         std::to_string(ref_rank) + "'s in " + ref.first +
                         ": the job is not one trace",
                     label});
    const std::size_t steps = steps_of_rank_[rank];
    const auto& targets = step_link_targets_[rank];
    const auto linked = targets.find(job.second);
    const std::size_t linking = linked != targets.end() ? linked->second : 0;
    if (linking < steps)
      out.push_back({-1, rank,
                     std::to_string(steps - linking) + " of " + std::to_string(steps) +
                         " step spans do not link to this rank's megatron.job span, so a viewer "
                         "cannot go from those steps to the job",
                     label});
  }
}

void RunChecker::add(const Run& run, const PipelineView& view) {
  pipeline_stages_ = std::max(pipeline_stages_, view.pipeline_stages);
  microbatches_ = std::max(microbatches_, view.microbatches);
  virtual_stages_ = std::max(virtual_stages_, view.virtual_stages);
  IdIndex<std::int64_t> step_of_span;
  for (const auto& sv : view.steps)
    for (const auto& [rank, sr] : sv.ranks)
      for (const SpanRow* s : sr.spans) step_of_span.add(s->span_id, sv.step);
  step_of_span.seal();
  check_spans(run, view, step_of_span);
  steps_ += view.steps.size();

  bool pipeline_scope = false;
  // A broadcast orders every rank's step after the source's; a derived or
  // prefetched context does not.
  bool ordered = true;
  std::map<int, std::pair<int, int>> pipeline_of;  // rank -> (dp, tp)
  inferred_ = inferred_ || !inferred_of(run.files).empty();
  for (const auto& f : run.files) {
    pipeline_scope |= f.trace_scope == "pipeline";
    pipeline_of[f.rank] = {f.replica, f.tensor_rank};
    const auto mode = f.resource.find(semconv::kStepContext);
    const auto prefetch = f.resource.find(semconv::kStepPrefetch);
    ordered &= (mode == f.resource.end() || mode->second == "broadcast") &&
               (prefetch == f.resource.end() || prefetch->second != "true");
  }
  if (!view.steps.empty()) (ordered ? ordered_seen_ : unordered_seen_) = true;
  for (const auto& sv : view.steps) check_step(sv, view, pipeline_scope, pipeline_of, ordered);
}

std::vector<Violation> RunChecker::finish(const Run& files, const FindSpans& find_spans) {
  std::vector<Violation> out;
  // Missing ranks: the resources say how many there should be, unless an
  // export filter left some out on purpose.
  const int world = files.declared_world_size();
  std::map<int, std::vector<std::string>> paths_of;
  std::string filter;
  std::set<std::string> run_ids;
  // nemo-lens's export strategy, where lens.otel took over from its provider
  // (it records no span on a rank the strategy leaves out).
  std::string upstream_strategy;
  for (const auto& f : files.files) {
    paths_of[f.rank].push_back(f.path.filename().string());
    if (!f.export_filter.empty()) filter = f.export_filter;
    if (!f.run_id.empty()) run_ids.insert(f.run_id);
    if (auto it = f.resource.find(semconv::kNemoLensExportStrategy); it != f.resource.end())
      upstream_strategy = it->second;
  }
  if (world > 0 && filter.empty()) {
    const std::string why =
        upstream_strategy.empty() || upstream_strategy == "all_ranks"
            ? std::string()
            : "; nemo-lens's export strategy " + upstream_strategy +
                  " leaves ranks out (the default, single_rank, records the last rank only): "
                  "set MEGATRON_OTEL_EXPORT_STRATEGY=all_ranks";
    for (int r = 0; r < world; ++r)
      if (!paths_of.count(r))
        out.push_back({-1, r,
                       "no trace file for this rank (the run has " + std::to_string(world) +
                           " ranks)" + why,
                       ""});
  }
  for (const auto& [rank, paths] : paths_of) {
    if (rank < 0 || paths.size() < 2) continue;
    std::string names;
    for (const auto& p : paths) names += (names.empty() ? "" : ", ") + p;
    out.push_back({-1, rank,
                   std::to_string(paths.size()) + " trace files say they are this rank (" + names +
                       "): a stray copy, or a requeued job's files mixed in",
                   ""});
  }
  if (run_ids.size() > 1)
    out.push_back({-1, -1,
                   "files of " + std::to_string(run_ids.size()) +
                       " different runs (nemo.lens.run_uuid, else nemo.run.id) are mixed in this "
                       "directory",
                   ""});

  // The spans in no step: their links and truncation, and what they say of
  // the pipeline's size (the job span carries it).
  const PipelineView rest = build_view(files);
  pipeline_stages_ = std::max(pipeline_stages_, rest.pipeline_stages);
  virtual_stages_ = std::max(virtual_stages_, rest.virtual_stages);
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
    if (trace.empty() && !filter.empty()) {
      ++unverifiable_;  // its target's rank did not export
    } else if (trace != p.trace) {
      found_.push_back({p.step, p.rank,
                        p.name + " links to span " + p.span + " of trace " + p.trace +
                            ", which is not in the run",
                        p.name + " " + p.span_id});
    }
  }
  pending_.clear();

  if (declared_stages_ > 0)
    for (const auto& s : stages_)
      if (s.stage < 0 || s.stage >= declared_stages_)
        found_.push_back({s.step, s.rank,
                          "stage " + std::to_string(s.stage) + " is not below the pipeline size " +
                              std::to_string(declared_stages_),
                          s.span});
  stages_.clear();

  const bool any_linked = std::any_of(linked_.begin(), linked_.end(),
                                      [](const LinkedCount& c) { return c.linked > 0; });
  for (const auto& c : linked_) {
    if (pipeline_stages_ <= 0 || c.stage >= pipeline_stages_ || inferred_) continue;
    const std::size_t bound = linked_bound(pipeline_stages_, c.stage, virtual_stages_);
    if (c.linked > bound) {
      found_.push_back({c.step, c.rank,
                        std::to_string(c.linked) + " linked spans, more than the " +
                            std::to_string(bound) + " warmup and pre-1F1B receives of stage " +
                            std::to_string(c.stage) +
                            ": the span count grows with the microbatches",
                        ""});
      continue;
    }
    // Exact, where the step's microbatches are known and the receives were
    // traced (the communication group: p2p spans here, or linked spans in
    // the run).
    if (microbatches_ <= 0 || !(c.has_p2p || any_linked)) continue;
    const std::size_t expected =
        expected_linked(pipeline_stages_, c.stage, microbatches_, virtual_stages_);
    if (c.linked != expected)
      found_.push_back(
          {c.step, c.rank,
           std::to_string(c.linked) + " linked spans where stage " + std::to_string(c.stage) +
               " of " + std::to_string(pipeline_stages_) + " with " +
               std::to_string(microbatches_) + " microbatches" +
               (virtual_stages_ > 1 ? " and " + std::to_string(virtual_stages_) + " chunks" : "") +
               " has " + std::to_string(expected) +
               (virtual_stages_ > 1
                    ? " (min(2(P-s-1) + (V-1)P, MV) warmup receives, all MV when M = P, and one "
                      "before the steady state when any are left)"
                    : " (min(P-s-1, M) warmup receives, and one before the steady state "
                      "when M > P-s-1)"),
           ""});
  }
  std::stable_sort(found_.begin(), found_.end(),
                   [](const Violation& a, const Violation& b) { return a.step < b.step; });
  out.insert(out.end(), found_.begin(), found_.end());
  found_.clear();
  for (const auto& [rank, counts] : linked_counts_)
    if (counts.size() > 1)
      out.push_back({-1, rank, "the number of linked spans changes from step to step", ""});
  check_job(out);
  return out;
}

std::vector<Violation> check_run(const Run& run, const PipelineView& view) {
  std::set<std::string> hosts;
  std::set<int> ranks;
  for (const auto& f : run.files) note_host_and_rank(f, hosts, ranks);
  const ClockAlignment no_samples;
  RunChecker checker(StartOrder::of(hosts, ranks, no_samples));
  checker.add(run, view);
  Run files;
  files.dir = run.dir;
  for (const auto& f : run.files) files.files.push_back(f.without_spans());
  // Every span of the run was in `view`: what add() did not find is not there.
  return checker.finish(files, [](std::map<std::string, std::string>&) {});
}

StartOrder start_order_of(const OpenedRun& run, const ClockAlignment& clock) {
  // Which clocks start times can be compared on: the files' hosts and
  // ranks (from their first lines) and the run's clock samples.
  std::set<std::string> hosts;
  std::set<int> ranks;
  for (const auto& path : run.files()) {
    RankFileReader reader(path);
    if (reader.next_line()) note_host_and_rank(reader.file(), hosts, ranks);
  }
  return StartOrder::of(hosts, ranks, clock);
}

CheckResult finish_check(const OpenedRun& run, RunChecker& checker, const Run& rest,
                         std::size_t window_spans, LateSpans late) {
  CheckResult result;
  result.late = std::move(late);
  result.spans = window_spans + rest.span_count();
  result.files = rest.files.size();
  for (const auto& f : rest.files) result.pipeline_scope |= f.trace_scope == "pipeline";
  result.inferred = inferred_of(rest.files);
  for (const auto& f : rest.files)
    result.warnings.insert(result.warnings.end(), f.warnings.begin(), f.warnings.end());
  result.violations = checker.finish(rest, [&](std::map<std::string, std::string>& wanted) {
    scan_spans(run, [&](const RankFile&, const std::vector<SpanRow>& spans) {
      for (const auto& s : spans)
        if (auto it = wanted.find(s.span_id.str()); it != wanted.end()) it->second = s.trace_id;
    });
  });
  // A span id twice in a file is a batch delivered twice (a retried export,
  // a repeated upload): the trace holds a span twice.
  for (const LateSpan& d : result.late.duplicate_list)
    result.violations.push_back(
        {d.step, d.rank,
         d.path.filename().string() + " line " + std::to_string(d.line) +
             " repeats a span read before (a batch delivered twice)",
         d.name + " " + d.span_id});
  if (result.late.duplicates > result.late.duplicate_list.size())
    result.violations.push_back(
        {-1, -1,
         std::to_string(result.late.duplicates - result.late.duplicate_list.size()) +
             " more spans repeat a span read before",
         ""});
  result.steps = checker.steps();
  result.start_order = checker.start_order();
  result.stopped_spans = checker.stopped_spans();
  result.interrupted_steps = checker.interrupted_steps();
  result.stopped_by = checker.stopped_by();
  result.unverifiable_links = checker.unverifiable_links();
  return result;
}

CheckResult check_dir(const OpenedRun& run, const StreamOptions& options) {
  const ClockAlignment clock = read_clock_alignment(run);  // the checker keeps a pointer
  RunChecker checker(start_order_of(run, clock));
  LateSpans late;
  StreamOptions stream = options;
  if (stream.late == nullptr) stream.late = &late;
  std::size_t spans = 0;
  Run rest = stream_steps(
      run,
      [&](StepWindow& w) {
        spans += w.run.span_count();
        checker.add(w.run, build_view(w.run));
      },
      stream);
  return finish_check(run, checker, rest, spans, *stream.late);
}

}  // namespace lens::analysis
