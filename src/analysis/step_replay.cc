// StepReplay: the step graph walked with changed compute times
// (step_replay.h).
#include "step_replay.h"

#include <algorithm>
#include <vector>

namespace lens::analysis {

StepReplay::StepReplay(const StepGraph& g) : g_(g) {
  // The walk: depth first from each node in graph order, a node settled
  // once what it needs is. 0: not yet, 1: on the stack, 2: settled.
  const std::size_t n = g.nodes.size();
  steps_.reserve(n);
  std::vector<char> state(n, 0);
  std::vector<std::size_t> stack;
  for (std::size_t root = 0; root < n; ++root) {
    if (state[root] == 2) continue;
    stack.push_back(root);
    while (!stack.empty()) {
      const std::size_t i = stack.back();
      const GraphNode& node = g.nodes[i];
      if (state[i] == 0) {
        state[i] = 1;
        for (const int dep : {node.local, node.cross})
          if (dep >= 0 && state[static_cast<std::size_t>(dep)] == 0)
            stack.push_back(static_cast<std::size_t>(dep));
        continue;
      }
      stack.pop_back();
      if (state[i] == 2) continue;
      Step s;
      s.node = static_cast<int>(i);
      s.stage = node.stage;
      s.compute = node.compute();
      const bool local_settled = node.local >= 0 && state[static_cast<std::size_t>(node.local)] == 2;
      const bool cross_settled = node.cross >= 0 && state[static_cast<std::size_t>(node.cross)] == 2;
      const auto start_it = g.rank_start.find(node.stage);
      const std::int64_t measured_local =
          node.local >= 0                ? g.nodes[static_cast<std::size_t>(node.local)].end
          : start_it != g.rank_start.end() ? std::min(start_it->second, node.start)
                                           : node.start;
      s.local = local_settled ? node.local : -1;
      s.local_fixed = measured_local;  // an unsettled local dependency's end, too
      std::int64_t measured_ready = measured_local;
      if (node.cross >= 0) {
        const GraphNode& c = g.nodes[static_cast<std::size_t>(node.cross)];
        s.has_cross = true;
        s.cross = cross_settled ? node.cross : -1;
        s.cross_fixed = c.end;
        s.measured_arrival = node.measured_arrival;
        s.latency = node.arrival - c.end;
        // The message left when the sender called send after its compute
        // and was received once posted after this rank's previous node;
        // then it took its measured wire time.
        const std::int64_t sent = node.sent >= 0 ? node.sent : c.end;
        s.wire = node.arrival - std::max(node.posted, sent);
        s.posted_lag = node.posted - measured_local;
        s.sent_lag = sent - c.end;
        measured_ready = std::max(measured_ready, node.arrival);
      }
      s.overhead = std::max<std::int64_t>(0, node.start - measured_ready);
      s.duration = static_cast<double>(node.end - node.start);
      // x * 1.0 is x: the duration a replay gives a node of another stage.
      s.unscaled = static_cast<std::int64_t>(s.duration);
      steps_.push_back(s);
      state[i] = 2;
    }
  }
}

std::int64_t StepReplay::end(int stage, double factor) const {
  // Every node's end, written before it is read (a settled dependency's):
  // one buffer a thread, not one a replay.
  thread_local std::vector<std::int64_t> end;
  if (end.size() < g_.nodes.size()) end.resize(g_.nodes.size());
  std::int64_t last = 0;
  for (const Step& s : steps_) {
    std::int64_t ready = s.local >= 0 ? end[static_cast<std::size_t>(s.local)] : s.local_fixed;
    if (s.has_cross) {
      const std::int64_t cross_end =
          s.cross >= 0 ? end[static_cast<std::size_t>(s.cross)] : s.cross_fixed;
      const std::int64_t arrival =
          s.measured_arrival ? std::max(ready + s.posted_lag, cross_end + s.sent_lag) + s.wire
                             : cross_end + s.latency;
      ready = std::max(ready, arrival);
    }
    const std::int64_t duration = s.compute && s.stage == stage
                                      ? static_cast<std::int64_t>(s.duration * factor)
                                      : s.unscaled;
    const std::int64_t e = ready + s.overhead + duration;
    end[static_cast<std::size_t>(s.node)] = e;
    last = std::max(last, e);
  }
  return last;
}

double StepReplay::slack_ms(int stage, std::int64_t deadline_ns) const {
  std::int64_t compute = 0;
  for (const auto& node : g_.nodes)
    if (node.stage == stage && node.compute()) compute += node.end - node.start;
  if (compute <= 0 || g_.empty()) return 0;
  const std::int64_t base = std::max(end(), deadline_ns);
  // Adding more than the time to the deadline beyond the window can only
  // end later: search the scale between 1 and that.
  double low = 1,
         high = 1 + static_cast<double>(base - g_.window_start) / static_cast<double>(compute);
  if (end(stage, low) > base) return 0;
  if (end(stage, high) <= base) low = high;
  for (int i = 0; i < 40 && high - low > 1e-6; ++i) {
    const double mid = (low + high) / 2;
    (end(stage, mid) <= base ? low : high) = mid;
  }
  return (low - 1) * static_cast<double>(compute) / 1e6;
}

}  // namespace lens::analysis
