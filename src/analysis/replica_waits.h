// Replica waits: how long each rank of a step waited for the data-parallel
// replica that arrived last at the gradient sync, wherever that wait
// surfaced (docs/analysis.md, "Waits at the gradient sync").
//
// The replicas of a stage and tensor rank meet at the gradient sync, but a
// rank does not always wait inside the sync's span: on the first stage the
// wait may fall in a collective before it (the embedding gradients'
// all-reduce with the last stage), on the last stage in an untraced gap
// before its first collective, and behind an asynchronous sync in whatever
// synchronises next (the optimizer). So the wait is measured on each
// rank's own clock over the tail of its step: from the end of its last own
// work (its last forward, backward or p2p span) to the end of its step
// span. The replica of the same stage and tensor rank whose tail is
// shortest is the one the others waited for (it arrived last, and its tail
// is what the sync and the optimizer take without waiting):
//   wait of rank r = tail(r) - min over its stage's replicas of tail
// and it surfaced where r's tail exceeds that replica's most: the span
// (innermost, by name) or "untraced" (no span of the rank covers it).
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collective_waits.h"

namespace lens::analysis {

inline constexpr const char* kUntraced = "untraced";

struct ReplicaWait {
  std::int64_t wait_ns = 0;
  int last_replica = -1;  // the replica it waited for; its own when it arrived last
  int replicas = 0;       // of its stage and tensor rank in the step
  std::string where;      // the span name (or kUntraced) it waited in; empty: no wait
};

// The tail of one rank's step: its length, and how it splits by the
// innermost span covering each instant (kUntraced where none does).
struct StepTail {
  std::int64_t ready_ns = 0;  // the end of its last own work
  std::int64_t length_ns = 0;
  std::map<std::string, std::int64_t> by_span;
};

// None when the rank did no own work in the step.
std::optional<StepTail> step_tail(const StepOnRank& rank);

// By rank, for every peer whose step has own work.
std::map<int, ReplicaWait> replica_waits(const std::vector<TensorPeer>& peers);

}  // namespace lens::analysis
