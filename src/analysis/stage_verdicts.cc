// judge_stages: stragglers told from imbalance (stage_verdicts.h).
#include "stage_verdicts.h"

#include <algorithm>
#include <limits>
#include <map>

#include "stats.h"

namespace lens::analysis {
namespace {

// The first index from `from` that starts kConsecutiveSteps scores in a row
// at or above the threshold, or -1.
int first_slow_run(const std::vector<double>& score, std::size_t from) {
  std::size_t run = 0;
  for (std::size_t i = from; i < score.size(); ++i) {
    run = score[i] >= kStragglerThreshold ? run + 1 : 0;
    if (run == kConsecutiveSteps) return static_cast<int>(i + 1 - kConsecutiveSteps);
  }
  return -1;
}

}  // namespace

const char* against_name(Straggler::Against a) {
  return a == Straggler::Against::kPeers ? "peers" : "own_baseline";
}

Verdicts judge_stages(const std::vector<RankSeries>& series) {
  Verdicts out;
  const std::size_t n = series.size();
  // Per step: each series' compute per microbatch.
  std::map<std::int64_t, std::map<std::size_t, double>> at_step;
  for (std::size_t i = 0; i < n; ++i) {
    const RankSeries& s = series[i];
    for (std::size_t k = 0; k < s.steps.size() && k < s.per_microbatch_ms.size(); ++k)
      at_step[s.steps[k]][i] = s.per_microbatch_ms[k];
    const std::size_t b = std::min(kBaselineSteps, s.per_microbatch_ms.size());
    out.baseline_ms.push_back(
        median({s.per_microbatch_ms.begin(), s.per_microbatch_ms.begin() + static_cast<long>(b)}));
  }
  const auto peers_median = [&](std::size_t i, std::int64_t step) {
    std::vector<double> peers;
    for (const auto& [j, cost] : at_step[step])
      if (j != i && series[j].stage == series[i].stage) peers.push_back(cost);
    return peers.empty() ? -1.0 : median(peers);
  };
  // The ratio of each series to its own baseline, per step.
  const auto own_ratio = [&](std::size_t j, double cost) {
    return out.baseline_ms[j] > 0 ? cost / out.baseline_ms[j] : 1.0;
  };

  out.expected_ms.resize(n);
  out.baseline_relative.resize(n, 0);
  std::map<int, std::vector<std::size_t>> by_stage;
  for (std::size_t i = 0; i < n; ++i) {
    const RankSeries& s = series[i];
    by_stage[s.stage].push_back(i);
    std::vector<double> against_own, against_peers, relative;
    bool have_peers = false;
    for (std::size_t k = 0; k < s.steps.size(); ++k) {
      const std::int64_t step = s.steps[k];
      const double cost = s.per_microbatch_ms[k];
      // How the others moved: the other ranks of its replica, which ran
      // the same microbatches (work that varies by microbatch moves them
      // all), or every other rank when it is its replica's only one.
      std::vector<double> same_replica, others;
      double fastest = std::numeric_limits<double>::max();
      for (const auto& [j, c] : at_step[step]) {
        if (j != i)
          (series[j].pipeline == s.pipeline ? same_replica : others).push_back(own_ratio(j, c));
        if (series[j].pipeline == s.pipeline) fastest = std::min(fastest, c);
      }
      if (!same_replica.empty()) others = same_replica;
      const double moved = others.empty() ? 1.0 : median(others);
      against_own.push_back(moved > 0 ? own_ratio(i, cost) / moved : 1.0);
      const double peers = peers_median(i, step);
      have_peers = have_peers || peers > 0;
      against_peers.push_back(peers > 0 ? cost / peers : 1.0);
      out.expected_ms[i].push_back(peers > 0 ? std::min(out.baseline_ms[i], peers)
                                             : out.baseline_ms[i]);
      if (k < kBaselineSteps) relative.push_back(fastest > 0 ? cost / fastest : 1.0);
    }
    out.baseline_relative[i] = median(relative);
    const int by_peers = have_peers ? first_slow_run(against_peers, 0) : -1;
    const int by_own = first_slow_run(against_own, kBaselineSteps);
    if (by_peers < 0 && by_own < 0) continue;
    Straggler st;
    st.rank = s.rank;
    st.stage = s.stage;
    st.pipeline = s.pipeline;
    const bool peers_first = by_peers >= 0 && (by_own < 0 || by_peers <= by_own);
    const int since = peers_first ? by_peers : by_own;
    const std::vector<double>& score = peers_first ? against_peers : against_own;
    st.against = peers_first ? Straggler::Against::kPeers : Straggler::Against::kOwnBaseline;
    st.since_step = s.steps[static_cast<std::size_t>(since)];
    st.ratio = median({score.begin() + since, score.end()});
    out.stragglers.push_back(st);
  }
  for (const auto& [stage, members] : by_stage) {
    Imbalance im{stage, {}, std::numeric_limits<double>::max()};
    for (const std::size_t i : members) {
      im.ratio = std::min(im.ratio, out.baseline_relative[i]);
      im.ranks.push_back(series[i].rank);
    }
    if (im.ratio >= kImbalanceThreshold) out.imbalance.push_back(im);
  }
  std::sort(out.imbalance.begin(), out.imbalance.end(),
            [](const Imbalance& a, const Imbalance& b) { return a.ratio > b.ratio; });
  return out;
}

}  // namespace lens::analysis
