// The output of `lens analyze`: the verdicts, the table, the rows per step,
// the JSON and the diff of two analyses, apart from the arithmetic that
// makes an Analysis (analyze.cc).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "analyze.h"

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

std::string format_verdicts(const Analysis& a) {
  std::string out;
  for (const auto& r : a.stragglers) {
    const Straggler& w = r.who;
    out += fmt::format(
        "straggler: rank {} (stage {}, replica {}{}): {:.2f}x {} since step {}, {:.0f}% of the "
        "critical path; at its expected cost the step would change by {:+.2f} ms ({:+.0f}%)\n",
        w.rank, w.stage, r.replica,
        a.tensors > 1 ? fmt::format(", tensor rank {}", r.tensor) : std::string(), w.ratio,
        w.against == Straggler::Against::kPeers
            ? (a.tensors > 1
                   ? "the same stage's cost in the other pipelines (replicas and TP peers)"
                   : "the same stage's cost in the other replicas")
            : "its own baseline (against how the others moved)",
        w.since_step, 100 * r.critical_share_p50, r.gain_ms, 100 * r.gain_share);
    if (r.peers_collective_wait_ms)
      out += fmt::format(
          "  its TP peers (stage {}, replica {}) wait {:.2f} ms per step (p50) for it at the "
          "tensor-parallel collectives\n",
          w.stage, r.replica, *r.peers_collective_wait_ms);
    if (r.others_sync_wait_ms)
      out += fmt::format(
          "  the other replicas' ranks wait {:.2f} ms per step (p50) at the gradient sync\n",
          *r.others_sync_wait_ms);
  }
  if (a.stragglers.empty())
    out += fmt::format(
        "straggler: none (no rank {:.1f}x slower than its own baseline or its peers for {} steps "
        "in a row)\n",
        kStragglerThreshold, kConsecutiveSteps);
  for (const auto& r : a.imbalance) {
    std::string ranks;
    for (int rank : r.what.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
    out += fmt::format(
        "imbalance: stage {} (rank{} {}): {:.2f}x the fastest stage's compute per microbatch from "
        "the first steps, in every replica: it does more work (move a layer off it); at the "
        "median stage's cost the step would change by {:+.2f} ms ({:+.0f}%)\n",
        r.what.stage, r.what.ranks.size() > 1 ? "s" : "", ranks, r.what.ratio, r.gain_ms,
        100 * r.gain_share);
  }
  if (a.imbalance.empty())
    out += fmt::format("imbalance: none (no stage {:.2f}x the fastest from the first steps)\n",
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

std::string format_json(const Analysis& a) { return to_json(a).dump(1) + "\n"; }

namespace {

// A value that is absent below 0 (a bubble that could not be computed).
nlohmann::json or_null(double v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json or_null(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// A stage's columns in one step: they add up to its step span.
nlohmann::json columns(const StageStepFigures& w) {
  return {{"step", w.step},
          {"replica", w.replica},
          {"tensor", w.tensor},
          {"stage", w.stage},
          {"rank", w.rank},
          {"stage_step_ms", w.stage_step_ms},
          {"compute_ms", w.compute_ms},
          {"late_sender_ms", w.late_sender_ms},
          {"late_receiver_ms", w.late_receiver_ms},
          {"transfer_ms", w.transfer_ms},
          {"collective_wait_ms", w.collective_wait_ms},
          {"sync_wait_ms", w.sync_wait_ms},
          {"rest_ms", w.rest_ms}};
}

// A stage's what-if in one step: its columns and more.
nlohmann::json what_if(const StageStepFigures& w) {
  nlohmann::json row = columns(w);
  row.update({{"step_ms", w.step_ms},
              {"slack_ms", w.slack_ms},
              {"gain_at_baseline_ms", w.gain_at_baseline_ms},
              {"gain_at_median_ms", w.gain_at_median_ms},
              {"sync_last_replica", w.sync_last_replica},
              {"collective_last_peer", w.collective_last_peer},
              {"microbatches", w.microbatches},
              {"compute_per_microbatch_ms", w.compute_per_microbatch_ms},
              {"idle_ms", w.idle_ms},
              {"critical_share", w.critical_share}});
  return row;
}

nlohmann::json to_json(const Variability& v) {
  nlohmann::json spreads = nlohmann::json::array();
  for (const auto& s : v.stages)
    spreads.push_back({{"stage", s.stage},
                       {"microbatches", s.microbatches},
                       {"p50_ms", s.p50_ms},
                       {"p95_ms", s.p95_ms},
                       {"max_over_min", s.max_over_min},
                       {"relative_p90_p10", s.relative_p90_p10}});
  return {{"variable", v.variable},
          {"spread", v.spread},
          {"correlation", v.correlation},
          {"setter_changes", v.setter_changes},
          {"stages", spreads}};
}

nlohmann::json to_json(const StepRow& s) {
  return {{"step", s.step},
          {"replica", s.replica},
          {"tensor", s.tensor},
          {"step_ms", s.step_ms},
          {"critical_path_ms", s.critical_path_ms},
          {"critical_compute_ms", s.critical_compute_ms},
          {"critical_transfer_ms", s.critical_transfer_ms},
          {"critical_all_reduce_ms", s.critical_all_reduce_ms},
          {"bubble", or_null(s.bubble)}};
}

nlohmann::json to_json(const StageAnalysis& s) {
  return {{"stage", s.stage},
          {"rank", s.rank},
          {"replica", s.replica},
          {"tensor", s.tensor},
          {"steps", s.steps},
          {"compute_per_microbatch_ms", s.compute_per_microbatch_ms},
          {"baseline_per_microbatch_ms", s.baseline_per_microbatch_ms},
          {"relative", s.relative},
          {"baseline_relative", s.baseline_relative},
          {"individual_p95", s.individual},
          {"critical_share_p50", s.critical_share_p50},
          {"critical_share_p95", s.critical_share_p95},
          {"step_p50_ms", s.step_p50_ms},
          {"compute_p50_ms", s.compute_p50_ms},
          {"late_sender_p50_ms", s.late_sender_p50_ms},
          {"late_sender_p95_ms", s.late_sender_p95_ms},
          {"late_receiver_p50_ms", s.late_receiver_p50_ms},
          {"transfer_p50_ms", s.transfer_p50_ms},
          {"sync_wait_p50_ms", s.sync_wait_p50_ms},
          {"collective_wait_p50_ms", s.collective_wait_p50_ms},
          {"collective_last_peer", s.collective_last_peer},
          {"rest_p50_ms", s.rest_p50_ms},
          {"unmatched_transfers", s.unmatched_transfers},
          {"idle_p50_ms", s.idle_p50_ms},
          {"warmup_idle_p50_ms", s.warmup_idle_p50_ms},
          {"cooldown_idle_p50_ms", s.cooldown_idle_p50_ms},
          {"imbalance_idle_p50_ms", s.imbalance_idle_p50_ms},
          {"transfer_idle_p50_ms", s.transfer_idle_p50_ms},
          {"schedule_idle_p50_ms", s.schedule_idle_p50_ms},
          {"slack_p50_ms", s.slack_p50_ms},
          {"gain_at_baseline_p50_ms", s.gain_at_baseline_p50_ms},
          {"gain_at_median_p50_ms", s.gain_at_median_p50_ms}};
}

nlohmann::json to_json(const StragglerReport& r) {
  return {{"rank", r.who.rank},
          {"stage", r.who.stage},
          {"replica", r.replica},
          {"tensor", r.tensor},
          {"since_step", r.who.since_step},
          {"ratio", r.who.ratio},
          {"against", against_name(r.who.against)},
          {"critical_share_p50", r.critical_share_p50},
          {"gain_ms", r.gain_ms},
          {"gain_share", r.gain_share},
          {"others_sync_wait_ms", or_null(r.others_sync_wait_ms)},
          {"peers_collective_wait_ms", or_null(r.peers_collective_wait_ms)}};
}

nlohmann::json to_json(const ImbalanceReport& r) {
  return {{"stage", r.what.stage},
          {"ranks", r.what.ranks},
          {"ratio", r.what.ratio},
          {"gain_ms", r.gain_ms},
          {"gain_share", r.gain_share}};
}

nlohmann::json to_json(const PathRow& row) {
  const auto& [step, seg] = row;
  return {{"step", step},
          {"kind", path_segment_kind_name(seg.kind)},
          {"stage", seg.stage},
          {"rank", seg.rank},
          {"microbatch", seg.microbatch},
          {"start_ns", seg.start_ns},
          {"end_ns", seg.end_ns},
          {"start_ms", seg.start_ms},
          {"end_ms", seg.end_ms}};
}

// Each of `rows` by `row_json`, in their order.
template <typename Rows, typename RowJson>
nlohmann::json array_of(const Rows& rows, RowJson&& row_json) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) out.push_back(row_json(r));
  return out;
}

}  // namespace

nlohmann::json to_json(const Analysis& a) {
  const auto as_json = [](const auto& row) { return to_json(row); };
  nlohmann::json clock = a.clock.to_json();
  clock["impossible_edges"] = a.impossible_edges;
  nlohmann::json j = {
      {"pipeline_stages", a.stages},
      {"microbatches", a.microbatches},
      {"virtual_stages", a.virtual_stages},
      {"bubble_p50", or_null(a.bubble_p50)},
      {"theoretical_bubble", or_null(a.theoretical_bubble)},
      {"steps", a.steps},
      {"step_p50_ms", a.step_p50_ms},
      {"step_p95_ms", a.step_p95_ms},
      {"critical_path_p50_ms", a.critical_path_p50_ms},
      {"critical_compute_p50_ms", a.critical_compute_p50_ms},
      {"critical_transfer_p50_ms", a.critical_transfer_p50_ms},
      {"critical_all_reduce_p50_ms", a.critical_all_reduce_p50_ms},
      {"straggler_threshold", kStragglerThreshold},
      {"imbalance_threshold", kImbalanceThreshold},
      {"stragglers", array_of(a.stragglers, as_json)},
      {"imbalance", array_of(a.imbalance, as_json)},
      {"slowest_stage", a.slowest_stage},
      {"slowest_relative", a.slowest_relative},
      {"clock", clock},
      {"left_out", a.left_out.to_json()},
      // The what-ifs by stage, then step; the columns alone in step order.
      {"what_if", array_of(a.stage_steps, what_if)},
      {"per_step", array_of(by_step(a), columns)},
      {"inferred", a.inferred.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.inferred)},
      {"replicas", a.replicas},
      {"tensor_parallel", a.tensors},
      {"variability", to_json(a.variability)},
      {"set_by", array_of(a.step_rows, as_json)},
      {"stages", array_of(a.stages_analysis, as_json)}};
  if (!a.critical_paths.empty()) j["critical_path"] = array_of(a.critical_paths, as_json);
  return j;
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
