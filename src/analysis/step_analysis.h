// StepAnalysis: one step of a pipeline explained (docs/analysis.md): its
// dependency graph across ranks, the critical path through it, the wait at
// every receive, and each stage's idle time split by cause.
//
// The graph's nodes are the compute segments of the step, the
// megatron.microbatch.forward / .backward spans (with dl.microbatch_id) of
// every stage of one replica, and each rank's data-parallel gradient
// all-reduce (megatron.grads.all_reduce) and optimizer step. Each node
// depends on the node before it on its rank (the schedule's order); a
// forward or backward also on one node of a neighbour: forward of m on s on
// forward of m on s-1 (the activation), backward of m on s on backward of m
// on s+1 (the gradient). An all-reduce waits for the other replicas, whose
// graphs are their own: its time is on the path as it is. Times are the views' (aligned to
// rank 0's clock unless --raw-clock).
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "pipeline_view.h"

namespace lens::tools {

// One stage's figures for one step (milliseconds).
struct StageFigures {
  int rank = -1, stage = -1, replica = 0;
  int microbatches = 0;  // forward spans seen
  double forward_ms = 0, backward_ms = 0;
  double all_reduce_ms = 0, optimizer_ms = 0;
  double compute_ms = 0;         // forward + backward
  double critical_ms = 0;        // this stage's compute (and optimizer) on the critical path
  double critical_share = 0;     // critical_ms / the critical path's length
  double late_sender_ms = 0;     // waits at receives for a neighbour's compute to finish
  double transfer_ms = 0;        // waits at receives after the neighbour had finished
  double late_receiver_ms = 0;   // this stage's outputs waiting for a busy neighbour
  double window_ms = 0;          // the replica's forward-backward window
  double idle_ms = 0;            // window - compute
  double warmup_idle_ms = 0;     // before this stage's first compute
  double cooldown_idle_ms = 0;   // after its last compute
  double imbalance_idle_ms = 0;  // between them, waiting on a slower neighbour
  double transfer_idle_ms = 0;   // between them, the rest (transfers, p2p overhead)
  double schedule_idle_ms = 0;   // what 1F1B idles with the same work balanced: (P-1)(f+b)
};

// A stretch of the critical path: a compute node, or the transfer into it.
struct PathSegment {
  enum class Kind { kForward, kBackward, kTransfer, kAllReduce, kOptimizer } kind = Kind::kForward;
  int stage = -1, rank = -1;
  std::int64_t microbatch = -1;
  double start_ms = 0, end_ms = 0;  // from the window's start
  std::int64_t start_ns = 0, end_ns = 0;
};

// A wait at a receive (the waits section of docs/analysis.md), for drawing.
struct WaitInterval {
  int rank = -1, stage = -1;
  bool late_sender = true;  // else transfer
  std::int64_t start_ns = 0, end_ns = 0;
};

struct StepAnalysis {
  std::int64_t step = 0;
  int stages = 0, microbatches = 0;
  double step_ms = 0;                 // the longest step span of the replica analysed
  double critical_path_ms = 0;        // from the path's first start to its last end
  double critical_compute_ms = 0;     // forward, backward and optimizer on the path
  double critical_all_reduce_ms = 0;  // data-parallel gradient all-reduce on the path
  double critical_transfer_ms = 0;    // neighbour's compute end to the next compute's start
  // The rest of the path: a stage's own time between its computes (p2p
  // calls, the framework, scheduling).
  std::vector<PathSegment> critical_path;    // in time order
  std::vector<StageFigures> stages_figures;  // by replica, then stage
  std::vector<WaitInterval> waits;           // every replica's
  bool complete = false;                     // every stage had its compute spans
};

// The step of `view` (one StepView of a PipelineView), with each rank's
// replica (dl.data_parallel.rank; 0 when absent). The critical path is the
// one of the replica whose compute ends last.
StepAnalysis analyze_step(const StepView& step, int stages, const std::map<int, int>& replica_of);

}  // namespace lens::tools
