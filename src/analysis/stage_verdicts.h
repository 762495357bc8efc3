// Stage verdicts: which ranks are stragglers and which stages are simply
// heavier (docs/analysis.md, "Stragglers and imbalance").
//
// The two call for different fixes (drain a node; move a layer), so they
// are told apart:
// - imbalance: a stage whose compute per microbatch is at least
//   kImbalanceThreshold times its replica's fastest stage's from the first
//   steps on (the median over the first kBaselineSteps steps), in every
//   replica. It is the stage's: its model part does more work, or a cause
//   every replica shares.
// - straggler: a rank at least kStragglerThreshold times slower than what
//   it should cost, for kConsecutiveSteps steps in a row, either
//   * against its own baseline (its median over the first kBaselineSteps
//     steps), relative to how the other ranks of its replica moved against
//     theirs in the same step (every other rank when it is alone in its
//     replica): a machine that slows everyone is nobody's straggler, and
//     microbatches that carry more work slow every stage of their replica
//     alike; or
//   * against its peers: the median of the ranks doing the same work (the
//     same stage in the other replicas) in the same step.
//   It is named with the step where the run of slow steps began.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lens::analysis {

inline constexpr double kStragglerThreshold = 1.5;
inline constexpr double kImbalanceThreshold = 1.25;
inline constexpr std::size_t kBaselineSteps = 3;
inline constexpr std::size_t kConsecutiveSteps = 3;

// One rank's compute per microbatch, step by step. `pipeline` numbers the
// chains of stages (a replica's tensor-parallel rank): a rank's peers are
// the same stage in the other pipelines, "its replica" is its pipeline.
struct RankSeries {
  int rank = -1, stage = -1, pipeline = 0;
  std::vector<std::int64_t> steps;
  std::vector<double> per_microbatch_ms;
};

struct Straggler {
  int rank = -1, stage = -1, pipeline = 0;
  std::int64_t since_step = -1;
  double ratio = 0;  // median over its slow steps of its score
  enum class Against { kOwnBaseline, kPeers } against = Against::kOwnBaseline;
};

struct Imbalance {
  int stage = -1;
  std::vector<int> ranks;  // the stage's rank in every replica
  double ratio = 0;        // the smallest over replicas of the baseline relative score
};

struct Verdicts {
  std::vector<Straggler> stragglers;
  std::vector<Imbalance> imbalance;
  // Per series (in the order given): its baseline compute per microbatch
  // (ms), the cost it is judged against in each step (its own baseline or
  // its peers' median, the lower), and its relative score over its first
  // steps against its replica's fastest stage.
  std::vector<double> baseline_ms;
  std::vector<std::vector<double>> expected_ms;
  std::vector<double> baseline_relative;
};

Verdicts judge_stages(const std::vector<RankSeries>& series);

const char* against_name(Straggler::Against a);

}  // namespace lens::analysis
