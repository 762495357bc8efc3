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
// Thread safety: plain functions.
#pragma once

#include <cstdint>
#include <map>

#include "step_graph.h"

namespace lens::analysis {

// The end of the replica's last node, with each stage's forward and
// backward durations multiplied by `scale_by_stage` (absent: 1).
std::int64_t replay_end(const StepGraph& g, const std::map<int, double>& scale_by_stage);

// How much more time per step (ms) the stage's compute could take, spread
// over its microbatches, before the replica's replayed end passes
// `deadline_ns` (to the nanosecond). the step's end, which another replica may set.
double slack_ms(const StepGraph& g, int stage, std::int64_t deadline_ns);

}  // namespace lens::analysis
