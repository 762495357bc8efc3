// StepHold: tail selection's hold of recent steps (docs/tail-selection.md).
// Internal header of the core; the batch processor owns one.
//
// A step's trace is held from hold() on: the export thread parks its spans
// here instead of exporting them, until settle() says whether the step is
// kept (its spans exported, and any that end later) or not selected (its
// spans released, counted). Room is bounded: at most max_steps steps wait
// at once (a step past that is refused: its spans are released as they
// come, counted), and their spans' estimated bytes at most max_bytes (a
// step whose span does not fit loses that span and those after it,
// counted). Nothing waits for room, nothing grows past it.
//
// Thread safety: every method takes the hold's mutex; hold() and settle()
// from the training thread, the rest from the export thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lens/batch_options.h"
#include "lens/ids.h"

namespace lens::detail {

struct LiveSpan;

class StepHold {
 public:
  explicit StepHold(StepHoldOptions options) : options_(options) {}
  bool on() const { return options_.max_steps > 0; }

  // The trace of `step` is held from now on.
  void hold(std::uint64_t step, const TraceId& trace);
  // The ranks' choice for these steps (steps not held are ignored).
  void settle(const std::vector<std::uint64_t>& keep, const std::vector<std::uint64_t>& drop);

  // Sorts spans taken from the queue: those to export now go to `out`,
  // those to release (not selected, no room) to `release`, the rest park.
  // Returns how many it released as not selected and as lost for room.
  struct Sorted {
    std::uint64_t not_selected = 0;
    std::uint64_t no_room = 0;
  };
  Sorted sort(const std::vector<LiveSpan*>& taken, std::vector<LiveSpan*>& out,
              std::vector<LiveSpan*>& release);
  // The parked spans of steps settled since the last call: kept ones to
  // `out`, the others to `release` (the count returned).
  std::uint64_t collect_settled(std::vector<LiveSpan*>& out, std::vector<LiveSpan*>& release);
  // At shutdown: the parked spans of steps never settled, to export (they
  // are counted as undecided, exported rather than lost).
  void release_undecided(std::vector<LiveSpan*>& out);

  StepHoldStats stats() const;

  // What a span costs the hold: the record and its strings, estimated.
  static std::size_t approx_bytes(const LiveSpan& span);

 private:
  enum class State { kHeld, kKept, kNotSelected, kRefused };
  struct Step {
    std::uint64_t step = 0;
    TraceId trace;
    State state = State::kHeld;
    bool settled_pending = false;  // settled, its parked spans not collected yet
    bool out_of_room = false;      // a span did not fit: the rest is lost too
    std::vector<LiveSpan*> parked;
    std::size_t bytes = 0;
  };
  struct TraceHash {
    std::size_t operator()(const TraceId& t) const {
      std::uint64_t h = 0;
      for (int i = 0; i < 8; ++i) h = (h << 8) | t.bytes()[static_cast<std::size_t>(8 + i)];
      return static_cast<std::size_t>(h);
    }
  };
  Step* find(const TraceId& trace);

  const StepHoldOptions options_;
  mutable std::mutex mu_;
  std::deque<Step> steps_;  // oldest first; settled ones kept a while for late spans
  std::unordered_map<TraceId, Step*, TraceHash> by_trace_;  // into steps_ (stable addresses)
  std::size_t waiting_ = 0;                                 // steps held and not settled
  std::size_t bytes_ = 0;
  StepHoldStats stats_;
};

}  // namespace lens::detail
