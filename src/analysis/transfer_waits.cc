// transfer_waits: receives matched to sends, and the Scalasca wait states
// (transfer_waits.h, docs/analysis.md).
#include "transfer_waits.h"

#include <algorithm>
#include <string>

#include "lens/semconv.h"

namespace lens::analysis {
namespace {

// One p2p span, and what it received and sent.
struct P2pSpan {
  const SpanRow* span = nullptr;
  int stage = -1, rank = -1;
  std::int64_t late_sender = 0, late_receiver = 0;
};

// Half of a p2p span: a message it received or sent.
struct Message {
  std::size_t span = 0;  // index into the P2pSpan list
  bool backward = false;
  int from = -1, to = -1;
  std::int64_t microbatch = -1;
};

using Channel = std::tuple<int, int, bool, std::int64_t>;  // from, to, backward, microbatch

std::int64_t microbatch_of(const SpanRow& s, const char* key) {
  const std::int64_t m = s.int_attr(key, -1);
  return m >= 0 ? m : s.int_attr(semconv::kMicrobatchId, -1);
}

}  // namespace

TransferWaits transfer_waits(const std::map<int, const StepOnRank*>& by_stage) {
  TransferWaits out;
  std::vector<P2pSpan> spans;
  std::map<Channel, std::vector<Message>> sends, receives;
  for (const auto& [stage, sr] : by_stage) {
    out.by_stage[stage];
    for (const SpanRow* s : sr->spans) {
      if (kind_of(*s) != SpanKind::kP2p) continue;
      const std::size_t index = spans.size();
      spans.push_back({s, stage, sr->rank});
      const std::int64_t peer = s->int_attr(semconv::kPipelinePeerRank, -1);
      for (const bool backward : {false, true}) {
        const std::string_view recv = backward ? "recv_backward" : "recv_forward",
                               send = backward ? "send_backward" : "send_forward";
        if (s->name.find(recv) != std::string::npos) {
          const int from = peer >= 0 ? static_cast<int>(peer) : backward ? stage + 1 : stage - 1;
          const std::int64_t m = microbatch_of(*s, semconv::kMicrobatchIdReceived);
          if (m >= 0)
            receives[{from, stage, backward, m}].push_back({index, backward, from, stage, m});
        }
        if (s->name.find(send) != std::string::npos) {
          const int to = peer >= 0 ? static_cast<int>(peer) : backward ? stage - 1 : stage + 1;
          const std::int64_t m = microbatch_of(*s, semconv::kMicrobatchIdSent);
          if (m >= 0) sends[{stage, to, backward, m}].push_back({index, backward, stage, to, m});
        }
      }
    }
  }
  const auto by_start = [&](const Message& a, const Message& b) {
    return spans[a.span].span->start_ns < spans[b.span].span->start_ns;
  };
  std::vector<bool> send_matched(spans.size(), false);
  for (auto& [channel, recvs] : receives) {
    std::sort(recvs.begin(), recvs.end(), by_start);
    auto found = sends.find(channel);
    std::vector<Message>* matching = found == sends.end() ? nullptr : &found->second;
    if (matching) std::sort(matching->begin(), matching->end(), by_start);
    auto& received = out.receives[{std::get<1>(channel), std::get<2>(channel), std::get<0>(channel),
                                   std::get<3>(channel)}];
    for (std::size_t k = 0; k < recvs.size(); ++k) {
      P2pSpan& r = spans[recvs[k].span];
      received.push_back({r.span->start_ns, r.span->end_ns, -1});
      RankWaits& rw = out.by_stage[r.stage];
      if (!matching || k >= matching->size()) {
        ++rw.unmatched;
        continue;
      }
      ++rw.matched;
      P2pSpan& s = spans[(*matching)[k].span];
      received.back().sent_ns = s.span->start_ns;
      const std::int64_t r0 = r.span->start_ns, r1 = std::max(r.span->end_ns, r0);
      const std::int64_t s0 = s.span->start_ns, s1 = std::max(s.span->end_ns, s0);
      r.late_sender = std::max(r.late_sender, std::clamp<std::int64_t>(s0 - r0, 0, r1 - r0));
      s.late_receiver =
          std::max(s.late_receiver, std::clamp<std::int64_t>(std::min(s1, r0) - s0, 0, s1 - s0));
    }
  }
  for (const auto& [channel, list] : sends) {
    const auto r = receives.find(channel);
    const std::size_t received = r == receives.end() ? 0 : r->second.size();
    if (list.size() > received)
      out.by_stage[std::get<0>(channel)].unmatched += static_cast<int>(list.size() - received);
  }
  for (auto& p : spans) {
    const std::int64_t d = std::max<std::int64_t>(0, p.span->end_ns - p.span->start_ns);
    const std::int64_t late_sender = std::min(p.late_sender, d);
    // Both halves of a combined span wait from its start: the receive's
    // wait counts first, the send's only beyond it.
    const std::int64_t late_receiver =
        std::min(std::max<std::int64_t>(0, p.late_receiver - late_sender), d - late_sender);
    RankWaits& w = out.by_stage[p.stage];
    w.late_sender_ns += late_sender;
    w.late_receiver_ns += late_receiver;
    w.transfer_ns += d - late_sender - late_receiver;
    w.p2p_ns += d;
    std::int64_t at = p.span->start_ns;
    const auto interval = [&](WaitInterval::Kind kind, std::int64_t length) {
      if (length > 0) out.intervals.push_back({kind, p.rank, p.stage, at, at + length});
      at += length;
    };
    interval(WaitInterval::Kind::kLateSender, late_sender);
    interval(WaitInterval::Kind::kLateReceiver, late_receiver);
    interval(WaitInterval::Kind::kTransfer, d - late_sender - late_receiver);
  }
  return out;
}

}  // namespace lens::analysis
