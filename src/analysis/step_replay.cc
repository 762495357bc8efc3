// replay_end and slack_ms: the step graph walked with changed compute
// times (step_replay.h).
#include "step_replay.h"

#include <algorithm>
#include <vector>

namespace lens::analysis {

std::int64_t replay_end(const StepGraph& g, const std::map<int, double>& scale_by_stage) {
  const std::size_t n = g.nodes.size();
  std::vector<std::int64_t> end(n, 0);
  // 0: not yet, 1: on the stack, 2: done. A graph that goes round (spans a
  // file got wrong) takes the measured end where the cycle closes.
  std::vector<char> state(n, 0);
  std::vector<std::size_t> stack;
  std::int64_t last = 0;
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
      const auto end_of = [&](int dep) {
        const auto d = static_cast<std::size_t>(dep);
        return state[d] == 2 ? end[d] : g.nodes[d].end;
      };
      const auto start_it = g.rank_start.find(node.stage);
      const std::int64_t measured_local =
          node.local >= 0                  ? g.nodes[static_cast<std::size_t>(node.local)].end
          : start_it != g.rank_start.end() ? std::min(start_it->second, node.start)
                                           : node.start;
      std::int64_t ready = node.local >= 0 ? end_of(node.local) : measured_local;
      std::int64_t measured_ready = measured_local;
      if (node.cross >= 0) {
        const GraphNode& c = g.nodes[static_cast<std::size_t>(node.cross)];
        std::int64_t arrival = end_of(node.cross) + (node.arrival - c.end);
        if (node.measured_arrival) {
          // The message left when the sender called send after its compute
          // and was received once posted after this rank's previous node;
          // then it took its measured wire time.
          const std::int64_t sent = node.sent >= 0 ? node.sent : c.end;
          const std::int64_t wire = node.arrival - std::max(node.posted, sent);
          arrival = std::max(ready + (node.posted - measured_local),
                             end_of(node.cross) + (sent - c.end)) +
                    wire;
        }
        ready = std::max(ready, arrival);
        measured_ready = std::max(measured_ready, node.arrival);
      }
      const std::int64_t overhead = std::max<std::int64_t>(0, node.start - measured_ready);
      const auto scale = scale_by_stage.find(node.stage);
      const double factor = node.compute() && scale != scale_by_stage.end() ? scale->second : 1.0;
      end[i] = ready + overhead +
               static_cast<std::int64_t>(static_cast<double>(node.end - node.start) * factor);
      state[i] = 2;
      last = std::max(last, end[i]);
    }
  }
  return last;
}

double slack_ms(const StepGraph& g, int stage, std::int64_t deadline_ns) {
  std::int64_t compute = 0;
  for (const auto& node : g.nodes)
    if (node.stage == stage && node.compute()) compute += node.end - node.start;
  if (compute <= 0 || g.empty()) return 0;
  const std::int64_t base = std::max(replay_end(g, {}), deadline_ns);
  constexpr std::int64_t kTolerance = 0;
  // Adding more than the time to the deadline beyond the window can only
  // end later: search the scale between 1 and that.
  double low = 1,
         high = 1 + static_cast<double>(base - g.window_start) / static_cast<double>(compute);
  if (replay_end(g, {{stage, low}}) > base + kTolerance) return 0;
  if (replay_end(g, {{stage, high}}) <= base + kTolerance) low = high;
  for (int i = 0; i < 40 && high - low > 1e-6; ++i) {
    const double mid = (low + high) / 2;
    (replay_end(g, {{stage, mid}}) <= base + kTolerance ? low : high) = mid;
  }
  return (low - 1) * static_cast<double>(compute) / 1e6;
}

}  // namespace lens::analysis
