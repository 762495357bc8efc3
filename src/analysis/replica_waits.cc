// Replica waits (replica_waits.h).
#include "replica_waits.h"

#include <algorithm>
#include <tuple>

#include "span_kind.h"

namespace lens::analysis {
namespace {

bool own_work(SpanKind k) {
  return k == SpanKind::kForward || k == SpanKind::kBackward || k == SpanKind::kP2p ||
         k == SpanKind::kLinked || k == SpanKind::kCollective;
}

// Spans that hold the whole step: never where a wait surfaced.
bool container(SpanKind k) { return k == SpanKind::kStep || k == SpanKind::kForwardBackward; }

}  // namespace

std::optional<StepTail> step_tail(const StepOnRank& rank) {
  // Each span's kind once: the spans that are neither own work nor a
  // container, for the sweep below.
  thread_local std::vector<const SpanRow*> others;
  others.clear();
  std::optional<std::int64_t> last_work;
  for (const SpanRow* s : rank.spans) {
    const SpanKind k = kind_of(*s);
    if (own_work(k))
      last_work = std::max(last_work.value_or(s->end_ns), s->end_ns);
    else if (!container(k) && s != rank.step_span)
      others.push_back(s);
  }
  if (!last_work || rank.step_span == nullptr) return std::nullopt;
  const std::int64_t ready = *last_work;
  StepTail t;
  const std::int64_t end = std::max(ready, rank.step_span->end_ns);
  t.ready_ns = ready;
  t.length_ns = end - ready;
  if (t.length_ns == 0) return t;
  // The spans over the tail, clipped to it; each instant goes to the
  // innermost one covering it (the latest start; of those, the earliest
  // end), found by a sweep over their starts and ends.
  struct Piece {
    std::int64_t start, end;
    const std::string* name;
  };
  std::vector<Piece> pieces;
  for (const SpanRow* s : others) {
    const std::int64_t a = std::max(s->start_ns, ready), b = std::min(s->end_ns, end);
    if (a < b) pieces.push_back({a, b, &s->name});
  }
  std::vector<std::int64_t> cuts = {ready, end};
  for (const Piece& p : pieces) {
    cuts.push_back(p.start);
    cuts.push_back(p.end);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& x, const Piece& y) { return x.start < y.start; });
  std::vector<const Piece*> open;
  std::size_t next = 0;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::int64_t a = cuts[i], b = cuts[i + 1];
    while (next < pieces.size() && pieces[next].start <= a) open.push_back(&pieces[next++]);
    std::erase_if(open, [&](const Piece* p) { return p->end <= a; });
    const Piece* inner = nullptr;
    for (const Piece* p : open)
      if (inner == nullptr || std::tie(p->start, inner->end) > std::tie(inner->start, p->end))
        inner = p;
    t.by_span[inner != nullptr ? *inner->name : std::string(kUntraced)] += b - a;
  }
  return t;
}

std::map<int, ReplicaWait> replica_waits(const std::vector<TensorPeer>& peers) {
  struct Member {
    const TensorPeer* peer;
    StepTail tail;
  };
  std::map<std::pair<int, int>, std::vector<Member>> groups;  // (stage, tensor)
  for (const TensorPeer& p : peers) {
    std::optional<StepTail> tail = step_tail(*p.step);
    if (tail) groups[{p.step->stage, p.tensor}].push_back({&p, std::move(*tail)});
  }
  std::map<int, ReplicaWait> out;
  for (const auto& [key, members] : groups) {
    const Member& last = *std::min_element(
        members.begin(), members.end(), [](const Member& x, const Member& y) {
          return std::tie(x.tail.length_ns, x.peer->replica) <
                 std::tie(y.tail.length_ns, y.peer->replica);
        });
    for (const Member& m : members) {
      ReplicaWait& w = out[m.peer->step->rank];
      w.last_replica = last.peer->replica;
      w.replicas = static_cast<int>(members.size());
      w.wait_ns = m.tail.length_ns - last.tail.length_ns;
      if (w.wait_ns == 0) continue;
      std::int64_t most = 0;
      for (const auto& [name, ns] : m.tail.by_span) {
        const auto theirs = last.tail.by_span.find(name);
        const std::int64_t excess = ns - (theirs == last.tail.by_span.end() ? 0 : theirs->second);
        if (excess > most) {
          most = excess;
          w.where = name;
        }
      }
    }
  }
  return out;
}

}  // namespace lens::analysis
