/// \file
/// LiveStragglerRule: stragglers named while the job runs (docs/metrics.md).
///
/// Every N steps the ranks meet and bring one figure each: the median of
/// their compute (forward + backward) over the window of steps since the
/// last meeting. Every rank, or only the one that reports, applies the same
/// rule to the same gathered figures, so they agree on the verdict. A rank
/// is a straggler when its figure is `threshold` times (1.5 by default)
/// either its own first window's (it slowed down) or the median of the
/// ranks of its own stage, in other replicas or TP ranks (it is slower than
/// ranks doing the same work). A stage that simply does more work is not
/// named: its ranks are as slow as its other ranks and as they were from
/// the start (that is imbalance, which `lens analyze` reports). A rank is
/// named when it becomes a straggler, again when it gets markedly worse
/// (`threshold` times the factor it was named at: a rank that noise named
/// at 1.6x and that then slows down 4x is named at 4x), and again after it
/// recovered and slowed down anew. The score of a rank is the larger of
/// the two ratios.
///
/// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lens {

struct RankCoordinates {
  int rank = 0, stage = 0, replica = 0, tensor = 0;
};

struct LiveStraggler {
  RankCoordinates who;
  std::int64_t step = 0;       ///< the last step of the window that named it
  double factor = 0;           ///< its score
  bool against_peers = false;  ///< the factor is against its stage's peers (else its own start)
  /// "rank 3 (stage 1, replica 0, tensor rank 1) is a straggler at step 19:
  /// 3.9x its stage's other ranks"
  std::string describe() const;
};

class LiveStragglerRule {
 public:
  /// `ranks[i]` is rank i's coordinates. std::invalid_argument when a rank
  /// is not where its index says or the threshold is not above 1.
  explicit LiveStragglerRule(std::vector<RankCoordinates> ranks, double threshold = 1.5);

  /// The figures of a window that ended at `step`, one per rank (ms; a
  /// value that is not a positive number counts as no figure): the ranks
  /// newly named.
  std::vector<LiveStraggler> observe(std::int64_t step, const std::vector<double>& window_ms);

  /// A rank's score at the last window (0 before any).
  double score(int rank) const { return scores_.at(static_cast<std::size_t>(rank)); }

 private:
  std::vector<RankCoordinates> ranks_;
  double threshold_;
  std::vector<double> baseline_;  // each rank's first figure (0: none yet)
  std::vector<double> scores_;
  std::vector<double> named_;  // the factor each rank was last named at (0: not named)
};

}  // namespace lens
