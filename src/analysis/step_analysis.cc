// analyze_step: the dependency graph of one step, its critical path, waits
// and idle split (step_analysis.h, docs/analysis.md).
#include "step_analysis.h"

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

namespace lens::tools {
namespace {

struct Node {
  PathSegment::Kind kind = PathSegment::Kind::kForward;  // never kTransfer
  bool backward = false;
  bool compute() const {  // a microbatch's forward or backward
    return kind == PathSegment::Kind::kForward || kind == PathSegment::Kind::kBackward;
  }
  std::int64_t microbatch = -1;
  int chunk = 0;  // dl.virtual_pipeline.rank: the model chunk (interleaved schedule)
  int stage = -1, rank = -1;
  std::int64_t start = 0, end = 0;
  int local = -1;  // the node before it on its rank
  int cross = -1;  // the neighbour's node it needs
};

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

struct Replica {
  std::vector<Node> nodes;
  std::map<int, const StepOnRank*> by_stage;
  std::map<int, int> last_of_stage;  // stage -> its latest node so far, while chaining
  std::int64_t window_start = std::numeric_limits<std::int64_t>::max();
  std::int64_t window_end = std::numeric_limits<std::int64_t>::min();
  std::map<int, std::int64_t> rank_start;  // stage -> when its schedule began
  int last = -1;                           // the node that ends last
  int chunks = 1;                          // model chunks per stage
  double step_ms = 0;
};

Replica build(const std::vector<const StepOnRank*>& ranks, int stages) {
  Replica g;
  for (const StepOnRank* sr : ranks) {
    if (sr->stage < 0 || sr->stage >= stages) continue;
    g.by_stage[sr->stage] = sr;
    std::int64_t fb_start = std::numeric_limits<std::int64_t>::max(), fb_end = 0;
    for (const SpanRow* s : sr->spans) {
      const SpanKind k = kind_of(*s);
      if (k == SpanKind::kForwardBackward) {
        fb_start = std::min(fb_start, s->start_ns);
        fb_end = std::max(fb_end, s->end_ns);
      }
      const bool all_reduce = s->name == "megatron.grads.all_reduce";
      if (k != SpanKind::kForward && k != SpanKind::kBackward && k != SpanKind::kOptimizer &&
          !all_reduce)
        continue;
      Node n;
      n.backward = k == SpanKind::kBackward;
      n.kind = k == SpanKind::kForward    ? PathSegment::Kind::kForward
               : k == SpanKind::kBackward ? PathSegment::Kind::kBackward
               : all_reduce               ? PathSegment::Kind::kAllReduce
                                          : PathSegment::Kind::kOptimizer;
      n.microbatch = n.compute() ? s->int_attr("dl.microbatch_id", -1) : -2;
      n.chunk = static_cast<int>(
          std::clamp<std::int64_t>(s->int_attr("dl.virtual_pipeline.rank", 0), 0, 1 << 20));
      n.stage = sr->stage;
      n.rank = sr->rank;
      n.start = s->start_ns;
      n.end = std::max(s->end_ns, s->start_ns);
      if (n.microbatch >= 0 || !n.compute()) g.nodes.push_back(n);
    }
    if (sr->step_span) {
      g.step_ms = std::max(g.step_ms, ms(sr->step_span->end_ns - sr->step_span->start_ns));
      if (fb_start == std::numeric_limits<std::int64_t>::max()) {
        fb_start = sr->step_span->start_ns;
        fb_end = sr->step_span->end_ns;
      }
    }
    if (fb_start != std::numeric_limits<std::int64_t>::max()) {
      g.rank_start[sr->stage] = fb_start;
      g.window_start = std::min(g.window_start, fb_start);
      g.window_end = std::max(g.window_end, fb_end);
    }
  }
  std::sort(g.nodes.begin(), g.nodes.end(), [](const Node& a, const Node& b) {
    return std::tie(a.stage, a.start, a.end) < std::tie(b.stage, b.start, b.end);
  });
  std::map<std::tuple<bool, int, int, std::int64_t>, int> index;
  int chunks = 1;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    Node& n = g.nodes[static_cast<std::size_t>(i)];
    if (n.compute()) index[{n.backward, n.stage, n.chunk, n.microbatch}] = i;
    chunks = std::max(chunks, n.chunk + 1);
    // Nodes are sorted by stage, then time: the previous one of a stage is
    // the one before it on its rank.
    auto [last, first_of_stage] = g.last_of_stage.try_emplace(n.stage, i);
    if (!first_of_stage) {
      n.local = last->second;
      last->second = i;
    }
  }
  // What each compute needs: the same microbatch's on the neighbouring
  // stage; in the interleaved schedule the first stage's chunk v needs the
  // last stage's chunk v - 1 forward, and the last stage's chunk v the first
  // stage's chunk v + 1 backward.
  for (auto& n : g.nodes) {
    if (!n.compute()) continue;
    int from = n.backward ? n.stage + 1 : n.stage - 1;
    int chunk = n.chunk;
    if (from < 0) {
      from = stages - 1;
      --chunk;
    } else if (from >= stages) {
      from = 0;
      ++chunk;
    }
    if (chunk < 0 || chunk >= chunks) continue;
    if (auto it = index.find({n.backward, from, chunk, n.microbatch}); it != index.end())
      n.cross = it->second;
  }
  g.chunks = chunks;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (g.last < 0 ||
        g.nodes[static_cast<std::size_t>(i)].end > g.nodes[static_cast<std::size_t>(g.last)].end)
      g.last = i;
  return g;
}

}  // namespace

StepAnalysis analyze_step(const StepView& step, int stages, const std::map<int, int>& replica_of) {
  StepAnalysis out;
  out.step = step.step;
  out.stages = stages;
  std::map<int, std::vector<const StepOnRank*>> by_replica;
  for (const auto& [rank, sr] : step.ranks) {
    auto it = replica_of.find(rank);
    by_replica[it == replica_of.end() ? 0 : std::max(0, it->second)].push_back(&sr);
  }
  const Replica* slowest = nullptr;
  int slowest_replica = 0;
  std::map<int, Replica> graphs;
  for (const auto& [replica, ranks] : by_replica) {
    Replica& g = graphs[replica] = build(ranks, stages);
    if (g.nodes.empty() || g.window_start > g.window_end) continue;
    std::set<int> computing;
    for (const auto& n : g.nodes)
      if (n.compute()) computing.insert(n.stage);
    out.complete = out.complete || static_cast<int>(computing.size()) == stages;
    if (slowest == nullptr || g.nodes[static_cast<std::size_t>(g.last)].end >
                                  slowest->nodes[static_cast<std::size_t>(slowest->last)].end) {
      slowest = &g;
      slowest_replica = replica;
    }

    // The schedule's own idle: what 1F1B idles on every stage with this
    // work spread evenly, (P - 1) x (mean forward + mean backward).
    double forward_sum = 0, backward_sum = 0;
    int forwards = 0, backwards = 0;
    for (const auto& n : g.nodes) {
      if (!n.compute()) continue;
      (n.backward ? backward_sum : forward_sum) += ms(n.end - n.start);
      ++(n.backward ? backwards : forwards);
    }
    const double schedule_idle = (stages - 1) * ((forwards ? forward_sum / forwards : 0) +
                                                 (backwards ? backward_sum / backwards : 0));

    std::map<int, StageFigures> figures;
    std::map<int, double> steady_late_sender;
    for (const auto& [stage, sr] : g.by_stage) {
      StageFigures& f = figures[stage];
      f.rank = sr->rank;
      f.stage = stage;
      f.replica = replica;
      f.window_ms = ms(g.window_end - g.window_start);
    }
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
      const Node& n = g.nodes[static_cast<std::size_t>(i)];
      StageFigures& f = figures[n.stage];
      if (!n.compute()) {
        (n.kind == PathSegment::Kind::kAllReduce ? f.all_reduce_ms : f.optimizer_ms) +=
            ms(n.end - n.start);
        continue;
      }
      (n.backward ? f.backward_ms : f.forward_ms) += ms(n.end - n.start);
      if (!n.backward) ++f.microbatches;
      if (n.cross < 0) continue;
      // The wait at this receive: from when the stage was ready (its
      // previous compute ended, or its schedule began) to the compute's
      // start; late sender while the neighbour was still computing.
      const Node& c = g.nodes[static_cast<std::size_t>(n.cross)];
      const std::int64_t ready =
          n.local >= 0 ? g.nodes[static_cast<std::size_t>(n.local)].end : g.rank_start[n.stage];
      const std::int64_t late = std::max<std::int64_t>(0, std::min(c.end, n.start) - ready);
      f.late_sender_ms += ms(late);
      if (n.local >= 0) steady_late_sender[n.stage] += ms(late);
      const std::int64_t arrived = std::max(ready, c.end);
      f.transfer_ms += ms(std::max<std::int64_t>(0, n.start - arrived));
      if (late > 0) out.waits.push_back({n.rank, n.stage, true, ready, ready + late});
      if (n.start > arrived) out.waits.push_back({n.rank, n.stage, false, arrived, n.start});
      figures[c.stage].late_receiver_ms += ms(std::max<std::int64_t>(0, ready - c.end));
    }
    for (auto& [stage, f] : figures) {
      f.compute_ms = f.forward_ms + f.backward_ms;
      f.idle_ms = std::max(0.0, f.window_ms - f.compute_ms);
      f.schedule_idle_ms = std::min(schedule_idle, f.idle_ms);
      // The stage's first and last microbatch compute.
      std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = 0;
      for (const auto& n : g.nodes)
        if (n.stage == stage && n.compute()) {
          first = std::min(first, n.start);
          last = std::max(last, n.end);
        }
      if (first <= last) {
        f.warmup_idle_ms = std::max(0.0, ms(first - g.window_start));
        f.cooldown_idle_ms = std::max(0.0, ms(g.window_end - last));
      }
      const double steady = std::max(0.0, f.idle_ms - f.warmup_idle_ms - f.cooldown_idle_ms);
      f.imbalance_idle_ms = std::min(steady, steady_late_sender[stage]);
      f.transfer_idle_ms = steady - f.imbalance_idle_ms;
    }
    for (auto& [stage, f] : figures) out.stages_figures.push_back(f);
  }
  for (auto& f : out.stages_figures) {
    const auto it = graphs.find(f.replica);
    if (it != graphs.end()) f.microbatches /= it->second.chunks;  // forwards per chunk
    out.microbatches = std::max(out.microbatches, f.microbatches);
  }
  if (slowest == nullptr) return out;

  // The critical path, walked back from the compute that ended last: each
  // node was released by whichever it needed that finished later, its
  // neighbour's (the transfer between them is on the path) or its own
  // rank's previous one.
  const Replica& g = *slowest;
  out.step_ms = g.step_ms;
  std::vector<PathSegment> path;
  const auto at = [&](std::int64_t ns) { return ms(ns - g.window_start); };
  int i = g.last;
  std::int64_t first_start = 0;
  // Each node once: spans a file got wrong (two computes of one microbatch
  // on a stage, clocks far apart) could otherwise make the walk go round.
  std::vector<bool> visited(g.nodes.size(), false);
  while (i >= 0 && !visited[static_cast<std::size_t>(i)]) {
    visited[static_cast<std::size_t>(i)] = true;
    const Node& n = g.nodes[static_cast<std::size_t>(i)];
    path.push_back({n.kind, n.stage, n.rank, n.microbatch, at(n.start), at(n.end), n.start, n.end});
    first_start = n.start;
    const Node* local = n.local >= 0 ? &g.nodes[static_cast<std::size_t>(n.local)] : nullptr;
    const Node* cross = n.cross >= 0 ? &g.nodes[static_cast<std::size_t>(n.cross)] : nullptr;
    if (cross && (!local || cross->end >= local->end)) {
      if (n.start > cross->end) {
        path.push_back({PathSegment::Kind::kTransfer, n.stage, n.rank, n.microbatch, at(cross->end),
                        at(n.start), cross->end, n.start});
        out.critical_transfer_ms += ms(n.start - cross->end);
      }
      i = n.cross;
    } else {
      i = n.local;
    }
  }
  std::reverse(path.begin(), path.end());
  out.critical_path = std::move(path);
  out.critical_path_ms = ms(g.nodes[static_cast<std::size_t>(g.last)].end - first_start);
  for (const auto& seg : out.critical_path) {
    if (seg.kind == PathSegment::Kind::kAllReduce)
      out.critical_all_reduce_ms += seg.end_ms - seg.start_ms;
    else if (seg.kind != PathSegment::Kind::kTransfer)
      out.critical_compute_ms += seg.end_ms - seg.start_ms;
  }
  for (auto& f : out.stages_figures) {
    if (f.replica != slowest_replica) continue;
    for (const auto& seg : out.critical_path)
      if (seg.kind != PathSegment::Kind::kTransfer && seg.kind != PathSegment::Kind::kAllReduce &&
          seg.stage == f.stage)
        f.critical_ms += seg.end_ms - seg.start_ms;
    f.critical_share = out.critical_path_ms > 0 ? f.critical_ms / out.critical_path_ms : 0;
  }
  return out;
}

}  // namespace lens::tools
