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
  // Per pipeline (replica, tensor rank) and stage, this step's costs, and
  // each one's relative cost.
  std::map<std::tuple<int, int, int>, std::vector<const MicrobatchCost*>> by_stage;
  for (const auto& c : costs)
    if (c.ms > 0) by_stage[{c.replica, c.tensor, c.stage}].push_back(&c);
  // (replica, tensor, microbatch) -> stage -> log relative cost
  std::map<std::tuple<int, int, std::int64_t>, std::map<int, double>> log_relative;
  for (const auto& [key, list] : by_stage) {
    std::vector<double> v;
    for (const auto* c : list) v.push_back(c->ms);
    const double median = percentile(v, 0.5);
    if (median <= 0) continue;
    const int stage = std::get<2>(key);
    for (const auto* c : list) {
      cost_ms_[stage].push_back(c->ms);
      const double r = c->ms / median;
      relative_[stage].push_back(r);
      log_relative[{c->replica, c->tensor, c->microbatch}][stage] = std::log(r);
    }
  }
  for (const auto& [mb, stages] : log_relative)
    for (auto a = stages.begin(); a != stages.end(); ++a)
      for (auto b = std::next(a); b != stages.end(); ++b) {
        Sums& s = pairs_[{a->first, b->first}];
        s.n += 1;
        s.x += a->second;
        s.y += b->second;
        s.xx += a->second * a->second;
        s.yy += b->second * b->second;
        s.xy += a->second * b->second;
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
