// build_step_graph: the nodes of a replica's step and their dependencies
// (step_graph.h).
#include "step_graph.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "lens/semconv.h"

namespace lens::analysis {

bool GraphNode::released_by_neighbour(const std::vector<GraphNode>& nodes) const {
  if (cross < 0) return false;
  if (local < 0) return true;
  if (measured_arrival && sent >= 0) return sent >= posted;
  return nodes[static_cast<std::size_t>(cross)].end >= nodes[static_cast<std::size_t>(local)].end;
}

StepGraph build_step_graph(const std::vector<const StepOnRank*>& ranks, int stages) {
  StepGraph g;
  g.window_start = std::numeric_limits<std::int64_t>::max();
  g.window_end = std::numeric_limits<std::int64_t>::min();
  std::map<int, const StepOnRank*> by_stage;
  for (const StepOnRank* sr : ranks) {
    if (sr->stage < 0 || sr->stage >= stages) continue;
    by_stage[sr->stage] = sr;
    g.rank_of[sr->stage] = sr->rank;
    std::int64_t fb_start = std::numeric_limits<std::int64_t>::max(), fb_end = 0;
    for (const SpanRow* s : sr->spans) {
      const SpanKind k = kind_of(*s);
      if (k == SpanKind::kForwardBackward) {
        fb_start = std::min(fb_start, s->start_ns);
        fb_end = std::max(fb_end, s->end_ns);
      }
      const bool all_reduce = s->name == semconv::kGradsAllReduceSpan;
      if (k != SpanKind::kForward && k != SpanKind::kBackward && k != SpanKind::kOptimizer &&
          !all_reduce)
        continue;
      GraphNode n;
      n.kind = k == SpanKind::kForward    ? NodeKind::kForward
               : k == SpanKind::kBackward ? NodeKind::kBackward
               : all_reduce               ? NodeKind::kAllReduce
                                          : NodeKind::kOptimizer;
      n.microbatch = n.compute() ? s->int_attr(semconv::kMicrobatchId, -1) : -2;
      n.chunk = static_cast<int>(
          std::clamp<std::int64_t>(s->int_attr(semconv::kVirtualPipelineRank, 0), 0, 1 << 20));
      n.stage = sr->stage;
      n.rank = sr->rank;
      n.start = s->start_ns;
      n.end = std::max(s->end_ns, s->start_ns);
      if (n.microbatch >= 0 || !n.compute()) g.nodes.push_back(n);
    }
    if (sr->step_span) {
      g.step_ms[sr->stage] =
          static_cast<double>(sr->step_span->end_ns - sr->step_span->start_ns) / 1e6;
      g.step_end[sr->stage] = sr->step_span->end_ns;
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
  std::sort(g.nodes.begin(), g.nodes.end(), [](const GraphNode& a, const GraphNode& b) {
    return std::tie(a.stage, a.start, a.end) < std::tie(b.stage, b.start, b.end);
  });
  std::map<std::tuple<bool, int, int, std::int64_t>, int> index;
  std::map<int, int> last_of_stage;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    GraphNode& n = g.nodes[static_cast<std::size_t>(i)];
    if (n.compute()) index[{n.backward(), n.stage, n.chunk, n.microbatch}] = i;
    g.chunks = std::max(g.chunks, n.chunk + 1);
    // Nodes are sorted by stage, then time: the previous one of a stage is
    // the one before it on its rank.
    auto [last, first_of_stage] = last_of_stage.try_emplace(n.stage, i);
    if (!first_of_stage) {
      n.local = last->second;
      last->second = i;
    }
  }
  g.waits = transfer_waits(by_stage);
  // The k-th compute of a microbatch on a stage that needs a given
  // neighbour takes the k-th receive from it (one per model chunk).
  std::map<std::tuple<int, bool, int, std::int64_t>, std::size_t> taken;
  for (auto& n : g.nodes) {
    if (!n.compute()) continue;
    int from = n.backward() ? n.stage + 1 : n.stage - 1;
    int chunk = n.chunk;
    if (from < 0) {
      from = stages - 1;
      --chunk;
    } else if (from >= stages) {
      from = 0;
      ++chunk;
    }
    if (chunk < 0 || chunk >= g.chunks) continue;
    const auto it = index.find({n.backward(), from, chunk, n.microbatch});
    if (it == index.end()) continue;
    n.cross = it->second;
    const GraphNode& c = g.nodes[static_cast<std::size_t>(n.cross)];
    n.arrival = c.end;
    const std::tuple<int, bool, int, std::int64_t> channel{n.stage, n.backward(), from,
                                                           n.microbatch};
    const auto receives = g.waits.receives.find(channel);
    const std::size_t k = taken[channel]++;
    if (receives != g.waits.receives.end() && k < receives->second.size()) {
      const TransferWaits::Receive& r = receives->second[k];
      // A receive that ended before the neighbour's compute did, or after
      // this compute began, is not the one that fed it (or the clocks
      // disagree): the arrival stays unmeasured.
      if (r.arrived_ns >= c.end && r.arrived_ns <= n.start) {
        n.arrival = r.arrived_ns;
        n.posted = r.posted_ns;
        n.sent = r.sent_ns;
        n.measured_arrival = true;
      }
    }
    if (c.end > n.start) ++g.impossible_edges;
  }
  const auto end_of = [&](int i) { return g.nodes[static_cast<std::size_t>(i)].end; };
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const GraphNode& n = g.nodes[static_cast<std::size_t>(i)];
    if (g.last < 0 || n.end > end_of(g.last)) g.last = i;
    if (n.compute() && (g.last_compute < 0 || n.end > end_of(g.last_compute))) g.last_compute = i;
    if (n.kind == NodeKind::kAllReduce) {
      const auto [it, first] = g.sync.try_emplace(n.stage, n.start, n.end);
      if (!first) {
        it->second.first = std::min(it->second.first, n.start);
        it->second.second = std::max(it->second.second, n.end);
      }
    }
  }
  return g;
}

}  // namespace lens::analysis
