// Step replay: what the step would have taken had some stages computed
// faster or slower (docs/analysis.md, "What fixing it would gain").
//
// The replay walks the step graph with each node's measured relations kept:
// a node starts when both its rank's previous node has ended and its input
// has arrived (the neighbour's end plus the message's measured latency),
// plus the rank's own overhead measured before it; its compute takes its
// measured time times its stage's scale. With every scale 1 it reproduces
// the measured times. Uses the graph only; no clock, no files.
//
// A StepReplay settles once what does not depend on the scale (the order
// the nodes are walked in, what each waits for, its measured overhead and
// latencies); each replay is then one pass over the nodes. The what-ifs
// replay a graph tens of times (slack_ms searches a scale), so this is
// where their time goes.
//
// Thread safety: a StepReplay is read-only after construction; it refers
// to its graph, which must outlive it.
#pragma once

#include <cstdint>
#include <vector>

#include "step_graph.h"

namespace lens::analysis {

class StepReplay {
 public:
  explicit StepReplay(const StepGraph& g);

  // The end of the replica's last node, with the forward and backward
  // durations of `stage` multiplied by `factor` (stage -1: as measured).
  std::int64_t end(int stage = -1, double factor = 1.0) const;

  // How much more time per step (ms) the stage's compute could take, spread
  // over its microbatches, before the replica's replayed end passes
  // `deadline_ns` (to the nanosecond): the step's end, which another
  // replica may set.
  double slack_ms(int stage, std::int64_t deadline_ns) const;

 private:
  // One node, in the order the walk settles them, with what its replay
  // reads: a dependency settled before it is read from the replay's ends
  // (its index), one that is not (a graph that goes round, spans a file
  // got wrong) is its measured end, a constant here, as is a node's
  // measured readiness on its rank when it has no local dependency.
  struct Step {
    int node = -1;
    int stage = -1;
    bool compute = false;
    bool has_cross = false;
    bool measured_arrival = false;
    int local = -1, cross = -1;   // settled dependencies' nodes, else -1
    std::int64_t local_fixed = 0;  // its readiness when `local` is -1
    std::int64_t cross_fixed = 0;  // the cross node's end when `cross` is -1
    std::int64_t overhead = 0;     // its start after its measured readiness
    std::int64_t unscaled = 0;     // its duration as a scale of 1 gives it
    double duration = 0;
    std::int64_t latency = 0;     // arrival after the cross node's end (unmatched or no receive)
    std::int64_t posted_lag = 0;  // posted after its measured readiness (measured arrival)
    std::int64_t sent_lag = 0;    // the send after the cross node's end (measured arrival)
    std::int64_t wire = 0;        // the message's measured time on the wire
  };

  const StepGraph& g_;
  std::vector<Step> steps_;
};

}  // namespace lens::analysis
