// Transfer waits: the p2p spans of one replica's step, each receive matched
// to its send, and their time split the way Scalasca defines wait states
// (docs/analysis.md, "Waits, from the transfer spans").
//
// A p2p span receives and/or sends: `megatron.p2p.recv_forward`,
// `send_backward`, or a combined `send_forward_recv_backward`. What it moved
// is read from its name (recv_* and send_* parts), its peer stage
// (dl.pipeline_parallel.peer_rank) and its microbatch ids
// (dl.microbatch_id.received / .sent, else dl.microbatch_id). A receive of
// direction d from stage p of microbatch m matches the k-th send of d to
// this stage from p of m, for the k-th such receive: messages on one
// channel arrive in the order they were sent (the interleaved schedule
// sends a microbatch once per model chunk).
//
// For a receive R matched to its send S:
//   late sender   = clamp(S.start - R.start, 0, R.duration), on R's rank
//   late receiver = clamp(min(S.end, R.start) - S.start, 0, S.duration), on
//                   S's rank: the send began before the receive was posted
//                   and blocked on it (in a combined send-receive span both
//                   halves wait from its start: the send's wait counts only
//                   beyond the receive's)
//   transfer      = the rest of every p2p span's time
// so per rank a p2p span's duration is exactly late sender + late receiver
// + transfer. Unmatched receives and sends (the peer did not record its
// communication spans) count as transfer, and are counted.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "pipeline_view.h"

namespace lens::analysis {

struct RankWaits {
  std::int64_t late_sender_ns = 0, late_receiver_ns = 0, transfer_ns = 0;
  std::int64_t p2p_ns = 0;  // the p2p spans' whole time: the three above added
  int matched = 0, unmatched = 0;
};

// A wait on one rank, for drawing: a late sender's at a receive, a late
// receiver's at a send, a transfer, or a wait at a tensor-parallel
// collective for the last peer (collective_waits.h).
struct WaitInterval {
  enum class Kind { kLateSender, kLateReceiver, kTransfer, kCollective } kind = Kind::kTransfer;
  int rank = -1, stage = -1;
  std::int64_t start_ns = 0, end_ns = 0;
  int peer = -1;  // kCollective: the TP rank that arrived last
};

struct TransferWaits {
  std::map<int, RankWaits> by_stage;
  std::vector<WaitInterval> intervals;
  // Each message's receive: (receiving stage, backward, sending stage,
  // microbatch) -> one per receive, in time order.
  struct Receive {
    std::int64_t posted_ns = 0, arrived_ns = 0;  // the receive span's start and end
    std::int64_t sent_ns = -1;                   // the matched send's start; -1: unmatched
  };
  std::map<std::tuple<int, bool, int, std::int64_t>, std::vector<Receive>> receives;
};

// The waits of one replica's step: `by_stage` holds its ranks by stage.
TransferWaits transfer_waits(const std::map<int, const StepOnRank*>& by_stage);

}  // namespace lens::analysis
