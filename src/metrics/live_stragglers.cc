// The live straggler rule (lens/live_stragglers.h).
#include "lens/live_stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace lens {
namespace {

bool usable(double v) { return std::isfinite(v) && v > 0; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::string LiveStraggler::describe() const {
  char line[256];
  std::snprintf(line, sizeof line,
                "rank %d (stage %d, replica %d, tensor rank %d) is a straggler at step %lld: "
                "%.1fx %s",
                who.rank, who.stage, who.replica, who.tensor, static_cast<long long>(step), factor,
                against_peers ? "its stage's other ranks" : "its own first steps");
  return line;
}

LiveStragglerRule::LiveStragglerRule(std::vector<RankCoordinates> ranks, double threshold)
    : ranks_(std::move(ranks)),
      threshold_(threshold),
      baseline_(ranks_.size(), 0),
      scores_(ranks_.size(), 0),
      named_(ranks_.size(), 0) {
  if (!(threshold > 1)) throw std::invalid_argument("live straggler threshold must be above 1");
  for (std::size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].rank != static_cast<int>(i))
      throw std::invalid_argument("live straggler rule: rank " + std::to_string(ranks_[i].rank) +
                                  " given at index " + std::to_string(i));
}

std::vector<LiveStraggler> LiveStragglerRule::observe(std::int64_t step,
                                                      const std::vector<double>& window_ms) {
  std::vector<LiveStraggler> named;
  if (window_ms.size() != ranks_.size()) return named;  // not this job's figures
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    const double v = window_ms[r];
    if (!usable(v)) continue;
    const bool first = baseline_[r] == 0;
    if (first) baseline_[r] = v;
    const double own = v / baseline_[r];
    std::vector<double> peers;
    for (std::size_t p = 0; p < ranks_.size(); ++p)
      if (p != r && ranks_[p].stage == ranks_[r].stage && usable(window_ms[p]))
        peers.push_back(window_ms[p]);
    const double against = peers.empty() ? 0 : v / median(peers);
    scores_[r] = std::max(own, against);
    if (scores_[r] >= threshold_) {
      // Named when it becomes a straggler, and again when it gets markedly
      // worse (the threshold times the factor it was named at).
      if (named_[r] == 0 || scores_[r] >= named_[r] * threshold_) {
        named.push_back({ranks_[r], step, scores_[r], against >= own});
        named_[r] = scores_[r];
      }
    } else {
      named_[r] = 0;  // recovered: may be named again
    }
  }
  return named;
}

}  // namespace lens
