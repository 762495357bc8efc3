// `lens analyze` and `lens diff` (analyze.h, docs/analysis.md).
#include "analyze.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace lens::tools {
namespace {

// Nearest-rank percentile; 0 for no values.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

}  // namespace

void AnalysisBuilder::add(const PipelineView& view, const Run& run) {
  std::map<int, int> replica_of;
  for (const auto& f : run.files) replica_of[f.rank] = std::max(0, f.replica);
  for (const auto& sv : view.steps) {
    int stages = view.pipeline_stages;
    for (const auto& [rank, sr] : sv.ranks) stages = std::max(stages, sr.stage + 1);
    const StepAnalysis a = analyze_step(sv, stages, replica_of);
    if (!a.complete) continue;
    ++steps_;
    stages_ = std::max(stages_, stages);
    microbatches_ = std::max(microbatches_, a.microbatches);
    virtual_stages_ = std::max(virtual_stages_, view.virtual_stages);
    double bubble_sum = 0;
    int bubble_stages = 0;
    for (const auto& f : a.stages_figures)
      if (f.window_ms > 0) {
        bubble_sum += f.idle_ms / f.window_ms;
        ++bubble_stages;
      }
    if (bubble_stages > 0) bubble_.push_back(bubble_sum / bubble_stages);
    step_ms_.push_back(a.step_ms);
    critical_ms_.push_back(a.critical_path_ms);
    critical_compute_ms_.push_back(a.critical_compute_ms);
    critical_transfer_ms_.push_back(a.critical_transfer_ms);
    critical_all_reduce_ms_.push_back(a.critical_all_reduce_ms);
    for (const auto& f : a.stages_figures) {
      if (f.microbatches == 0) continue;
      Series& s = series_[{f.replica, f.stage}];
      s.rank = f.rank;
      s.replica = f.replica;
      s.steps.push_back(a.step);
      s.per_microbatch.push_back(f.compute_ms / f.microbatches);
      s.compute.push_back(f.compute_ms);
      s.critical_share.push_back(f.critical_share);
      s.late_sender.push_back(f.late_sender_ms);
      s.transfer.push_back(f.transfer_ms);
      s.late_receiver.push_back(f.late_receiver_ms);
      s.idle.push_back(f.idle_ms);
      s.warmup.push_back(f.warmup_idle_ms);
      s.cooldown.push_back(f.cooldown_idle_ms);
      s.imbalance.push_back(f.imbalance_idle_ms);
      s.transfer_idle.push_back(f.transfer_idle_ms);
      s.schedule_idle.push_back(f.schedule_idle_ms);
    }
    // Relative scores compare with the step's fastest stage: finish().
  }
}

Analysis AnalysisBuilder::finish() {
  Analysis out;
  out.stages = stages_;
  out.microbatches = microbatches_;
  out.virtual_stages = virtual_stages_;
  if (!bubble_.empty()) out.bubble_p50 = percentile(bubble_, 0.5);
  out.theoretical_bubble = theoretical_bubble(stages_, microbatches_, virtual_stages_);
  out.steps = steps_;
  out.step_p50_ms = percentile(step_ms_, 0.5);
  out.step_p95_ms = percentile(step_ms_, 0.95);
  out.critical_path_p50_ms = percentile(critical_ms_, 0.5);
  out.critical_compute_p50_ms = percentile(critical_compute_ms_, 0.5);
  out.critical_transfer_p50_ms = percentile(critical_transfer_ms_, 0.5);
  out.critical_all_reduce_p50_ms = percentile(critical_all_reduce_ms_, 0.5);
  // Per step and replica, the fastest stage's compute per microbatch.
  std::map<std::pair<int, std::int64_t>, double> fastest;  // (replica, step)
  for (const auto& [key, s] : series_)
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      auto k = std::pair{s.replica, s.steps[i]};
      auto it = fastest.find(k);
      if (it == fastest.end() || s.per_microbatch[i] < it->second) fastest[k] = s.per_microbatch[i];
    }
  for (const auto& [key, s] : series_) {
    StageAnalysis st;
    st.replica = key.first;
    st.stage = key.second;
    st.rank = s.rank;
    st.steps = s.steps.size();
    st.compute_per_microbatch_ms = percentile(s.per_microbatch, 0.5);
    std::vector<double> relative;
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      const double best = fastest[{s.replica, s.steps[i]}];
      const double r = best > 0 ? s.per_microbatch[i] / best : 1;
      relative.push_back(r);
      if (st.slow_since < 0 && r >= kStragglerThreshold) st.slow_since = s.steps[i];
    }
    st.relative = percentile(relative, 0.5);
    const double own_best = *std::min_element(s.compute.begin(), s.compute.end());
    std::vector<double> individual;
    for (double c : s.compute) individual.push_back(own_best > 0 ? c / own_best : 1);
    st.individual = percentile(individual, 0.95);
    st.critical_share_p50 = percentile(s.critical_share, 0.5);
    st.critical_share_p95 = percentile(s.critical_share, 0.95);
    st.late_sender_p50_ms = percentile(s.late_sender, 0.5);
    st.late_sender_p95_ms = percentile(s.late_sender, 0.95);
    st.transfer_p50_ms = percentile(s.transfer, 0.5);
    st.late_receiver_p50_ms = percentile(s.late_receiver, 0.5);
    st.idle_p50_ms = percentile(s.idle, 0.5);
    st.warmup_idle_p50_ms = percentile(s.warmup, 0.5);
    st.cooldown_idle_p50_ms = percentile(s.cooldown, 0.5);
    st.imbalance_idle_p50_ms = percentile(s.imbalance, 0.5);
    st.transfer_idle_p50_ms = percentile(s.transfer_idle, 0.5);
    st.schedule_idle_p50_ms = percentile(s.schedule_idle, 0.5);
    if (st.relative > out.slowest_relative) {
      out.slowest_relative = st.relative;
      out.slowest_stage = st.stage;
      if (st.relative >= kStragglerThreshold) {
        out.straggler_stage = st.stage;
        out.straggler_rank = st.rank;
      }
    }
    out.stages_analysis.push_back(st);
  }
  return out;
}

Analysis analyze_dir(const std::filesystem::path& dir, const StreamOptions& options,
                     std::vector<std::string>* warnings) {
  AnalysisBuilder builder;
  Run rest = stream_steps(
      dir, [&](StepWindow& w) { builder.add(build_view(w.run), w.run); }, options);
  if (warnings)
    for (const auto& f : rest.files)
      warnings->insert(warnings->end(), f.warnings.begin(), f.warnings.end());
  return builder.finish();
}

std::string format_table(const Analysis& a) {
  std::string out;
  char line[400];
  if (a.virtual_stages > 1)
    std::snprintf(line, sizeof line,
                  "pipeline: %d stages of %d chunks (interleaved), %d microbatches per step, %zu "
                  "steps analysed\n",
                  a.stages, a.virtual_stages, a.microbatches, a.steps);
  else
    std::snprintf(line, sizeof line,
                  "pipeline: %d stages, %d microbatches per step, %zu steps analysed\n", a.stages,
                  a.microbatches, a.steps);
  out += line;
  if (a.bubble_p50 >= 0) {
    std::snprintf(line, sizeof line, "bubble: measured p50 %.3f, theoretical %s = %.3f\n",
                  a.bubble_p50, theoretical_bubble_formula(a.virtual_stages), a.theoretical_bubble);
    out += line;
  }
  if (a.steps == 0) {
    out +=
        "no step to analyse: record the step, forward_backward and microbatch span groups "
        "(e.g. per_step,microbatch)\n";
    out += a.clock.describe() + "\n";
    return out;
  }
  std::snprintf(line, sizeof line,
                "step: p50 %.2f ms, p95 %.2f ms; critical path p50 %.2f ms: %.2f compute, %.2f "
                "transfers, %.2f data-parallel all-reduce, the rest the stages' own time between "
                "computes (p2p calls)\n",
                a.step_p50_ms, a.step_p95_ms, a.critical_path_p50_ms, a.critical_compute_p50_ms,
                a.critical_transfer_p50_ms, a.critical_all_reduce_p50_ms);
  out += line;
  std::snprintf(line, sizeof line, "%5s %4s %4s %10s %8s %8s %9s %9s %9s %9s %9s %9s %9s\n",
                "stage", "rank", "dp", "ms/mb", "relative", "crit p50", "late-snd", "transfer",
                "late-rcv", "idle", "warmup", "cooldown", "imbalance");
  out += line;
  for (const auto& s : a.stages_analysis) {
    std::snprintf(line, sizeof line,
                  "%5d %4d %4d %10.3f %7.2fx %7.0f%% %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
                  s.stage, s.rank, s.replica, s.compute_per_microbatch_ms, s.relative,
                  100 * s.critical_share_p50, s.late_sender_p50_ms, s.transfer_p50_ms,
                  s.late_receiver_p50_ms, s.idle_p50_ms, s.warmup_idle_p50_ms,
                  s.cooldown_idle_p50_ms, s.imbalance_idle_p50_ms);
    out += line;
  }
  out += "(ms per step, p50 over steps; ms/mb: forward+backward per microbatch)\n";
  if (a.straggler_stage >= 0) {
    const StageAnalysis* s = nullptr;
    for (const auto& st : a.stages_analysis)
      if (st.stage == a.straggler_stage && st.rank == a.straggler_rank) s = &st;
    std::snprintf(line, sizeof line,
                  "straggler: stage %d (rank %d): %.2fx the fastest stage's compute per "
                  "microbatch, %.0f%% of the critical path, since step %lld\n",
                  a.straggler_stage, a.straggler_rank, s ? s->relative : 0,
                  s ? 100 * s->critical_share_p50 : 0,
                  static_cast<long long>(s ? s->slow_since : -1));
  } else {
    std::snprintf(line, sizeof line,
                  "straggler: none (slowest stage %d at %.2fx the fastest; threshold %.1fx)\n",
                  a.slowest_stage, a.slowest_relative, kStragglerThreshold);
  }
  out += line;
  out += a.clock.describe() + "\n";
  return out;
}

std::string format_json(const Analysis& a) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : a.stages_analysis)
    stages.push_back({{"stage", s.stage},
                      {"rank", s.rank},
                      {"replica", s.replica},
                      {"steps", s.steps},
                      {"compute_per_microbatch_ms", s.compute_per_microbatch_ms},
                      {"relative", s.relative},
                      {"individual_p95", s.individual},
                      {"slow_since_step", s.slow_since},
                      {"critical_share_p50", s.critical_share_p50},
                      {"critical_share_p95", s.critical_share_p95},
                      {"late_sender_p50_ms", s.late_sender_p50_ms},
                      {"late_sender_p95_ms", s.late_sender_p95_ms},
                      {"transfer_p50_ms", s.transfer_p50_ms},
                      {"late_receiver_p50_ms", s.late_receiver_p50_ms},
                      {"idle_p50_ms", s.idle_p50_ms},
                      {"warmup_idle_p50_ms", s.warmup_idle_p50_ms},
                      {"cooldown_idle_p50_ms", s.cooldown_idle_p50_ms},
                      {"imbalance_idle_p50_ms", s.imbalance_idle_p50_ms},
                      {"transfer_idle_p50_ms", s.transfer_idle_p50_ms},
                      {"schedule_idle_p50_ms", s.schedule_idle_p50_ms}});
  nlohmann::json j = {
      {"pipeline_stages", a.stages},
      {"microbatches", a.microbatches},
      {"virtual_stages", a.virtual_stages},
      {"bubble_p50", a.bubble_p50 >= 0 ? nlohmann::json(a.bubble_p50) : nlohmann::json(nullptr)},
      {"theoretical_bubble",
       a.theoretical_bubble >= 0 ? nlohmann::json(a.theoretical_bubble) : nlohmann::json(nullptr)},
      {"steps", a.steps},
      {"step_p50_ms", a.step_p50_ms},
      {"step_p95_ms", a.step_p95_ms},
      {"critical_path_p50_ms", a.critical_path_p50_ms},
      {"critical_compute_p50_ms", a.critical_compute_p50_ms},
      {"critical_transfer_p50_ms", a.critical_transfer_p50_ms},
      {"critical_all_reduce_p50_ms", a.critical_all_reduce_p50_ms},
      {"straggler_threshold", kStragglerThreshold},
      {"straggler", a.straggler_stage >= 0
                        ? nlohmann::json{{"stage", a.straggler_stage}, {"rank", a.straggler_rank}}
                        : nlohmann::json(nullptr)},
      {"slowest_stage", a.slowest_stage},
      {"slowest_relative", a.slowest_relative},
      {"clock", {{"aligned", a.clock.aligned}, {"receives_moved", a.clock.moves.moved}}},
      {"stages", stages}};
  return j.dump(1) + "\n";
}

std::string format_diff(const Analysis& a, const Analysis& b) {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "step p50: %.2f -> %.2f ms (%+.1f%%)\n", a.step_p50_ms,
                b.step_p50_ms, a.step_p50_ms > 0 ? 100 * (b.step_p50_ms / a.step_p50_ms - 1) : 0.0);
  out += line;
  std::snprintf(line, sizeof line, "%5s %4s %21s %8s %19s %21s\n", "stage", "dp", "ms/mb A -> B",
                "ratio", "crit share A -> B", "late-snd ms A -> B");
  out += line;
  int changed_stage = -1;
  double changed_ratio = 1;
  for (const auto& sb : b.stages_analysis) {
    const StageAnalysis* sa = nullptr;
    for (const auto& s : a.stages_analysis)
      if (s.stage == sb.stage && s.replica == sb.replica) sa = &s;
    if (sa == nullptr) continue;
    const double ratio = sa->compute_per_microbatch_ms > 0
                             ? sb.compute_per_microbatch_ms / sa->compute_per_microbatch_ms
                             : 1;
    if (std::abs(std::log(ratio)) > std::abs(std::log(changed_ratio))) {
      changed_ratio = ratio;
      changed_stage = sb.stage;
    }
    std::snprintf(line, sizeof line,
                  "%5d %4d %9.3f -> %8.3f %7.2fx %7.0f%% -> %6.0f%% %9.2f -> %8.2f\n", sb.stage,
                  sb.replica, sa->compute_per_microbatch_ms, sb.compute_per_microbatch_ms, ratio,
                  100 * sa->critical_share_p50, 100 * sb.critical_share_p50, sa->late_sender_p50_ms,
                  sb.late_sender_p50_ms);
    out += line;
  }
  if (changed_stage >= 0) {
    std::snprintf(line, sizeof line, "most changed: stage %d (compute per microbatch %.2fx)\n",
                  changed_stage, changed_ratio);
    out += line;
  }
  return out;
}

}  // namespace lens::tools
