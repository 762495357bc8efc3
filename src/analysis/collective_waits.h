// Collective waits: one step's tensor-parallel collectives (megatron.tp.*
// spans, inside the computes) matched across the TP peers of each stage
// and replica, and the time each peer waited at each until the last one
// arrived: Scalasca's "wait at N x N" (docs/analysis.md, "Tensor
// parallelism").
//
// Every TP peer calls the collectives in the same order, so a peer's k-th
// collective of a step (dl.collective.sequence, else its k-th by start) is
// the same collective as every other peer's k-th. For one collective with
// arrivals a_t (the spans' starts) and last arrival A = max a_t:
//   wait at collective on peer t = clamp(A - a_t, 0, its span's duration)
// and the peer that arrived last held it. The rest of the span is the
// collective's own time (data movement), counted as transfer.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "pipeline_view.h"
#include "transfer_waits.h"

namespace lens::analysis {

struct RankCollectives {
  std::int64_t collective_ns = 0;          // its TP collectives' whole time
  std::int64_t in_compute_ns = 0;          // of it, inside its forward and backward spans
  std::int64_t wait_ns = 0;                // of it, waiting for the last peer
  int collectives = 0, unmatched = 0;      // unmatched: no peer recorded the same collective
  std::map<int, std::int64_t> waited_for;  // TP rank -> this rank's wait for it
};

// Of the TP peers a rank waited for (TP rank -> wait), the one it waited
// for longest (-1: none).
template <typename T>
int longest_waited_for(const std::map<int, T>& waited_for) {
  int peer = -1;
  T longest{};
  for (const auto& [tensor, wait] : waited_for)
    if (wait > longest) {
      longest = wait;
      peer = tensor;
    }
  return peer;
}

struct CollectiveWaits {
  std::map<int, RankCollectives> by_rank;
  std::vector<WaitInterval> intervals;  // kind kCollective, peer = the last to arrive
  bool any() const { return !by_rank.empty(); }
};

// One TP peer's step: its rank's spans, stage, replica and TP rank.
struct TensorPeer {
  const StepOnRank* step = nullptr;
  int replica = 0, tensor = 0;
};

CollectiveWaits collective_waits(const std::vector<TensorPeer>& ranks);

}  // namespace lens::analysis
