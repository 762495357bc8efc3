// StepGraph: one data-parallel replica's step as a dependency graph
// (docs/analysis.md, "The graph of a step"): the compute segments of every
// stage (forward and backward of each microbatch, per model chunk), each
// rank's gradient all-reduce and optimizer step, in schedule order on each
// rank, joined across ranks by the messages between them.
//
// A compute on stage s depends on the node before it on its rank and on
// one neighbour's compute: forward of m on forward of m on s-1 (the
// activation), backward of m on backward of m on s+1 (the gradient); in the
// interleaved schedule the first stage's chunk v on the last stage's chunk
// v-1, and back. Its input's measured arrival is the end of the receive
// that brought it (transfer_waits.h), or the neighbour's compute end when
// the run has no p2p spans.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "pipeline_view.h"
#include "transfer_waits.h"

namespace lens::analysis {

enum class NodeKind { kForward, kBackward, kAllReduce, kOptimizer };

struct GraphNode {
  NodeKind kind = NodeKind::kForward;
  bool compute() const { return kind == NodeKind::kForward || kind == NodeKind::kBackward; }
  bool backward() const { return kind == NodeKind::kBackward; }
  std::int64_t microbatch = -1;  // -2 for the all-reduce and optimizer
  int chunk = 0;                 // dl.virtual_pipeline.rank (interleaved schedule)
  int stage = -1, rank = -1;
  std::int64_t start = 0, end = 0;
  int local = -1;  // the node before it on its rank, or -1
  int cross = -1;  // the neighbour's compute it needs, or -1
  // When the cross node's output arrived (cross >= 0): the end of the
  // receive that brought it, else the neighbour's compute end. With a
  // receive: when it was posted, and when the matched send began (-1:
  // unmatched).
  std::int64_t arrival = 0;
  bool measured_arrival = false;
  std::int64_t posted = 0, sent = -1;
  // The receive waited for the send (late sender), so the neighbour, not
  // this rank, released the node; without a receive span: the neighbour
  // ended after this rank's previous node.
  bool released_by_neighbour(const std::vector<GraphNode>& nodes) const;
};

struct StepGraph {
  std::vector<GraphNode> nodes;                   // by stage, then start
  std::int64_t window_start = 0, window_end = 0;  // the forward-backward window
  std::map<int, std::int64_t> rank_start;         // stage -> when its schedule began
  std::map<int, int> rank_of;                     // stage -> rank
  std::map<int, double> step_ms;                  // stage -> its step span's length
  int last = -1;                                  // the node that ends last
  int last_compute = -1;  // the forward or backward that ends last: its replica's arrival at
                          // the data-parallel sync
  // Per stage, its gradient sync (megatron.grads.all_reduce spans): when
  // the rank arrived (the first one's start) and when it left (the last
  // one's end); stages without one are absent.
  std::map<int, std::pair<std::int64_t, std::int64_t>> sync;
  std::map<int, std::int64_t> step_end;  // stage -> when its step span ended
  int chunks = 1;  // model chunks per stage
  // Computes that began before the neighbour's compute they need had ended
  // (clocks disagree beyond what alignment corrected): counted, not hidden.
  int impossible_edges = 0;
  TransferWaits waits;
  bool empty() const { return nodes.empty() || window_start > window_end; }
  // When this replica arrived at the data-parallel sync: its last compute's
  // end (its last node's without computes). Not for an empty graph.
  std::int64_t arrival_ns() const {
    return nodes[static_cast<std::size_t>(last_compute >= 0 ? last_compute : last)].end;
  }
};

// The graph of one replica's ranks (stages outside [0, stages) are left out).
StepGraph build_step_graph(const std::vector<const StepOnRank*>& ranks, int stages);

}  // namespace lens::analysis
