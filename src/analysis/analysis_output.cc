// The output of `lens analyze`: the verdicts, the table, the rows per step,
// the JSON and the diff of two analyses, apart from the arithmetic that
// makes an Analysis (analyze.cc).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "analyze.h"
#include "json_text.h"

namespace lens::analysis {

const char* path_segment_kind_name(PathSegment::Kind kind) {
  switch (kind) {
    case PathSegment::Kind::kForward:
      return "forward";
    case PathSegment::Kind::kBackward:
      return "backward";
    case PathSegment::Kind::kTransfer:
      return "transfer";
    case PathSegment::Kind::kAllReduce:
      return "all_reduce";
    case PathSegment::Kind::kOptimizer:
      return "optimizer";
  }
  return "unknown";
}

namespace {

// ", in megatron.grads.all_reduce (stages 1, 2) and untraced (stage 3)":
// where the other replicas waited for a straggler; empty when unknown.
std::string waited_at(const std::vector<std::pair<std::string, std::vector<int>>>& places) {
  std::string out;
  for (std::size_t i = 0; i < places.size(); ++i) {
    const auto& [place, stages] = places[i];
    out += i == 0 ? ", in " : i + 1 == places.size() ? " and " : ", ";
    out += fmt::format("{} ({} {})", place, stages.size() == 1 ? "stage" : "stages",
                       fmt::join(stages, ", "));
  }
  return out;
}

}  // namespace

std::string format_verdicts(const Analysis& a) {
  std::string out;
  const auto against = [&](const Straggler& w) {
    return w.against == Straggler::Against::kPeers
               ? (a.tensors > 1
                      ? "the same stage's cost in the other pipelines (replicas and TP peers)"
                      : "the same stage's cost in the other replicas")
               : "its own baseline (against how the others moved)";
  };
  const auto who = [&](const StragglerReport& r) {
    return fmt::format("rank {} (stage {}, replica {}{})", r.who.rank, r.who.stage, r.replica,
                       a.tensors > 1 ? fmt::format(", tensor rank {}", r.tensor) : std::string());
  };
  // The evidence: how long, and the run's own noise it stands out of.
  const auto evidence = [](const Straggler& w) {
    return fmt::format("{} of {} steps at {:.1f}x or more; the run's other ranks vary up to "
                       "{:.2f}x step to step",
                       w.slow_steps, w.steps, kStragglerThreshold, w.noise);
  };
  for (const auto& r : a.stragglers) {
    const Straggler& w = r.who;
    out += fmt::format(
        "straggler: {}: {:.2f}x {} since step {} ({}), {:.0f}% of the critical path; at its "
        "expected cost the step would change by {:+.2f} ms ({:+.0f}%)\n",
        who(r), w.ratio, against(w), w.since_step, evidence(w), 100 * r.critical_share_p50,
        r.gain_ms, 100 * r.gain_share);
    if (r.peers_collective_wait_ms)
      out += fmt::format(
          "  its TP peers (stage {}, replica {}) wait {:.2f} ms per step (p50) for it at the "
          "tensor-parallel collectives\n",
          w.stage, r.replica, *r.peers_collective_wait_ms);
    if (r.others_sync_wait_ms)
      out += fmt::format(
          "  the other replicas' ranks wait {:.2f} ms per step (p50) at the gradient sync{}\n",
          *r.others_sync_wait_ms, waited_at(r.others_sync_wait_at));
  }
  for (const auto& r : a.not_named)
    out += fmt::format(
        "not named: {}: {:.2f}x {} since step {} ({}): within the run's noise (a straggler "
        "stands {:.2f}x out of it)\n",
        who(r), r.who.ratio, against(r.who), r.who.since_step, evidence(r.who), kNoiseMargin);
  if (a.stragglers.empty())
    out += fmt::format(
        "straggler: none (no rank {:.1f}x slower than its own baseline or its peers for {} steps "
        "in a row and {:.2f}x out of the run's noise)\n",
        kStragglerThreshold, steps_required(a.steps > kBaselineSteps ? a.steps - kBaselineSteps : 0),
        kNoiseMargin);
  for (const auto& r : a.imbalance) {
    std::string ranks;
    for (int rank : r.what.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
    out += fmt::format(
        "imbalance: stage {} (rank{} {}): {:.2f}x the fastest stage's compute per microbatch from "
        "the first steps and in 80% of the steps, in every replica: it does more work (move a "
        "layer off it); at the "
        "median stage's cost the step would change by {:+.2f} ms ({:+.0f}%)\n",
        r.what.stage, r.what.ranks.size() > 1 ? "s" : "", ranks, r.what.ratio, r.gain_ms,
        100 * r.gain_share);
  }
  if (a.imbalance.empty())
    out += fmt::format(
        "imbalance: none (no stage {:.2f}x the fastest from the first steps and in 80% of the "
        "steps)\n",
        kImbalanceThreshold);
  const Variability& v = a.variability;
  const std::string setter =
      a.replicas > 1 ? fmt::format(
                           "; the replica last at the gradient sync changed in {:.0f}% of "
                           "steps",
                           100 * v.setter_changes)
                     : std::string();
  if (v.variable)
    out += fmt::format(
        "variable work: microbatches differ in cost alike on every stage ({:.2f}x p90/p10 within "
        "a step, correlated {:.2f} across stages): the work varies by microbatch (e.g. sequence "
        "lengths), not by rank{}\n",
        v.spread, v.correlation, setter);
  else
    out += fmt::format(
        "variable work: none (microbatches {:.2f}x p90/p10 within a step, correlated {:.2f} "
        "across stages; a verdict needs {:.1f}x and {:.1f}){}\n",
        v.spread, v.correlation, kVariabilitySpread, kVariabilityCorrelation, setter);
  return out;
}

std::string format_table(const Analysis& a) {
  std::string out;
  if (!a.inferred.empty()) out += "inferred: " + a.inferred + "\n";
  if (a.virtual_stages > 1)
    out += fmt::format(
        "pipeline: {} stages of {} chunks (interleaved), {} microbatches per step, {} steps "
        "analysed\n",
        a.stages, a.virtual_stages, a.microbatches, a.steps);
  else
    out += fmt::format("pipeline: {} stages, {} microbatches per step, {} steps analysed\n",
                       a.stages, a.microbatches, a.steps);
  if (a.bubble_p50 >= 0)
    out += fmt::format("bubble: measured p50 {:.3f}, theoretical {} = {:.3f}\n", a.bubble_p50,
                       theoretical_bubble_formula(a.virtual_stages), a.theoretical_bubble);
  if (a.steps == 0) {
    out +=
        "no step to analyse: record the step, forward_backward and microbatch span groups "
        "(e.g. per_step,microbatch)\n";
    out += a.clock.describe() + "\n";
    return out;
  }
  out += fmt::format(
      "step: p50 {:.2f} ms, p95 {:.2f} ms; critical path p50 {:.2f} ms: {:.2f} compute, {:.2f} "
      "transfers (a compute's end to the receive's end), {:.2f} data-parallel all-reduce, the "
      "rest the stages' own time between computes\n",
      a.step_p50_ms, a.step_p95_ms, a.critical_path_p50_ms, a.critical_compute_p50_ms,
      a.critical_transfer_p50_ms, a.critical_all_reduce_p50_ms);
  // With tensor parallelism each (replica, tensor rank) is a pipeline of its
  // own: its rows say both ("dp.tp").
  // and a column for the waits at the TP collectives (with the TP peer
  // waited for longest).
  const bool tp = a.tensors > 1;
  const int place_width = tp ? 5 : 3;
  const auto tp_column = [&](const std::string& text) { return tp ? text : std::string(); };
  out += fmt::format(
      "{:>5} {:>4} {:>{}} {:>8} {:>8} {:>5} | {:>8} {:>8} {:>8} {:>8} {:>8} {}{:>8} {:>8} | "
      "{:>8} {:>8} {:>8}\n",
      "stage", "rank", tp ? "dp.tp" : "dp", place_width, "ms/mb", "relative", "crit", "step",
      "compute", "late-snd", "late-rcv", "transfer", tp_column(fmt::format("{:>11} ", "tp-wait")),
      "sync", "rest", "idle", "slack", "imbal");
  for (const auto& s : a.stages_analysis)
    out += fmt::format(
        "{:>5} {:>4} {:>{}} {:>8.3f} {:>7.2f}x {:>4.0f}% | {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f} "
        "{:>8.2f} {}{:>8.2f} {:>8.2f} | {:>8.2f} {:>8.2f} {:>8.2f}\n",
        s.stage, s.rank, tp ? fmt::format("{}.{}", s.replica, s.tensor) : std::to_string(s.replica),
        place_width, s.compute_per_microbatch_ms, s.relative, 100 * s.critical_share_p50,
        s.step_p50_ms, s.compute_p50_ms, s.late_sender_p50_ms, s.late_receiver_p50_ms,
        s.transfer_p50_ms,
        tp_column(fmt::format("{:>11} ", s.collective_last_peer >= 0
                                             ? fmt::format("{:.2f} (t{})", s.collective_wait_p50_ms,
                                                           s.collective_last_peer)
                                             : fmt::format("{:.2f}", s.collective_wait_p50_ms))),
        s.sync_wait_p50_ms, s.rest_p50_ms, s.idle_p50_ms, s.slack_p50_ms, s.imbalance_idle_p50_ms);
  out +=
      tp ? "(ms per step, p50 over steps; ms/mb: forward+backward per microbatch, less the TP "
           "collectives in them; each step's step = compute + late-snd + late-rcv + transfer + "
           "tp-wait + sync + rest exactly; tp-wait: waiting at the tensor-parallel collectives "
           "for the last TP peer (tN: the peer waited for longest); transfer: the p2p spans' and "
           "collectives' own time; sync: waiting at the gradient sync for the last replica; "
           "crit: share of its pipeline's path; slack: compute the stage could add before the "
           "step lengthens)\n"
         : "(ms per step, p50 over steps; ms/mb: forward+backward per microbatch; each step's "
           "step = compute + late-snd + late-rcv + transfer + sync + rest exactly; sync: "
           "waiting at the gradient sync for the last replica; crit: share of its replica's "
           "path; slack: compute the stage could add before the step lengthens)\n";
  if (a.replicas > 1) {
    std::map<int, std::size_t> count;
    for (const auto& s : a.step_rows) ++count[s.replica];
    std::string list;
    for (const auto& [replica, n] : count)
      list += fmt::format("{}replica {} in {} of {}", list.empty() ? "" : ", ", replica, n,
                          a.step_rows.size());
    out += "steps set by (the replica last at the gradient sync): " + list + "\n";
  }
  out += format_verdicts(a);
  out += a.clock.describe() + "\n";
  if (const std::string l = a.left_out.describe(); !l.empty()) out += l + "\n";
  if (a.impossible_edges > 0)
    out += fmt::format(
        "clock error: {} computes began before the neighbour's compute they need had ended, "
        "after alignment: the clocks disagree beyond their samples' uncertainty\n",
        a.impossible_edges);
  return out;
}

std::vector<StageStepFigures> by_step(const Analysis& a) {
  std::vector<StageStepFigures> rows = a.stage_steps;
  std::stable_sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
    return std::tie(x.step, x.replica, x.tensor, x.stage) <
           std::tie(y.step, y.replica, y.tensor, y.stage);
  });
  return rows;
}

std::string format_per_step(const Analysis& a) {
  const bool tp = a.tensors > 1;
  const auto tp_column = [&](const std::string& text) { return tp ? text : std::string(); };
  std::string out = fmt::format(
      "{:>6} {:>5} {:>4} {:>5} | {:>9} = {:>9} {:>9} {:>9} {:>9} {}{:>9} {:>9}\n", "step",
      "stage", "rank", tp ? "dp.tp" : "dp", "step", "compute", "late-snd", "late-rcv", "transfer",
      tp_column(fmt::format("{:>9} ", "tp-wait")), "sync", "rest");
  for (const auto& w : by_step(a))
    out += fmt::format(
        "{:>6} {:>5} {:>4} {:>5} | {:>9.3f} = {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {}{:>9.3f} "
        "{:>9.3f}\n",
        w.step, w.stage, w.rank,
        tp ? fmt::format("{}.{}", w.replica, w.tensor) : std::to_string(w.replica), w.stage_step_ms,
        w.compute_ms, w.late_sender_ms, w.late_receiver_ms, w.transfer_ms,
        tp_column(fmt::format("{:>9.3f} ", w.collective_wait_ms)), w.sync_wait_ms, w.rest_ms);
  out += tp ? "(ms; each row's step span = compute + late-snd + late-rcv + transfer + tp-wait + "
              "sync + rest, to rounding)\n"
            : "(ms; each row's step span = compute + late-snd + late-rcv + transfer + sync + "
              "rest, to rounding)\n";
  return out;
}

namespace {

// `lens analyze --json`'s indent.
constexpr int kJsonIndent = 1;

// A stage's columns in one step: they add up to its step span.
void columns(JsonObjectText& o, const StageStepFigures& w) {
  o.add("step", w.step);
  o.add("replica", w.replica);
  o.add("tensor", w.tensor);
  o.add("stage", w.stage);
  o.add("rank", w.rank);
  o.add("stage_step_ms", w.stage_step_ms);
  o.add("compute_ms", w.compute_ms);
  o.add("late_sender_ms", w.late_sender_ms);
  o.add("late_receiver_ms", w.late_receiver_ms);
  o.add("transfer_ms", w.transfer_ms);
  o.add("collective_wait_ms", w.collective_wait_ms);
  o.add("sync_wait_ms", w.sync_wait_ms);
  o.add("rest_ms", w.rest_ms);
}

// A stage's what-if in one step: its columns and more.
void what_if(JsonObjectText& o, const StageStepFigures& w) {
  columns(o, w);
  o.add("step_ms", w.step_ms);
  o.add("slack_ms", w.slack_ms);
  o.add("gain_at_baseline_ms", w.gain_at_baseline_ms);
  o.add("gain_at_median_ms", w.gain_at_median_ms);
  o.add("sync_last_replica", w.sync_last_replica);
  o.add("sync_wait_at", w.sync_wait_at);
  o.add("collective_last_peer", w.collective_last_peer);
  o.add("microbatches", w.microbatches);
  o.add("compute_per_microbatch_ms", w.compute_per_microbatch_ms);
  o.add("idle_ms", w.idle_ms);
  o.add("critical_share", w.critical_share);
}

void spread(JsonObjectText& o, const StageSpread& s) {
  o.add("stage", s.stage);
  o.add("microbatches", s.microbatches);
  o.add("p50_ms", s.p50_ms);
  o.add("p95_ms", s.p95_ms);
  o.add("max_over_min", s.max_over_min);
  o.add("relative_p90_p10", s.relative_p90_p10);
}

void step_row(JsonObjectText& o, const StepRow& s) {
  o.add("step", s.step);
  o.add("replica", s.replica);
  o.add("tensor", s.tensor);
  o.add("step_ms", s.step_ms);
  o.add("critical_path_ms", s.critical_path_ms);
  o.add("critical_compute_ms", s.critical_compute_ms);
  o.add("critical_transfer_ms", s.critical_transfer_ms);
  o.add("critical_all_reduce_ms", s.critical_all_reduce_ms);
  o.add("bubble", or_null(s.bubble));
}

void stage(JsonObjectText& o, const StageAnalysis& s) {
  o.add("stage", s.stage);
  o.add("rank", s.rank);
  o.add("replica", s.replica);
  o.add("tensor", s.tensor);
  o.add("steps", s.steps);
  o.add("compute_per_microbatch_ms", s.compute_per_microbatch_ms);
  o.add("baseline_per_microbatch_ms", s.baseline_per_microbatch_ms);
  o.add("relative", s.relative);
  o.add("baseline_relative", s.baseline_relative);
  o.add("individual_p95", s.individual);
  o.add("critical_share_p50", s.critical_share_p50);
  o.add("critical_share_p95", s.critical_share_p95);
  o.add("step_p50_ms", s.step_p50_ms);
  o.add("compute_p50_ms", s.compute_p50_ms);
  o.add("late_sender_p50_ms", s.late_sender_p50_ms);
  o.add("late_sender_p95_ms", s.late_sender_p95_ms);
  o.add("late_receiver_p50_ms", s.late_receiver_p50_ms);
  o.add("transfer_p50_ms", s.transfer_p50_ms);
  o.add("sync_wait_p50_ms", s.sync_wait_p50_ms);
  o.add("collective_wait_p50_ms", s.collective_wait_p50_ms);
  o.add("collective_last_peer", s.collective_last_peer);
  o.add("rest_p50_ms", s.rest_p50_ms);
  o.add("unmatched_transfers", s.unmatched_transfers);
  o.add("idle_p50_ms", s.idle_p50_ms);
  o.add("warmup_idle_p50_ms", s.warmup_idle_p50_ms);
  o.add("cooldown_idle_p50_ms", s.cooldown_idle_p50_ms);
  o.add("imbalance_idle_p50_ms", s.imbalance_idle_p50_ms);
  o.add("transfer_idle_p50_ms", s.transfer_idle_p50_ms);
  o.add("schedule_idle_p50_ms", s.schedule_idle_p50_ms);
  o.add("slack_p50_ms", s.slack_p50_ms);
  o.add("gain_at_baseline_p50_ms", s.gain_at_baseline_p50_ms);
  o.add("gain_at_median_p50_ms", s.gain_at_median_p50_ms);
}

void straggler(JsonObjectText& o, const StragglerReport& r) {
  o.add("rank", r.who.rank);
  o.add("stage", r.who.stage);
  o.add("replica", r.replica);
  o.add("tensor", r.tensor);
  o.add("since_step", r.who.since_step);
  o.add("ratio", r.who.ratio);
  o.add("against", against_name(r.who.against));
  o.add("slow_steps", r.who.slow_steps);
  o.add("steps", r.who.steps);
  o.add("noise", r.who.noise);
  o.add("critical_share_p50", r.critical_share_p50);
  o.add("gain_ms", r.gain_ms);
  o.add("gain_share", r.gain_share);
  o.add("others_sync_wait_ms", r.others_sync_wait_ms);
  nlohmann::json at = nlohmann::json::array();
  for (const auto& [place, stages] : r.others_sync_wait_at)
    at.push_back({{"at", place}, {"stages", stages}});
  o.add("others_sync_wait_at", at);
  o.add("peers_collective_wait_ms", r.peers_collective_wait_ms);
}

void imbalance(JsonObjectText& o, const ImbalanceReport& r) {
  o.add("stage", r.what.stage);
  o.add("ranks", r.what.ranks);
  o.add("ratio", r.what.ratio);
  o.add("gain_ms", r.gain_ms);
  o.add("gain_share", r.gain_share);
}

void path_row(JsonObjectText& o, const PathRow& row) {
  const auto& [step, seg] = row;
  o.add("step", step);
  o.add("kind", path_segment_kind_name(seg.kind));
  o.add("stage", seg.stage);
  o.add("rank", seg.rank);
  o.add("microbatch", seg.microbatch);
  o.add("start_ns", seg.start_ns);
  o.add("end_ns", seg.end_ns);
  o.add("start_ms", seg.start_ms);
  o.add("end_ms", seg.end_ms);
}

}  // namespace

std::string format_json(const Analysis& a) {
  JsonObjectText j(kJsonIndent, 0);
  nlohmann::json clock = a.clock.to_json();
  clock["impossible_edges"] = a.impossible_edges;
  j.add("pipeline_stages", a.stages);
  j.add("microbatches", a.microbatches);
  j.add("virtual_stages", a.virtual_stages);
  j.add("bubble_p50", or_null(a.bubble_p50));
  j.add("theoretical_bubble", or_null(a.theoretical_bubble));
  j.add("steps", a.steps);
  j.add("step_p50_ms", a.step_p50_ms);
  j.add("step_p95_ms", a.step_p95_ms);
  j.add("critical_path_p50_ms", a.critical_path_p50_ms);
  j.add("critical_compute_p50_ms", a.critical_compute_p50_ms);
  j.add("critical_transfer_p50_ms", a.critical_transfer_p50_ms);
  j.add("critical_all_reduce_p50_ms", a.critical_all_reduce_p50_ms);
  j.add("straggler_threshold", kStragglerThreshold);
  j.add("imbalance_threshold", kImbalanceThreshold);
  add_rows(j, "stragglers", a.stragglers, straggler);
  add_rows(j, "not_named", a.not_named, straggler);
  j.add("noise_margin", kNoiseMargin);
  add_rows(j, "imbalance", a.imbalance, imbalance);
  j.add("slowest_stage", a.slowest_stage);
  j.add("slowest_relative", a.slowest_relative);
  j.add("clock", clock);
  j.add("left_out", a.left_out.to_json());
  // The what-ifs by stage, then step; the columns alone in step order.
  add_rows(j, "what_if", a.stage_steps, what_if);
  add_rows(j, "per_step", by_step(a), columns);
  if (a.inferred.empty())
    j.add("inferred", nullptr);
  else
    j.add("inferred", a.inferred);
  j.add("replicas", a.replicas);
  j.add("tensor_parallel", a.tensors);
  const Variability& v = a.variability;
  JsonObjectText variability(kJsonIndent, 1);
  variability.add("variable", v.variable);
  variability.add("spread", v.spread);
  variability.add("correlation", v.correlation);
  variability.add("setter_changes", v.setter_changes);
  add_rows(variability, "stages", v.stages, spread);
  variability.write(j.add_text("variability"));
  add_rows(j, "set_by", a.step_rows, step_row);
  add_rows(j, "stages", a.stages_analysis, stage);
  if (!a.critical_paths.empty()) add_rows(j, "critical_path", a.critical_paths, path_row);
  std::string out;
  j.write(out);
  out += '\n';
  return out;
}

std::string format_diff(const Analysis& a, const Analysis& b) {
  std::string out;
  out += fmt::format("step p50: {:.2f} -> {:.2f} ms ({:+.1f}%)\n", a.step_p50_ms, b.step_p50_ms,
                     a.step_p50_ms > 0 ? 100 * (b.step_p50_ms / a.step_p50_ms - 1) : 0.0);
  out += fmt::format("{:>5} {:>5} {:>21} {:>8} {:>19} {:>21} {:>19}\n", "stage",
                     b.tensors > 1 ? "dp.tp" : "dp", "ms/mb A -> B", "ratio", "crit share A -> B",
                     "late-snd ms A -> B", "slack ms A -> B");
  int changed_stage = -1;
  double changed_ratio = 1;
  for (const auto& sb : b.stages_analysis) {
    const StageAnalysis* sa = nullptr;
    for (const auto& s : a.stages_analysis)
      if (s.stage == sb.stage && s.replica == sb.replica && s.tensor == sb.tensor) sa = &s;
    if (sa == nullptr) continue;
    const double ratio = sa->compute_per_microbatch_ms > 0
                             ? sb.compute_per_microbatch_ms / sa->compute_per_microbatch_ms
                             : 1;
    if (std::abs(std::log(ratio)) > std::abs(std::log(changed_ratio))) {
      changed_ratio = ratio;
      changed_stage = sb.stage;
    }
    out += fmt::format(
        "{:>5} {:>5} {:>9.3f} -> {:>8.3f} {:>7.2f}x {:>7.0f}% -> {:>6.0f}% {:>9.2f} -> {:>8.2f} "
        "{:>8.2f} -> {:>7.2f}\n",
        sb.stage,
        b.tensors > 1 ? fmt::format("{}.{}", sb.replica, sb.tensor) : std::to_string(sb.replica),
        sa->compute_per_microbatch_ms, sb.compute_per_microbatch_ms, ratio,
        100 * sa->critical_share_p50, 100 * sb.critical_share_p50, sa->late_sender_p50_ms,
        sb.late_sender_p50_ms, sa->slack_p50_ms, sb.slack_p50_ms);
  }
  if (changed_stage >= 0)
    out += fmt::format("most changed: stage {} (compute per microbatch {:.2f}x)\n", changed_stage,
                       changed_ratio);
  out += "run B:\n" + format_verdicts(b);
  return out;
}


}  // namespace lens::analysis
