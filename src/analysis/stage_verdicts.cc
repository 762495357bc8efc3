// judge_stages: stragglers told from imbalance (stage_verdicts.h).
#include "stage_verdicts.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "stats.h"

namespace lens::analysis {
namespace {

// The first index from `from` that starts `required` scores in a row at or
// above the threshold, or -1.
int first_slow_run(const std::vector<double>& score, std::size_t from, std::size_t required) {
  std::size_t run = 0;
  for (std::size_t i = from; i < score.size(); ++i) {
    run = score[i] >= kStragglerThreshold ? run + 1 : 0;
    if (run == required) return static_cast<int>(i + 1 - required);
  }
  return -1;
}

constexpr double kEarlierSplitMargin = 1.1;

// One series' scores, step by step: against its own baseline (relative to
// how the others moved) and against its peers (-1 where it has none).
struct Scores {
  std::vector<double> own, peers;
  bool have_peers = false;
};

// How far a series' compute moved at index `since`: the median of its
// steps from there over the median of its steps before (1 when either side
// is empty). Medians over many steps: one noisy step, or a noisy baseline
// step, moves it little.
double shift_at(const std::vector<double>& cost, std::size_t since) {
  if (since == 0 || since >= cost.size()) return 1.0;
  const double before = median({cost.begin(), cost.begin() + static_cast<long>(since)});
  const double after = median({cost.begin() + static_cast<long>(since), cost.end()});
  return before > 0 ? after / before : 1.0;
}

// The run's step-to-step noise a series is judged against: the 90th
// percentile, over the other series that are not themselves slow, of each
// step's compute over that series' median on its side of `since_step` (a
// level that moves at that step, as the others' does when one rank's slow
// compute leaves them the cores they shared, is not noise; 1 when there
// are none).
double noise_for(std::size_t i, const std::vector<RankSeries>& series,
                 const std::vector<bool>& slow, std::int64_t since_step) {
  std::vector<double> pooled;
  for (std::size_t j = 0; j < series.size(); ++j) {
    if (j == i || slow[j]) continue;
    const RankSeries& s = series[j];
    const std::vector<double>& c = s.per_microbatch_ms;
    const auto split = static_cast<long>(
        std::lower_bound(s.steps.begin(), s.steps.end(), since_step) - s.steps.begin());
    for (const auto& [from, to] : {std::pair{0L, split}, std::pair{split, static_cast<long>(c.size())}}) {
      if (to <= from) continue;
      const double m = median({c.begin() + from, c.begin() + to});
      if (m <= 0) continue;
      for (long k = from; k < to; ++k) pooled.push_back(c[static_cast<std::size_t>(k)] / m);
    }
  }
  return pooled.empty() ? 1.0 : std::max(1.0, percentile(pooled, 0.9));
}

}  // namespace

std::size_t steps_required(std::size_t judged) {
  const auto share = static_cast<std::size_t>(
      std::ceil(kStepsRequiredShare * static_cast<double>(judged)));
  return std::clamp(share, kConsecutiveSteps, kMostStepsRequired);
}

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
  std::vector<Scores> scores(n);
  for (std::size_t i = 0; i < n; ++i) {
    const RankSeries& s = series[i];
    by_stage[s.stage].push_back(i);
    Scores& sc = scores[i];
    std::vector<double> relative;
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
      sc.own.push_back(moved > 0 ? own_ratio(i, cost) / moved : 1.0);
      const double peers = peers_median(i, step);
      sc.have_peers = sc.have_peers || peers > 0;
      sc.peers.push_back(peers > 0 ? cost / peers : 1.0);
      out.expected_ms[i].push_back(peers > 0 ? std::min(out.baseline_ms[i], peers)
                                             : out.baseline_ms[i]);
      if (k < kBaselineSteps) relative.push_back(fastest > 0 ? cost / fastest : 1.0);
    }
    out.baseline_relative[i] = median(relative);
  }
  // Who has a run of slow steps long enough; then whether it stands out
  // of the noise the other ranks show.
  std::vector<Straggler> candidates(n);
  std::vector<bool> slow(n, false);
  std::vector<std::size_t> since_of(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const RankSeries& s = series[i];
    const Scores& sc = scores[i];
    const std::size_t judged = s.steps.size() > kBaselineSteps ? s.steps.size() - kBaselineSteps : 0;
    const std::size_t required = steps_required(judged);
    const int by_peers = sc.have_peers ? first_slow_run(sc.peers, 0, required) : -1;
    const int by_own = first_slow_run(sc.own, kBaselineSteps, required);
    if (by_peers < 0 && by_own < 0) continue;
    slow[i] = true;
    Straggler& st = candidates[i];
    st.rank = s.rank;
    st.stage = s.stage;
    st.pipeline = s.pipeline;
    const bool peers_first = by_peers >= 0 && (by_own < 0 || by_peers <= by_own);
    since_of[i] = static_cast<std::size_t>(peers_first ? by_peers : by_own);
    st.against = peers_first ? Straggler::Against::kPeers : Straggler::Against::kOwnBaseline;
    st.since_step = s.steps[since_of[i]];
  }
  // A rank's slowdown from `since_step` on (above), and the same figure of
  // the ranks that are not slow: their spread is the noise it must stand
  // out of.
  const auto slowdown = [&](std::size_t j, const Straggler& st) -> std::optional<double> {
    const RankSeries& s = series[j];
    const auto at = std::find(s.steps.begin(), s.steps.end(), st.since_step);
    if (at == s.steps.end()) return std::nullopt;
    const auto since = static_cast<std::size_t>(at - s.steps.begin());
    if (st.against == Straggler::Against::kPeers) {
      if (!scores[j].have_peers) return std::nullopt;
      const std::vector<double>& p = scores[j].peers;
      return median({p.begin() + static_cast<long>(since), p.end()});
    }
    // Against its own steps before, relative to how the other ranks of its
    // replica moved at the same step (every other rank's, when its replica
    // has fewer than two others: one other rank is too noisy a yardstick).
    std::vector<double> same_replica, others;
    for (std::size_t k = 0; k < n; ++k) {
      if (k == j) continue;
      const auto there = std::find(series[k].steps.begin(), series[k].steps.end(), st.since_step);
      if (there == series[k].steps.end()) continue;
      const double moved = shift_at(series[k].per_microbatch_ms,
                                    static_cast<std::size_t>(there - series[k].steps.begin()));
      (series[k].pipeline == s.pipeline ? same_replica : others).push_back(moved);
    }
    if (same_replica.size() >= 2)
      others = same_replica;
    else
      others.insert(others.end(), same_replica.begin(), same_replica.end());
    const double moved = others.empty() ? 1.0 : median(others);
    // Its own move counts too: a rank whose steps did not move is no
    // straggler because the others' baseline steps were slow ones.
    const double own = shift_at(s.per_microbatch_ms, since);
    return std::min(own, moved > 0 ? own / moved : own);
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (!slow[i]) continue;
    Straggler& st = candidates[i];
    const RankSeries& s = series[i];
    // Where it changed: a run of slow steps can begin after the slowdown
    // did (a noisy step breaks a run), so against its own baseline the
    // step, from the baseline's end to the run's start, where its slowdown
    // is largest. The ranks that are not slow are searched the same way, so
    // that the search's own luck is in the noise too.
    std::vector<std::int64_t> earlier;
    if (st.against == Straggler::Against::kOwnBaseline)
      for (std::size_t t = kBaselineSteps; t < since_of[i]; ++t) earlier.push_back(s.steps[t]);
    const auto largest = [&](std::size_t j, Straggler at) -> std::optional<double> {
      std::optional<double> best = slowdown(j, at);
      for (const std::int64_t step : earlier) {
        at.since_step = step;
        if (const auto x = slowdown(j, at); x && (!best || *x > *best)) best = x;
      }
      return best;
    };
    // The run's start, unless an earlier step moved clearly more (by
    // kEarlierSplitMargin: a step or two of noise at the baseline's end do
    // not move the slowdown's start).
    std::optional<double> best = slowdown(i, st);
    for (const std::int64_t step : earlier) {
      Straggler at = st;
      at.since_step = step;
      if (const auto x = slowdown(i, at); x && (!best || *x > kEarlierSplitMargin * *best)) {
        best = x;
        st.since_step = step;
      }
    }
    st.ratio = best.value_or(1.0);
    const auto from = static_cast<std::size_t>(
        std::find(s.steps.begin(), s.steps.end(), st.since_step) - s.steps.begin());
    const std::vector<double>& score =
        st.against == Straggler::Against::kPeers ? scores[i].peers : scores[i].own;
    st.steps = score.size() - from;
    st.slow_steps = static_cast<std::size_t>(
        std::count_if(score.begin() + static_cast<long>(from), score.end(),
                      [](double x) { return x >= kStragglerThreshold; }));
    std::vector<double> theirs;
    for (std::size_t j = 0; j < n; ++j)
      if (j != i && !slow[j])
        if (const auto x = largest(j, st)) theirs.push_back(*x);
    st.noise = std::max({1.0, noise_for(i, series, slow, st.since_step), percentile(theirs, 0.9)});
    // Not slow by the figure of many steps: a few slow steps, no verdict.
    if (st.ratio < kStragglerThreshold) continue;
    (st.ratio >= kNoiseMargin * st.noise ? out.stragglers : out.not_named).push_back(st);
  }
  // Imbalance, a figure of the whole run: in each step, a rank's cost over
  // that of its replica's cheapest stage (the one of least median cost),
  // and of those the 20th percentile over the steps: a stage that does more
  // work costs more than the cheapest in (nearly) every step, where the
  // noise of balanced stages puts either above the other half the time. No
  // more than over its first steps (a stage that grew later is a
  // straggler's, not its work's).
  std::map<int, std::size_t> cheapest;  // pipeline -> its rank of least median cost
  std::vector<double> run_median(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    run_median[i] = median(series[i].per_microbatch_ms);
    const auto [it, first] = cheapest.try_emplace(series[i].pipeline, i);
    if (!first && run_median[i] < run_median[it->second]) it->second = i;
  }
  const auto over_cheapest = [&](std::size_t i) {
    const RankSeries& least = series[cheapest[series[i].pipeline]];
    std::map<std::int64_t, double> cost_of;
    for (std::size_t k = 0; k < least.steps.size(); ++k)
      cost_of[least.steps[k]] = least.per_microbatch_ms[k];
    std::vector<double> ratios;
    for (std::size_t k = 0; k < series[i].steps.size(); ++k)
      if (const auto c = cost_of.find(series[i].steps[k]); c != cost_of.end() && c->second > 0)
        ratios.push_back(series[i].per_microbatch_ms[k] / c->second);
    return ratios.empty() ? 1.0 : percentile(ratios, 0.2);
  };
  for (const auto& [stage, members] : by_stage) {
    Imbalance im{stage, {}, std::numeric_limits<double>::max()};
    for (const std::size_t i : members) {
      im.ratio = std::min({im.ratio, out.baseline_relative[i], over_cheapest(i)});
      im.ranks.push_back(series[i].rank);
    }
    if (im.ratio >= kImbalanceThreshold) out.imbalance.push_back(im);
  }
  std::sort(out.imbalance.begin(), out.imbalance.end(),
            [](const Imbalance& a, const Imbalance& b) { return a.ratio > b.ratio; });
  return out;
}

}  // namespace lens::analysis
