/// \file
/// StepMeeting: every few steps the ranks of a job meet in one all-gather
/// and every rank reaches the same verdicts from the same figures
/// (docs/metrics.md, docs/tail-selection.md):
///   - live stragglers: each rank's median compute over the window, judged
///     by LiveStragglerRule; rank 0 puts a `lens.straggler` event on its
///     step span for each rank named;
///   - tail selection (LENS_TAIL_SELECTION, agreed at start-up): each rank's
///     time of each held step, the same steps kept on every rank
///     (TailSelector), and a `lens.tail_selection` span saying why;
///   - words a rank adds (its encoded step metrics, for a rank 0 that
///     serves every rank's metrics), handed back per rank.
/// lens-train calls it over its c10d world group, and Python loops through
/// lens.distributed.StepMeeting over a torch.distributed group (the example
/// trainer python/examples/pp_train.py does).
///
///   lens::StepMeeting meeting(telemetry, world, {.live_every = 5, .ranks = places});
///   for (step ...) {
///     ... the step, its span open
///     if (meeting.step_done(step, compute_ms, step_seconds))
///       meeting.meet(step, &step_span);
///   }
///   meeting.finish(last_step);  // the last, partial window
///
/// Meetings are collectives over the communicator: every rank meets at the
/// same steps (the same options and steps everywhere). A failed or timed-out
/// all-gather writes a failure record and throws CommError.
///
/// Thread safety: the training loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lens/communicator.h"
#include "lens/live_stragglers.h"
#include "lens/span.h"
#include "lens/tail_selection.h"
#include "lens/telemetry.h"

namespace lens {

struct StepMeetingOptions {
  /// Live stragglers every this many steps (0: off); the meetings' cadence
  /// when set, else every 10 steps when tail selection or `extra_words`
  /// asks for meetings.
  int live_every = 0;
  /// Every rank's place, rank i at index i (the names the live rule gives);
  /// required when live_every > 0, one per rank of the communicator.
  std::vector<RankCoordinates> ranks;
  /// Words this rank adds to each meeting (the same count on every rank at
  /// a meeting), handed back per rank in MeetingOutcome::words. Set: the
  /// job meets every 10 steps even without the live rule or tail selection.
  std::function<std::vector<std::int64_t>()> extra_words;
  /// Unset: the telemetry's collective timeout, else 300 s.
  std::optional<std::chrono::milliseconds> timeout;
  /// Who a failure record names ("lens-train: rank 3"); default "lens: rank R".
  std::string who;
};

/// What a meeting brought, the same on every rank.
struct MeetingOutcome {
  /// The ranks the live rule named at this meeting.
  std::vector<LiveStraggler> stragglers;
  /// Every rank's straggler score after it (empty without the live rule).
  std::vector<double> scores;
  /// Every rank's extra words (empty without extra_words).
  std::vector<std::vector<std::int64_t>> words;
};

class StepMeeting {
 public:
  /// telemetry may be null (not traced: no tail selection). ConfigError for
  /// options that cannot work (live_every without a place for every rank).
  StepMeeting(Telemetry* telemetry, Communicator& world, StepMeetingOptions options);
  ~StepMeeting();
  StepMeeting(const StepMeeting&) = delete;
  StepMeeting& operator=(const StepMeeting&) = delete;

  /// Steps between meetings (0: it never meets).
  int every() const { return every_; }
  /// True when steps are held and chosen at meetings (the step's span is
  /// then to be held: Telemetry::hold_step).
  bool tail_selection() const { return selector_ != nullptr; }
  /// Non-empty when the hold keeps fewer steps than a window has (the
  /// steps past it are not held, and lost if chosen): a line to print.
  std::string hold_warning() const;

  /// A step done: this rank's compute in it (ms) and its time (s). True
  /// when the window is full: meet() is due now, on every rank.
  bool step_done(std::uint64_t step, double compute_ms, double step_seconds);
  /// The meeting that ends the window at `step` (a collective); rank 0's
  /// straggler events go on `step_span` when given.
  MeetingOutcome meet(std::int64_t step, Span* step_span);
  /// After the last step (every rank ran the same steps): the last, partial
  /// window's tail choice and the extra words, no live verdict. A
  /// collective when steps are held or extra words asked; nullopt when no
  /// meeting was needed.
  std::optional<MeetingOutcome> finish(std::int64_t last_step);

 private:
  MeetingOutcome gather(std::int64_t step, Span* step_span, bool last);
  void settle(const std::vector<std::vector<double>>& seconds);

  Telemetry* telemetry_;
  Communicator& world_;
  StepMeetingOptions options_;
  std::chrono::milliseconds timeout_;
  int every_ = 0;
  std::unique_ptr<LiveStragglerRule> rule_;
  std::unique_ptr<TailSelector> selector_;
  std::vector<double> window_compute_ms_;  // this rank's compute of each step since the last meeting
  std::vector<std::uint64_t> window_steps_;  // the held steps since the last meeting
  std::vector<double> window_seconds_;       // this rank's time of each
};

}  // namespace lens
