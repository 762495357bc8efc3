// analyze_step: the critical path, the waits, each stage's columns, its
// idle split and what-ifs of one step (step_analysis.h, docs/analysis.md).
#include "step_analysis.h"

#include <algorithm>
#include <limits>
#include <set>

#include "replica_waits.h"
#include "stats.h"
#include "step_replay.h"

namespace lens::analysis {
namespace {

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

PathSegment::Kind segment_kind(NodeKind k) {
  switch (k) {
    case NodeKind::kForward:
      return PathSegment::Kind::kForward;
    case NodeKind::kBackward:
      return PathSegment::Kind::kBackward;
    case NodeKind::kAllReduce:
      return PathSegment::Kind::kAllReduce;
    case NodeKind::kOptimizer:
      return PathSegment::Kind::kOptimizer;
  }
  return PathSegment::Kind::kForward;
}

// The figures of one replica's stages.
std::map<int, StageFigures> stage_figures(const StepGraph& g, PipelineKey pipeline, int stages,
                                          std::int64_t deadline_ns) {
  // The schedule's own idle: what 1F1B idles on every stage with this
  // work spread evenly, (P - 1) x (mean forward + mean backward).
  double forward_sum = 0, backward_sum = 0;
  int forwards = 0, backwards = 0;
  for (const auto& n : g.nodes) {
    if (!n.compute()) continue;
    (n.backward() ? backward_sum : forward_sum) += ms(n.end - n.start);
    ++(n.backward() ? backwards : forwards);
  }
  const double schedule_idle = (stages - 1) * ((forwards ? forward_sum / forwards : 0) +
                                               (backwards ? backward_sum / backwards : 0));
  std::map<int, StageFigures> figures;
  for (const auto& [stage, rank] : g.rank_of) {
    StageFigures& f = figures[stage];
    f.rank = rank;
    f.stage = stage;
    f.replica = pipeline.replica;
    f.tensor = pipeline.tensor;
    f.window_ms = ms(g.window_end - g.window_start);
    const auto step = g.step_ms.find(stage);
    f.step_ms = step == g.step_ms.end() ? 0 : step->second;
  }
  for (const auto& n : g.nodes) {
    StageFigures& f = figures[n.stage];
    if (!n.compute()) {
      (n.kind == NodeKind::kAllReduce ? f.all_reduce_ms : f.optimizer_ms) += ms(n.end - n.start);
      continue;
    }
    (n.backward() ? f.backward_ms : f.forward_ms) += ms(n.end - n.start);
    if (!n.backward()) ++f.microbatches;
  }
  for (auto& [stage, f] : figures) {
    const auto w = g.waits.by_stage.find(stage);
    const RankWaits waits = w == g.waits.by_stage.end() ? RankWaits{} : w->second;
    f.compute_ms = f.forward_ms + f.backward_ms;
    f.late_sender_ms = ms(waits.late_sender_ns);
    f.late_receiver_ms = ms(waits.late_receiver_ns);
    f.transfer_ms = ms(waits.transfer_ns);
    f.unmatched_transfers = waits.unmatched;
    f.rest_ms = f.step_ms - f.compute_ms - f.late_sender_ms - f.late_receiver_ms - f.transfer_ms;

    f.idle_ms = std::max(0.0, f.window_ms - f.compute_ms);
    f.schedule_idle_ms = std::min(schedule_idle, f.idle_ms);
    // The stage's first and last microbatch compute, and its late-sender
    // waits between them (at receives that began after its first compute).
    std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = 0;
    for (const auto& n : g.nodes)
      if (n.stage == stage && n.compute()) {
        first = std::min(first, n.start);
        last = std::max(last, n.end);
      }
    double steady_late_sender = 0;
    for (const auto& iv : g.waits.intervals)
      if (iv.stage == stage && iv.kind == WaitInterval::Kind::kLateSender && iv.start_ns >= first &&
          iv.end_ns <= last)
        steady_late_sender += ms(iv.end_ns - iv.start_ns);
    if (first <= last) {
      f.warmup_idle_ms = std::max(0.0, ms(first - g.window_start));
      f.cooldown_idle_ms = std::max(0.0, ms(g.window_end - last));
    }
    const double steady = std::max(0.0, f.idle_ms - f.warmup_idle_ms - f.cooldown_idle_ms);
    f.imbalance_idle_ms = std::min(steady, steady_late_sender);
    f.transfer_idle_ms = steady - f.imbalance_idle_ms;
  }
  // What-ifs: each stage's slack, and the step with a stage that costs
  // more than the median stage brought down to it.
  std::vector<double> per_microbatch;
  for (const auto& [stage, f] : figures)
    if (f.microbatches > 0) per_microbatch.push_back(f.compute_ms / f.microbatches);
  const double median_cost = median(per_microbatch);
  const StepReplay replay(g);
  const std::int64_t measured_end = replay.end();
  for (auto& [stage, f] : figures) {
    f.slack_ms = replay.slack_ms(stage, deadline_ns);
    if (f.microbatches == 0) continue;
    const double cost = f.compute_ms / f.microbatches;
    if (cost > median_cost && cost > 0)
      f.gain_at_median_ms = ms(replay.end(stage, median_cost / cost) - measured_end);
  }
  return figures;
}

// A critical path walked back from one node: each node was released by
// whichever it needed that came later, its input's arrival (the transfer
// from the neighbour's end to the receive's end is on the path) or its own
// rank's previous node.
struct Walk {
  std::vector<PathSegment> path;  // in time order
  double length_ms = 0;           // from its first start to its last end
  double transfer_ms = 0;
};

Walk walk_back(const StepGraph& g, int from) {
  Walk w;
  const auto at = [&](std::int64_t ns) { return ms(ns - g.window_start); };
  int i = from;
  std::int64_t first_start = 0;
  // Each node once: spans a file got wrong (two computes of one microbatch
  // on a stage, clocks far apart) could otherwise make the walk go round.
  std::vector<bool> visited(g.nodes.size(), false);
  while (i >= 0 && !visited[static_cast<std::size_t>(i)]) {
    visited[static_cast<std::size_t>(i)] = true;
    const GraphNode& n = g.nodes[static_cast<std::size_t>(i)];
    w.path.push_back({segment_kind(n.kind), n.stage, n.rank, n.microbatch, at(n.start), at(n.end),
                      n.start, n.end});
    first_start = n.start;
    const GraphNode* local = n.local >= 0 ? &g.nodes[static_cast<std::size_t>(n.local)] : nullptr;
    const GraphNode* cross = n.cross >= 0 ? &g.nodes[static_cast<std::size_t>(n.cross)] : nullptr;
    if (cross && n.released_by_neighbour(g.nodes)) {
      if (n.arrival > cross->end) {
        w.path.push_back({PathSegment::Kind::kTransfer, n.stage, n.rank, n.microbatch,
                          at(cross->end), at(n.arrival), cross->end, n.arrival});
        w.transfer_ms += ms(n.arrival - cross->end);
      }
      i = n.cross;
    } else {
      // Released by its own rank: the receive was posted after the send
      // began, and the message's transfer from then is on the path.
      if (cross && n.measured_arrival && local && n.posted >= local->end && n.arrival > n.posted) {
        w.path.push_back({PathSegment::Kind::kTransfer, n.stage, n.rank, n.microbatch, at(n.posted),
                          at(n.arrival), n.posted, n.arrival});
        w.transfer_ms += ms(n.arrival - n.posted);
      }
      i = n.local;
    }
  }
  std::reverse(w.path.begin(), w.path.end());
  if (from >= 0) w.length_ms = ms(g.nodes[static_cast<std::size_t>(from)].end - first_start);
  return w;
}

}  // namespace

std::map<int, PipelineKey> pipelines_of(const Run& run) {
  std::map<int, PipelineKey> out;
  for (const auto& f : run.files)
    out[f.rank] = {std::max(0, f.replica), std::max(0, f.tensor_rank)};
  return out;
}

StepAnalysis analyze_step(const StepView& step, int stages,
                          const std::map<int, PipelineKey>& pipeline_of) {
  StepAnalysis out;
  out.step = step.step;
  out.stages = stages;
  std::map<PipelineKey, std::vector<const StepOnRank*>> by_pipeline;
  for (const auto& [rank, sr] : step.ranks) {
    auto it = pipeline_of.find(rank);
    by_pipeline[it == pipeline_of.end() ? PipelineKey{} : it->second].push_back(&sr);
  }
  const StepGraph* slowest = nullptr;
  PipelineKey critical;
  for (const auto& [pipeline, ranks] : by_pipeline) {
    StepGraph& g = out.graphs[pipeline] = build_step_graph(ranks, stages);
    if (g.empty()) continue;
    std::set<int> computing;
    for (const auto& n : g.nodes)
      if (n.compute()) computing.insert(n.stage);
    out.complete = out.complete || static_cast<int>(computing.size()) == stages;
    // The replica that set the step: the one whose compute ended last
    // (its arrival at the data-parallel sync).
    if (slowest == nullptr || g.arrival_ns() > slowest->arrival_ns()) {
      slowest = &g;
      critical = pipeline;
    }
    out.impossible_edges += g.impossible_edges;
    out.waits.insert(out.waits.end(), g.waits.intervals.begin(), g.waits.intervals.end());
  }
  // Each replica's figures; a replica's slack runs to the slowest
  // replica's arrival at the sync (its last compute's end).
  const std::int64_t deadline = slowest ? slowest->arrival_ns() : 0;
  // The TP collectives, matched across the peers of each stage.
  std::vector<TensorPeer> peers;
  for (const auto& [pipeline, ranks] : by_pipeline)
    for (const StepOnRank* sr : ranks) peers.push_back({sr, pipeline.replica, pipeline.tensor});
  out.collectives = collective_waits(peers);
  out.waits.insert(out.waits.end(), out.collectives.intervals.begin(),
                   out.collectives.intervals.end());
  if (slowest != nullptr && out.collectives.any()) {
    // TP peers leave each collective together: the path runs through the
    // peer of the last replica that waited least at them.
    std::map<PipelineKey, std::int64_t> waited;
    for (const auto& [pipeline, ranks] : by_pipeline)
      for (const StepOnRank* sr : ranks)
        if (const auto c = out.collectives.by_rank.find(sr->rank);
            c != out.collectives.by_rank.end())
          waited[pipeline] += c->second.wait_ns;
    for (const auto& [pipeline, g] : out.graphs)
      if (pipeline.replica == critical.replica && !g.empty() &&
          waited[pipeline] < waited[critical]) {
        critical = pipeline;
        slowest = &g;
      }
  }
  out.critical_replica = critical.replica;
  out.critical_tensor = critical.tensor;
  // Each replica's figures.
  for (const auto& [pipeline, g] : out.graphs)
    if (!g.empty())
      for (auto& [stage, f] : stage_figures(g, pipeline, stages, deadline))
        out.stages_figures.push_back(f);
  for (auto& f : out.stages_figures) {
    const auto it = out.graphs.find(f.pipeline());
    if (it != out.graphs.end()) f.microbatches /= it->second.chunks;  // forwards per chunk
    out.microbatches = std::max(out.microbatches, f.microbatches);
    // The TP collectives run inside the computes (what of them does not
    // was in the rest): their own time is transfer, their wait a column of
    // its own.
    const auto c = out.collectives.by_rank.find(f.rank);
    if (c == out.collectives.by_rank.end()) continue;
    f.collective_ms = ms(c->second.collective_ns);
    f.collective_wait_ms = ms(c->second.wait_ns);
    for (const auto& [peer, ns] : c->second.waited_for) f.collective_waited_for_ms[peer] = ms(ns);
    f.compute_ms -= ms(c->second.in_compute_ns);
    f.rest_ms -= ms(c->second.collective_ns - c->second.in_compute_ns);
    f.transfer_ms += f.collective_ms - f.collective_wait_ms;
  }
  // Waits for the last replica at the gradient sync, wherever they surfaced
  // (replica_waits.h): a rank with no other replica waits only where it
  // has a sync.
  const std::map<int, ReplicaWait> replica = replica_waits(peers);
  for (auto& f : out.stages_figures) {
    const auto w = replica.find(f.rank);
    if (w == replica.end()) continue;
    const auto rg = out.graphs.find(f.pipeline());
    const bool synced = rg != out.graphs.end() && rg->second.sync.count(f.stage) > 0;
    if (w->second.replicas < 2 && !synced) continue;
    f.sync_last_replica = w->second.last_replica;
    // Out of the rest, where it was counted (the columns add up).
    f.sync_wait_ms = std::min(ms(w->second.wait_ns), std::max(0.0, f.rest_ms));
    if (f.sync_wait_ms > 0) f.sync_wait_at = w->second.where;
    f.rest_ms -= f.sync_wait_ms;
  }
  for (const auto& [pipeline, rg] : out.graphs) {
    std::map<std::pair<int, std::int64_t>, double> cost;  // (stage, microbatch)
    for (const auto& n : rg.nodes)
      if (n.compute()) cost[{n.stage, n.microbatch}] += ms(n.end - n.start);
    for (const auto& [at, v] : cost)
      out.microbatch_costs.push_back({pipeline.replica, at.first, pipeline.tensor, at.second, v});
  }
  if (slowest == nullptr) return out;
  const StepGraph& g = *slowest;
  for (const auto& [stage, ms_] : g.step_ms) out.step_ms = std::max(out.step_ms, ms_);

  // The step's path: walked back from the end of the rank whose compute
  // ended last in the replica that arrived last at the sync (its sync and
  // optimizer, then that compute), so the sync is on it once.
  int from = g.last;
  if (g.last_compute >= 0) {
    const int stage = g.nodes[static_cast<std::size_t>(g.last_compute)].stage;
    from = g.last_compute;
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
      if (g.nodes[static_cast<std::size_t>(i)].stage == stage &&
          g.nodes[static_cast<std::size_t>(i)].end >= g.nodes[static_cast<std::size_t>(from)].end)
        from = i;
  }
  Walk walk = walk_back(g, from);
  out.critical_path = std::move(walk.path);
  out.critical_path_ms = walk.length_ms;
  out.critical_transfer_ms = walk.transfer_ms;
  for (const auto& seg : out.critical_path) {
    if (seg.kind == PathSegment::Kind::kAllReduce)
      out.critical_all_reduce_ms += seg.end_ms - seg.start_ms;
    else if (seg.kind != PathSegment::Kind::kTransfer)
      out.critical_compute_ms += seg.end_ms - seg.start_ms;
  }
  // Every pipeline's own path, from its last compute: a stage's share is of
  // its own pipeline's path, so a replica that did not set the step still
  // shows which of its stages set its own arrival.
  for (const auto& [pipeline, rg] : out.graphs) {
    if (rg.empty()) continue;
    Walk own;
    const Walk* w = &own;
    if (pipeline == critical)
      w = &walk;
    else if (rg.last_compute >= 0)
      own = walk_back(rg, rg.last_compute);
    else
      continue;
    out.pipeline_path_ms[pipeline] = w->length_ms;
    const auto& path = pipeline == critical ? out.critical_path : own.path;
    for (auto& f : out.stages_figures) {
      if (f.pipeline() != pipeline) continue;
      for (const auto& seg : path)
        if (seg.kind != PathSegment::Kind::kTransfer && seg.kind != PathSegment::Kind::kAllReduce &&
            seg.stage == f.stage)
          f.critical_ms += seg.end_ms - seg.start_ms;
      f.critical_share = w->length_ms > 0 ? f.critical_ms / w->length_ms : 0;
    }
  }
  return out;
}

}  // namespace lens::analysis
