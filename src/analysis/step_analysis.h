// StepAnalysis: one step of a pipeline explained (docs/analysis.md): its
// dependency graph across ranks (step_graph.h), the critical path through
// it, the waits measured from the transfer spans (transfer_waits.h), each
// stage's time split into columns that add up to its step, its idle time
// by cause, and what the step would take with a stage at another speed
// (step_replay.h). Times are the views' (aligned to rank 0's clock unless
// --raw-clock).
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collective_waits.h"
#include "pipeline_view.h"
#include "step_graph.h"
#include "transfer_waits.h"

namespace lens::analysis {

// Which chain of stages a rank is in: its data-parallel replica and its
// tensor-parallel rank (each TP rank of a stage sends to the same TP rank of
// the next stage, so a (replica, tensor) pair is one pipeline). Its TP
// peers (the same stage and replica) run their own pipelines; its replicas
// (the same stage and tensor) meet it at the gradient sync.
struct PipelineKey {
  int replica = 0, tensor = 0;
  auto operator<=>(const PipelineKey&) const = default;
};

// Each rank's pipeline, from its file's dl.data_parallel.rank and
// dl.tensor_parallel.rank (0 when absent).
std::map<int, PipelineKey> pipelines_of(const Run& run);

// One stage's figures for one step (milliseconds).
struct StageFigures {
  int rank = -1, stage = -1, replica = 0, tensor = 0;
  PipelineKey pipeline() const { return {replica, tensor}; }
  int microbatches = 0;  // forward spans seen
  double forward_ms = 0, backward_ms = 0;
  double all_reduce_ms = 0, optimizer_ms = 0;
  // The rank's step span, split so that the columns add up exactly:
  // step = compute + late sender + late receiver + transfer + collective
  // wait + sync wait + rest.
  double step_ms = 0;
  double compute_ms = 0;        // forward + backward, less the TP collectives inside them
  double late_sender_ms = 0;    // its receives waiting for the send to begin
  double late_receiver_ms = 0;  // its sends blocked until the receive was posted
  // The rest of its p2p spans and of its TP collectives: the transfers
  // themselves.
  double transfer_ms = 0;
  // At its tensor-parallel collectives (collective_waits.h): their whole
  // time, and of it the wait for the last TP peer to arrive; the peer that
  // held it longest (-1: none).
  double collective_ms = 0;
  double collective_wait_ms = 0;
  std::map<int, double> collective_waited_for_ms;  // TP rank -> the wait for it
  int collective_last_peer() const { return longest_waited_for(collective_waited_for_ms); }
  // For the last replica of its stage and tensor rank at the data-parallel
  // gradient sync, wherever it surfaced (replica_waits.h); that replica
  // (-1: no other replica and no sync); and the span it waited in (or
  // "untraced"; empty: no wait).
  double sync_wait_ms = 0;
  int sync_last_replica = -1;
  std::string sync_wait_at;
  double rest_ms = 0;           // the rest of the step (optimizer, the sync itself, framework)
  int unmatched_transfers = 0;  // receives or sends without their other half
  // This stage's compute (and optimizer) on its replica's path (the step's
  // path in the replica that set the step), and its share of that path.
  double critical_ms = 0;
  double critical_share = 0;
  double window_ms = 0;          // the replica's forward-backward window
  double idle_ms = 0;            // window - compute
  double warmup_idle_ms = 0;     // before this stage's first compute
  double cooldown_idle_ms = 0;   // after its last compute
  double imbalance_idle_ms = 0;  // between them, waiting on a slower neighbour (late sender)
  double transfer_idle_ms = 0;   // between them, the rest (transfers, p2p overhead)
  double schedule_idle_ms = 0;   // what 1F1B idles with the same work balanced: (P-1)(f+b)
  // What-if (step_replay.h): how much more compute per step this stage
  // could take before the step lengthens (slack); and the step's change
  // (ms, negative = shorter) with this stage's compute per microbatch at
  // the replica's median stage's (0 when it is not above it).
  double slack_ms = 0;
  double gain_at_median_ms = 0;
};

// A stretch of the critical path: a compute node, or the transfer into it.
struct PathSegment {
  enum class Kind { kForward, kBackward, kTransfer, kAllReduce, kOptimizer } kind = Kind::kForward;
  int stage = -1, rank = -1;
  std::int64_t microbatch = -1;
  double start_ms = 0, end_ms = 0;  // from the window's start
  std::int64_t start_ns = 0, end_ns = 0;
};

// One microbatch's compute on one stage: its forwards and backwards (every
// model chunk's) together.
struct MicrobatchCost {
  int replica = 0, stage = -1, tensor = 0;
  std::int64_t microbatch = -1;
  double ms = 0;
};

struct StepAnalysis {
  std::int64_t step = 0;
  int stages = 0, microbatches = 0;
  double step_ms = 0;                 // the longest step span of the replica analysed
  double critical_path_ms = 0;        // from the path's first start to its last end
  double critical_compute_ms = 0;     // forward, backward and optimizer on the path
  double critical_all_reduce_ms = 0;  // data-parallel gradient all-reduce on the path
  double critical_transfer_ms = 0;    // neighbour's compute end to the measured arrival
  // The rest of the path: a stage's own time between its computes (p2p
  // calls, the framework, scheduling).
  std::vector<PathSegment> critical_path;    // in time order
  std::vector<StageFigures> stages_figures;  // by replica, then stage
  std::vector<WaitInterval> waits;           // every replica's
  int impossible_edges = 0;                  // step_graph.h, every replica's
  bool complete = false;                     // every stage had its compute spans
  // The replica that set the step: its compute ended last, so it arrived
  // last at the gradient sync; the step's path runs through it.
  int critical_replica = 0;
  // And its pipeline the path runs through (its TP rank): TP peers leave
  // each collective together, so with TP collectives it is the peer that
  // waited least at them (the one the others waited for), else the one
  // whose compute ended last.
  int critical_tensor = 0;
  // Each pipeline's own path (the step's for the critical one).
  std::map<PipelineKey, double> pipeline_path_ms;
  std::map<PipelineKey, StepGraph> graphs;       // by pipeline, for replays
  std::vector<MicrobatchCost> microbatch_costs;  // by replica, stage, microbatch
  CollectiveWaits collectives;                   // the TP collectives, every replica's
};

// The step of `view` (one StepView of a PipelineView), with each rank's
// pipeline (dl.data_parallel.rank and dl.tensor_parallel.rank; 0 when
// absent). The critical path is the one of the pipeline whose compute ends
// last, walked back from the end of its rank that computed last (through
// its sync, once).
StepAnalysis analyze_step(const StepView& step, int stages,
                          const std::map<int, PipelineKey>& pipeline_of);

}  // namespace lens::analysis
