/// \file
/// The step check: derived step contexts (LENS_STEP_CONTEXT=derived) are
/// only as good as the step numbers the ranks pass, so every
/// LENS_STEP_VERIFY_STEPS opened steps every rank of the job sends a
/// 48-byte record (its step number, its replica's coordinates, the trace it
/// derived and its sampling decision) in one all-gather and compares them
/// all. A rank at another step, or a replica whose ranks derived different
/// traces, fails every rank alike with StepCheckError naming the ranks and
/// their step numbers. Where the step budget is shared (step_context.h),
/// global rank 0's record carries the budget's next rate.
///
/// The check runs after the same number of opened steps on every rank (it
/// counts StepScopes, not step numbers), so a rank with a wrong step number
/// still meets the others in the same collective and nobody hangs.
///
/// Thread safety: pure functions, and run_step_check is a collective.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "lens/carrier.h"
#include "lens/communicator.h"
#include "lens/ids.h"
#include "lens/parallel_layout.h"
#include "lens/step_budget.h"

namespace lens {

/// The ranks disagree on the step or its context; thrown on every rank.
class StepCheckError : public CommError {
 public:
  explicit StepCheckError(const std::string& message) : CommError(message) {}
};

inline constexpr std::size_t kStepCheckRecordBytes = 48;

/// One rank's part of a step check.
struct StepCheckRecord {
  std::uint64_t step = 0;
  /// The pipeline the rank's trace belongs to: the global rank of its
  /// first stage (pipeline scope; -1 in world scope, where every rank
  /// shares one trace).
  int pipeline = -1;
  TraceId trace_id;
  bool sampled = false;
  /// Micro-tokens per step for a shared step budget (global rank 0's is
  /// used); 0 when there is none.
  std::uint64_t budget_rate = 0;
  friend bool operator==(const StepCheckRecord&, const StepCheckRecord&) = default;
};

std::array<std::uint8_t, kStepCheckRecordBytes> encode_step_check(const StepCheckRecord& record);

/// Compares every rank's record (concatenated in rank order) and returns
/// them decoded. Throws StepCheckError on a mismatch, naming the ranks and
/// their step numbers, or on records that are not whole or not step check
/// records (the ranks' collectives are then out of order).
std::vector<StepCheckRecord> compare_step_checks(int my_rank,
                                                 std::span<const std::uint8_t> records);

/// When a training loop's step checks are due, and the record it sends:
/// one per training loop (StepTrace's; the Python package's per process).
/// Checks are due at opened steps 0, N, 2N, ... (N = LENS_STEP_VERIFY_STEPS;
/// 0: never). Rank 0 of the check measures the steps' pace between its
/// checks, from which the shared step budget's next rate follows.
class StepCheckSchedule {
 public:
  explicit StepCheckSchedule(std::uint32_t every = 0) : every_(every) {}
  /// True when the step being opened is checked.
  bool due() const { return every_ > 0 && opened_ % every_ == 0; }
  /// This rank's record for the step being opened: `derived` is its
  /// derived context (nullopt in `broadcast` mode), `pipeline` its
  /// pipeline's first global rank in `pipeline` scope (nullopt in `world`
  /// scope), `check_rank` its rank in the check's communicator, `budget` the
  /// step budget it spends.
  StepCheckRecord record(std::uint64_t step, const std::optional<StepCarrier>& derived,
                         std::optional<int> pipeline, int check_rank, const StepBudget& budget,
                         std::int64_t now_ns);
  /// After a check that passed: the budget takes rank 0's rate. Counted in
  /// pipeline_stats().step_checks.
  static void accept(const std::vector<StepCheckRecord>& all, StepBudget& budget);
  /// The whole check of the step being opened, as every caller runs it when
  /// due(): this rank's record (now), run_step_check over `comm`, accept.
  /// Throws CommError if the all-gather fails, StepCheckError on a mismatch.
  void check(Communicator& comm, std::uint64_t step, const std::optional<StepCarrier>& derived,
             std::optional<int> pipeline, StepBudget& budget, std::chrono::milliseconds timeout);
  /// Call once per opened step, after its check.
  void opened() { ++opened_; }

 private:
  std::uint32_t every_;
  std::uint64_t opened_ = 0;
  std::int64_t window_start_ns_ = -1;
  std::uint64_t window_start_ = 0;
};

/// The collective: one all-gather of every rank's record, then
/// compare_step_checks. Throws CommError if the all-gather fails.
std::vector<StepCheckRecord> run_step_check(Communicator& comm, const StepCheckRecord& mine,
                                            std::chrono::milliseconds timeout);

}  // namespace lens
