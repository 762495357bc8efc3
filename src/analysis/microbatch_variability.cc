// MicrobatchVariability (microbatch_variability.h).
#include "microbatch_variability.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "stats.h"

namespace lens::analysis {

void MicrobatchVariability::add(const std::vector<MicrobatchCost>& costs, int setter) {
  if (last_setter_ && *last_setter_ != setter) ++changes_;
  last_setter_ = setter;
  ++steps_;
  // Per pipeline (replica, tensor rank) and stage, this step's costs in
  // their order, the groups in key order; each one's relative cost. Sorted
  // vectors rather than maps (a tree node per cost and key, per step).
  std::vector<const MicrobatchCost*>& by_stage = by_stage_;
  by_stage.clear();
  for (const auto& c : costs)
    if (c.ms > 0) by_stage.push_back(&c);
  std::stable_sort(by_stage.begin(), by_stage.end(), [](const auto* a, const auto* b) {
    return std::tie(a->replica, a->tensor, a->stage) < std::tie(b->replica, b->tensor, b->stage);
  });
  // (replica, tensor, microbatch, stage) -> log relative cost, in the order
  // made: of a key made twice the later counts.
  std::vector<LogRelative>& log_relative = log_relative_;
  log_relative.clear();
  std::vector<double> v;
  for (std::size_t begin = 0, end = 0; begin < by_stage.size(); begin = end) {
    const MicrobatchCost& first = *by_stage[begin];
    for (end = begin + 1; end < by_stage.size() && by_stage[end]->replica == first.replica &&
                          by_stage[end]->tensor == first.tensor &&
                          by_stage[end]->stage == first.stage;
         ++end) {
    }
    v.clear();
    for (std::size_t i = begin; i < end; ++i) v.push_back(by_stage[i]->ms);
    const double median = percentile(v, 0.5);
    if (median <= 0) continue;
    const int stage = first.stage;
    std::vector<double>& cost = cost_ms_[stage];
    std::vector<double>& relative = relative_[stage];
    for (std::size_t i = begin; i < end; ++i) {
      const MicrobatchCost& c = *by_stage[i];
      cost.push_back(c.ms);
      const double r = c.ms / median;
      relative.push_back(r);
      log_relative.push_back({c.replica, c.tensor, c.microbatch, stage, std::log(r)});
    }
  }
  std::stable_sort(log_relative.begin(), log_relative.end(),
                   [](const LogRelative& a, const LogRelative& b) {
                     return std::tie(a.replica, a.tensor, a.microbatch, a.stage) <
                            std::tie(b.replica, b.tensor, b.microbatch, b.stage);
                   });
  // Each microbatch's stages in order (the last of a stage made twice), and
  // every pair of them.
  std::vector<std::pair<int, double>> stages;
  for (std::size_t begin = 0, end = 0; begin < log_relative.size(); begin = end) {
    const LogRelative& first = log_relative[begin];
    stages.clear();
    for (end = begin; end < log_relative.size() && log_relative[end].replica == first.replica &&
                      log_relative[end].tensor == first.tensor &&
                      log_relative[end].microbatch == first.microbatch;
         ++end) {
      if (!stages.empty() && stages.back().first == log_relative[end].stage)
        stages.back().second = log_relative[end].value;
      else
        stages.emplace_back(log_relative[end].stage, log_relative[end].value);
    }
    for (std::size_t a = 0; a < stages.size(); ++a)
      for (std::size_t b = a + 1; b < stages.size(); ++b) {
        Sums& s = pairs_[{stages[a].first, stages[b].first}];
        const double x = stages[a].second, y = stages[b].second;
        s.n += 1;
        s.x += x;
        s.y += y;
        s.xx += x * x;
        s.yy += y * y;
        s.xy += x * y;
      }
  }
}

Variability MicrobatchVariability::finish() const {
  Variability out;
  std::vector<double> spreads;
  for (const auto& [stage, costs] : cost_ms_) {
    StageSpread s;
    s.stage = stage;
    s.microbatches = costs.size();
    s.p50_ms = percentile(costs, 0.5);
    s.p95_ms = percentile(costs, 0.95);
    const auto [lo, hi] = std::minmax_element(costs.begin(), costs.end());
    s.max_over_min = *lo > 0 ? *hi / *lo : 0;
    const auto& rel = relative_.at(stage);
    const double p10 = percentile(rel, 0.1);
    s.relative_p90_p10 = p10 > 0 ? percentile(rel, 0.9) / p10 : 0;
    spreads.push_back(s.relative_p90_p10);
    out.stages.push_back(s);
  }
  out.spread = percentile(spreads, 0.5);
  double sum = 0;
  int pairs = 0;
  for (const auto& [key, s] : pairs_) {
    if (s.n < 3) continue;
    const double cov = s.n * s.xy - s.x * s.y;
    const double vx = s.n * s.xx - s.x * s.x, vy = s.n * s.yy - s.y * s.y;
    // Stages whose microbatches all cost the same correlate with nothing.
    const double r = vx > 0 && vy > 0 ? cov / std::sqrt(vx * vy) : 0;
    sum += r;
    ++pairs;
  }
  out.correlation = pairs > 0 ? sum / pairs : 0;
  out.setter_changes =
      steps_ > 1 ? static_cast<double>(changes_) / static_cast<double>(steps_ - 1) : 0;
  out.variable = out.spread >= kVariabilitySpread && out.correlation >= kVariabilityCorrelation;
  return out;
}

}  // namespace lens::analysis
