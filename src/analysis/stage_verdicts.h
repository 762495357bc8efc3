// Stage verdicts: which ranks are stragglers and which stages are simply
// heavier (docs/analysis.md, "Stragglers and imbalance").
//
// The two call for different fixes (drain a node; move a layer), so they
// are told apart:
// - imbalance: a stage whose compute per microbatch is at least
//   kImbalanceThreshold times its replica's fastest stage's from the first
//   steps on (the median over the first kBaselineSteps steps) and over the
//   run (the 20th percentile over the steps of its cost over the cheapest
//   stage's in the same step: balanced stages' noise puts either above the
//   other half the time), in every replica. It is the stage's: its model
//   part does more work, or a cause every replica shares.
// - straggler: a rank at least kStragglerThreshold times slower than what
//   it should cost, for steps_required() steps in a row (half the steps
//   judged, at least 3, at most 10: 5 of a 12-step run's 9), either
//   * against its own baseline (its median over the first kBaselineSteps
//     steps), relative to how the other ranks of its replica moved against
//     theirs in the same step (every other rank when it is alone in its
//     replica): a machine that slows everyone is nobody's straggler, and
//     microbatches that carry more work slow every stage of their replica
//     alike; or
//   * against its peers: the median of the ranks doing the same work (the
//     same stage in the other replicas) in the same step.
//   It is named with the step where the run of slow steps began, only when
//   its slowdown stands out of the run's own noise. Its slowdown: against
//   its own baseline, the median of its steps from there over the median of
//   its steps before (a figure of many steps, which one noisy baseline step
//   does not move), and that over the same of the other ranks of its
//   replica, the smaller (it moved, and more than the others did);
//   against its peers, the median over its slow steps of its cost over
//   theirs. The noise, the larger of: the 90th percentile, over the other
//   ranks that are not slow themselves, of each step's compute over that
//   rank's median on its side of the slowdown's first step (the level the
//   others move to when one rank's slow compute frees the cores they
//   shared is not noise); and of the same slowdown figure of those ranks,
//   from the same step (how far a rank that is not slow moves by chance).
//   The slowdown must be at least kStragglerThreshold and kNoiseMargin
//   times the noise. Four processes sharing two cores vary 1.5-2x for a few
//   steps; a rank that varies no more than they do is not named, and said
//   so (Verdicts::not_named) with the evidence.
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
inline constexpr std::size_t kConsecutiveSteps = 3;  // the least run of slow steps
inline constexpr std::size_t kMostStepsRequired = 10;
inline constexpr double kStepsRequiredShare = 0.5;
inline constexpr double kNoiseMargin = 1.5;

// The run of slow steps a straggler needs, of `judged` steps judged (those
// after the baseline): half of them, at least kConsecutiveSteps, at most
// kMostStepsRequired.
std::size_t steps_required(std::size_t judged);

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
  double ratio = 0;  // its slowdown (above: against its own steps before, or its peers)
  enum class Against { kOwnBaseline, kPeers } against = Against::kOwnBaseline;
  std::size_t slow_steps = 0;  // its steps at or above the threshold from since_step on
  std::size_t steps = 0;       // its steps from since_step on
  // The run's noise it was judged against (above; 1 when there is none).
  double noise = 1;
};

struct Imbalance {
  int stage = -1;
  std::vector<int> ranks;  // the stage's rank in every replica
  double ratio = 0;        // the smallest over replicas of the baseline relative score
};

struct Verdicts {
  std::vector<Straggler> stragglers;
  // Ranks slow for steps_required() steps, and by their slowdown, that do
  // not stand out of the run's noise: not named, their evidence kept for
  // the report.
  std::vector<Straggler> not_named;
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
