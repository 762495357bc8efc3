// `lens analyze` and `lens diff` (analyze.h, docs/analysis.md).
#include "analyze.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <tuple>

#include "stats.h"
#include "step_replay.h"
#include "upstream_steps.h"

namespace lens::analysis {

void for_each_record(const PipelineView& view, const Run& run, StepBaselines& baselines,
                     bool keep_critical_path, const std::function<void(const StepRecord&)>& each) {
  const std::map<int, PipelineKey> pipeline_of = pipelines_of(run);
  for (const auto& sv : view.steps) {
    int stages = view.pipeline_stages;
    for (const auto& [rank, sr] : sv.ranks) stages = std::max(stages, sr.stage + 1);
    const StepAnalysis a = analyze_step(sv, stages, pipeline_of);
    if (!a.complete) continue;
    each(record_step(a, stages, view.virtual_stages, baselines, keep_critical_path));
  }
}

void AnalysisBuilder::add(const PipelineView& view, const Run& run) {
  for_each_record(view, run, baselines_, keep_critical_path_,
                  [&](const StepRecord& r) { add_record(r); });
}

StepRecord record_step(const StepAnalysis& a, int stages, int virtual_stages,
                       StepBaselines& baselines, bool keep_critical_path) {
  StepRecord r;
  r.step = a.step;
  r.stages = stages;
  r.virtual_stages = virtual_stages;
  r.microbatches = a.microbatches;
  r.impossible_edges = a.impossible_edges;
  r.step_ms = a.step_ms;
  r.critical_path_ms = a.critical_path_ms;
  r.critical_compute_ms = a.critical_compute_ms;
  r.critical_transfer_ms = a.critical_transfer_ms;
  r.critical_all_reduce_ms = a.critical_all_reduce_ms;
  r.critical_replica = a.critical_replica;
  r.critical_tensor = a.critical_tensor;
  if (keep_critical_path) r.critical_path = a.critical_path;
  r.microbatch_costs = a.microbatch_costs;
  for (const auto& [pipeline, g] : a.graphs) r.pipelines.push_back(pipeline);
  r.stages_figures = a.stages_figures;
  r.gains.assign(a.stages_figures.size(), 0.0);
  std::map<PipelineKey, std::int64_t> measured_end;
  for (std::size_t i = 0; i < a.stages_figures.size(); ++i) {
    const StageFigures& f = a.stages_figures[i];
    if (f.microbatches == 0) continue;
    const double cost = f.compute_ms / f.microbatches;
    // The step with this rank at what it should cost: its baseline (the
    // median of its first steps, of those seen so far while they are
    // being seen) or its peers' median this step, the lower.
    std::vector<double>& first = baselines[{f.replica, f.tensor, f.stage}];
    if (first.size() < kBaselineSteps) first.push_back(cost);
    double expected = p50(first);
    std::vector<double> peers;
    for (const auto& p : a.stages_figures)
      if (p.stage == f.stage && (p.replica != f.replica || p.tensor != f.tensor) &&
          p.microbatches > 0)
        peers.push_back(p.compute_ms / p.microbatches);
    if (!peers.empty()) expected = std::min(expected, p50(peers));
    const PipelineKey pipeline = f.pipeline();
    const auto g = a.graphs.find(pipeline);
    if (g != a.graphs.end() && cost > expected && expected > 0) {
      // The pipeline's replayed end as measured, once per pipeline.
      const auto [end, fresh] = measured_end.try_emplace(pipeline, 0);
      const StepReplay replay(g->second);
      if (fresh) end->second = replay.end();
      r.gains[i] = static_cast<double>(replay.end(f.stage, expected / cost) - end->second) / 1e6;
    }
  }
  return r;
}

void AnalysisBuilder::add_record(const StepRecord& a) {
  ++steps_;
  stages_ = std::max(stages_, a.stages);
  microbatches_ = std::max(microbatches_, a.microbatches);
  virtual_stages_ = std::max(virtual_stages_, a.virtual_stages);
  impossible_edges_ += a.impossible_edges;
  double bubble_sum = 0;
  int bubble_stages = 0;
  for (const auto& f : a.stages_figures)
    if (f.window_ms > 0) {
      bubble_sum += f.idle_ms / f.window_ms;
      ++bubble_stages;
    }
  const double bubble = bubble_stages > 0 ? bubble_sum / bubble_stages : -1;
  if (bubble_stages > 0) bubble_.push_back(bubble);
  step_ms_.push_back(a.step_ms);
  critical_ms_.push_back(a.critical_path_ms);
  critical_compute_ms_.push_back(a.critical_compute_ms);
  critical_transfer_ms_.push_back(a.critical_transfer_ms);
  critical_all_reduce_ms_.push_back(a.critical_all_reduce_ms);
  step_rows_.push_back({a.step, a.critical_replica, a.critical_tensor, a.step_ms,
                        a.critical_path_ms, a.critical_compute_ms, a.critical_transfer_ms,
                        a.critical_all_reduce_ms, bubble});
  for (const auto& seg : a.critical_path) critical_paths_.push_back({a.step, seg});
  variability_.add(a.microbatch_costs, a.critical_replica);
  for (const auto& pipeline : a.pipelines) {
    replicas_ = std::max(replicas_, pipeline.replica + 1);
    tensors_ = std::max(tensors_, pipeline.tensor + 1);
  }
  for (std::size_t i = 0; i < a.stages_figures.size(); ++i) {
    const StageFigures& f = a.stages_figures[i];
    if (f.microbatches == 0) continue;
    Series& s = series_[{f.replica, f.tensor, f.stage}];
    s.tensor = f.tensor;
    s.rank = f.rank;
    s.replica = f.replica;
    s.steps.push_back(a.step);
    s.per_microbatch.push_back(f.compute_ms / f.microbatches);
    s.compute.push_back(f.compute_ms);
    s.critical_share.push_back(f.critical_share);
    s.step.push_back(f.step_ms);
    s.microbatches.push_back(f.microbatches);
    s.step_time.push_back(a.step_ms);
    s.late_sender.push_back(f.late_sender_ms);
    s.transfer.push_back(f.transfer_ms);
    s.late_receiver.push_back(f.late_receiver_ms);
    s.sync_wait.push_back(f.sync_wait_ms);
    s.sync_last_replica.push_back(f.sync_last_replica);
    s.sync_wait_at.push_back(f.sync_wait_at);
    s.collective_wait.push_back(f.collective_wait_ms);
    s.collective_waited_for.push_back(f.collective_waited_for_ms);
    s.rest.push_back(f.rest_ms);
    s.unmatched += f.unmatched_transfers;
    s.idle.push_back(f.idle_ms);
    s.warmup.push_back(f.warmup_idle_ms);
    s.cooldown.push_back(f.cooldown_idle_ms);
    s.imbalance.push_back(f.imbalance_idle_ms);
    s.transfer_idle.push_back(f.transfer_idle_ms);
    s.schedule_idle.push_back(f.schedule_idle_ms);
    s.slack.push_back(f.slack_ms);
    s.gain_at_median.push_back(f.gain_at_median_ms);
    s.gain_at_baseline.push_back(a.gains[i]);
  }
  // Relative scores compare with the step's fastest stage: finish().
}

Analysis AnalysisBuilder::finish() {
  Analysis out;
  out.stages = stages_;
  out.microbatches = microbatches_;
  out.virtual_stages = virtual_stages_;
  out.impossible_edges = impossible_edges_;
  out.step_rows = step_rows_;
  out.critical_paths = critical_paths_;
  out.variability = variability_.finish();
  out.replicas = replicas_;
  out.tensors = tensors_;
  if (!bubble_.empty()) out.bubble_p50 = percentile(bubble_, 0.5);
  out.theoretical_bubble = theoretical_bubble(stages_, microbatches_, virtual_stages_);
  out.steps = steps_;
  out.step_p50_ms = percentile(step_ms_, 0.5);
  out.step_p95_ms = percentile(step_ms_, 0.95);
  out.critical_path_p50_ms = percentile(critical_ms_, 0.5);
  out.critical_compute_p50_ms = percentile(critical_compute_ms_, 0.5);
  out.critical_transfer_p50_ms = percentile(critical_transfer_ms_, 0.5);
  out.critical_all_reduce_p50_ms = percentile(critical_all_reduce_ms_, 0.5);
  // The verdicts judge pipelines: a rank's peers are the same stage in
  // every other pipeline (its replicas and its TP peers do the same work),
  // and "its replica" for them is its own pipeline.
  std::map<std::pair<int, int>, int> pipeline_index;  // (replica, tensor) -> dense index
  for (const auto& [key, s] : series_)
    pipeline_index.try_emplace({s.replica, s.tensor}, static_cast<int>(pipeline_index.size()));
  const auto pipeline = [&](const Series& s) { return pipeline_index.at({s.replica, s.tensor}); };
  std::vector<RankSeries> ranks;
  for (const auto& [key, s] : series_)
    ranks.push_back({s.rank, std::get<2>(key), pipeline(s), s.steps, s.per_microbatch});
  const Verdicts verdicts = judge_stages(ranks);
  // Per step and pipeline, the fastest stage's compute per microbatch.
  Fastest fastest;
  for (const auto& [key, s] : series_)
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      auto k = std::pair{pipeline(s), s.steps[i]};
      auto it = fastest.find(k);
      if (it == fastest.end() || s.per_microbatch[i] < it->second) fastest[k] = s.per_microbatch[i];
    }
  std::size_t index = 0;
  std::map<int, const Series*> series_of_rank;
  for (const auto& [key, s] : series_) {
    series_of_rank[s.rank] = &s;
    const StageAnalysis st = stage_analysis(s, std::get<2>(key), verdicts.baseline_ms[index],
                                            verdicts.baseline_relative[index], fastest,
                                            pipeline(s));
    ++index;
    add_stage_steps(s, st, out.stage_steps);
    if (st.relative > out.slowest_relative) {
      out.slowest_relative = st.relative;
      out.slowest_stage = st.stage;
    }
    out.stages_analysis.push_back(st);
  }
  for (const Straggler& who : verdicts.stragglers)
    out.stragglers.push_back(straggler_report(who, *series_of_rank.at(who.rank)));
  for (const Straggler& who : verdicts.not_named)
    out.not_named.push_back(straggler_report(who, *series_of_rank.at(who.rank)));
  for (const Imbalance& what : verdicts.imbalance)
    out.imbalance.push_back(imbalance_report(what, out));
  return out;
}

StageAnalysis AnalysisBuilder::stage_analysis(const Series& s, int stage, double baseline_ms,
                                              double baseline_relative, const Fastest& fastest,
                                              int pipeline) {
  StageAnalysis st;
  st.replica = s.replica;
  st.tensor = s.tensor;
  st.stage = stage;
  st.rank = s.rank;
  st.steps = s.steps.size();
  st.compute_per_microbatch_ms = percentile(s.per_microbatch, 0.5);
  st.baseline_per_microbatch_ms = baseline_ms;
  st.baseline_relative = baseline_relative;
  std::vector<double> relative, individual;
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const double best = fastest.at({pipeline, s.steps[i]});
    relative.push_back(best > 0 ? s.per_microbatch[i] / best : 1);
    individual.push_back(st.baseline_per_microbatch_ms > 0
                             ? s.per_microbatch[i] / st.baseline_per_microbatch_ms
                             : 1);
  }
  st.relative = percentile(relative, 0.5);
  st.individual = percentile(individual, 0.95);
  st.critical_share_p50 = percentile(s.critical_share, 0.5);
  st.critical_share_p95 = percentile(s.critical_share, 0.95);
  st.step_p50_ms = percentile(s.step, 0.5);
  st.compute_p50_ms = percentile(s.compute, 0.5);
  st.late_sender_p50_ms = percentile(s.late_sender, 0.5);
  st.late_sender_p95_ms = percentile(s.late_sender, 0.95);
  st.transfer_p50_ms = percentile(s.transfer, 0.5);
  st.late_receiver_p50_ms = percentile(s.late_receiver, 0.5);
  st.sync_wait_p50_ms = percentile(s.sync_wait, 0.5);
  st.rest_p50_ms = percentile(s.rest, 0.5);
  st.collective_wait_p50_ms = percentile(s.collective_wait, 0.5);
  std::map<int, double> waited_for;  // over the run
  for (const auto& step : s.collective_waited_for)
    for (const auto& [peer, w] : step) waited_for[peer] += w;
  st.collective_last_peer = longest_waited_for(waited_for);
  st.unmatched_transfers = s.unmatched;
  st.idle_p50_ms = percentile(s.idle, 0.5);
  st.warmup_idle_p50_ms = percentile(s.warmup, 0.5);
  st.cooldown_idle_p50_ms = percentile(s.cooldown, 0.5);
  st.imbalance_idle_p50_ms = percentile(s.imbalance, 0.5);
  st.transfer_idle_p50_ms = percentile(s.transfer_idle, 0.5);
  st.schedule_idle_p50_ms = percentile(s.schedule_idle, 0.5);
  st.slack_p50_ms = percentile(s.slack, 0.5);
  st.gain_at_baseline_p50_ms = percentile(s.gain_at_baseline, 0.5);
  st.gain_at_median_p50_ms = percentile(s.gain_at_median, 0.5);
  return st;
}

void AnalysisBuilder::add_stage_steps(const Series& s, const StageAnalysis& st,
                                      std::vector<StageStepFigures>& rows) {
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    rows.push_back({.step = s.steps[i],
                    .replica = st.replica,
                    .tensor = st.tensor,
                    .stage = st.stage,
                    .rank = st.rank,
                    .step_ms = s.step_time[i],
                    .slack_ms = s.slack[i],
                    .gain_at_baseline_ms = s.gain_at_baseline[i],
                    .gain_at_median_ms = s.gain_at_median[i],
                    .sync_wait_ms = s.sync_wait[i],
                    .sync_last_replica = s.sync_last_replica[i],
                    .sync_wait_at = s.sync_wait_at[i],
                    .collective_wait_ms = s.collective_wait[i],
                    .collective_last_peer = longest_waited_for(s.collective_waited_for[i]),
                    .microbatches = s.microbatches[i],
                    .stage_step_ms = s.step[i],
                    .compute_ms = s.compute[i],
                    .compute_per_microbatch_ms = s.per_microbatch[i],
                    .late_sender_ms = s.late_sender[i],
                    .late_receiver_ms = s.late_receiver[i],
                    .transfer_ms = s.transfer[i],
                    .rest_ms = s.rest[i],
                    .idle_ms = s.idle[i],
                    .critical_share = s.critical_share[i]});
  }
}

namespace {

// A gain as a share of a step's time.
double share_of(double gain, double step) { return step > 0 ? gain / step : 0.0; }

// Per step from `since_step` on, the mean of what `wait` gives for each
// series `counts` takes (nullopt: not a wait of that series at that step);
// the p50 over those steps, or nullopt where no step had any.
template <typename SeriesMap, typename Counts, typename Wait>
std::optional<double> p50_of_step_means(const SeriesMap& series, std::int64_t since_step,
                                        Counts&& counts, Wait&& wait) {
  std::map<std::int64_t, std::pair<double, int>> by_step;  // step -> (sum, ranks)
  for (const auto& [key, o] : series)
    if (counts(key, o))
      for (std::size_t i = 0; i < o.steps.size(); ++i)
        if (o.steps[i] >= since_step)
          if (const std::optional<double> w = wait(o, i)) {
            auto& [sum, n] = by_step[o.steps[i]];
            sum += *w;
            ++n;
          }
  if (by_step.empty()) return std::nullopt;
  std::vector<double> means;
  for (const auto& [step, v] : by_step) means.push_back(v.first / v.second);
  return p50(means);
}

}  // namespace

// What fixing a straggler would gain: the p50 of the replayed change over
// the steps it concerns, against those steps' step time; and its cost to
// the other replicas and to its TP peers.
StragglerReport AnalysisBuilder::straggler_report(const Straggler& who, const Series& s) const {
  StragglerReport r;
  r.who = who;
  r.replica = s.replica;
  r.tensor = s.tensor;
  std::vector<double> gains, steps, shares;
  for (std::size_t i = 0; i < s.steps.size(); ++i)
    if (s.steps[i] >= who.since_step) {
      gains.push_back(s.gain_at_baseline[i]);
      steps.push_back(s.step_time[i]);
      shares.push_back(s.critical_share[i]);
    }
  r.gain_ms = p50(gains);
  r.gain_share = share_of(r.gain_ms, p50(steps));
  r.critical_share_p50 = p50(shares);
  // Its cost to the other replicas: per slow step, the mean of their
  // ranks' waits at the gradient sync.
  if (const auto w = p50_of_step_means(
          series_, who.since_step, [&](const auto&, const Series& o) { return o.replica != r.replica; },
          [](const Series& o, std::size_t i) { return std::optional<double>(o.sync_wait[i]); }))
    r.others_sync_wait_ms = *w;
  // Where they waited: per stage, the place its ranks named most often.
  std::map<int, std::map<std::string, int>> named;  // stage -> place -> steps
  for (const auto& [key, o] : series_)
    if (o.replica != r.replica)
      for (std::size_t i = 0; i < o.steps.size(); ++i)
        if (o.steps[i] >= who.since_step && !o.sync_wait_at[i].empty())
          ++named[std::get<2>(key)][o.sync_wait_at[i]];
  std::map<std::string, std::vector<int>> stages_at;
  for (const auto& [stage, places] : named)
    stages_at[std::max_element(places.begin(), places.end(), [](const auto& x, const auto& y) {
                return x.second < y.second;
              })->first]
        .push_back(stage);
  r.others_sync_wait_at.assign(stages_at.begin(), stages_at.end());
  // Its cost to its TP peers (the same stage and replica): per slow step,
  // the mean of their waits for it at the TP collectives.
  if (const auto w = p50_of_step_means(
          series_, who.since_step,
          [&](const auto& key, const Series& o) {
            return o.replica == r.replica && o.tensor != r.tensor && std::get<2>(key) == who.stage;
          },
          [&](const Series& o, std::size_t i) -> std::optional<double> {
            const auto& waited = o.collective_waited_for[i];
            if (waited.empty()) return std::nullopt;
            const auto it = waited.find(r.tensor);
            return it == waited.end() ? 0.0 : it->second;
          }))
    r.peers_collective_wait_ms = *w;
  return r;
}

// What evening out an imbalanced stage would gain: the p50 over its ranks
// of the replayed change at the median, against the run's step time.
ImbalanceReport AnalysisBuilder::imbalance_report(const Imbalance& what, const Analysis& out) {
  ImbalanceReport r{what};
  std::vector<double> gains;
  for (const auto& st : out.stages_analysis)
    if (st.stage == what.stage) gains.push_back(st.gain_at_median_p50_ms);
  r.gain_ms = p50(gains);
  r.gain_share = share_of(r.gain_ms, out.step_p50_ms);
  return r;
}

Analysis analyze_dir(const OpenedRun& run, const StreamOptions& options,
                     std::vector<std::string>* warnings, bool keep_critical_path) {
  AnalysisBuilder builder(keep_critical_path);
  Run rest = stream_steps(
      run, [&](StepWindow& w) { builder.add(build_view(w.run), w.run); }, options);
  if (warnings)
    for (const auto& f : rest.files)
      warnings->insert(warnings->end(), f.warnings.begin(), f.warnings.end());
  Analysis a = builder.finish();
  a.inferred = inferred_of(rest.files);
  return a;
}

Analysis analyze_run(const OpenedRun& run, const AnalyzeOptions& options,
                     std::vector<std::string>* warnings) {
  ClockAlignment read;
  if (!options.raw_clock && options.clock == nullptr) read = read_clock_alignment(run);
  const ClockAlignment& clock =
      options.clock != nullptr && !options.raw_clock ? *options.clock : read;
  ClockReport clock_report = ClockReport::of(clock);
  clock_report.raw_asked = options.raw_clock;
  LateSpans late;
  StreamOptions so = aligned_stream(clock, &clock_report, &late);
  so.progress = options.progress;
  Analysis a = analyze_dir(run, so, warnings, options.keep_critical_path);
  a.clock = std::move(clock_report);
  a.left_out = std::move(late);
  return a;
}

}  // namespace lens::analysis
