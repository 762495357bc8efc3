// collective_waits: the TP collectives of a step matched across peers
// (collective_waits.h).
#include "collective_waits.h"

#include <algorithm>
#include <tuple>

namespace lens::analysis {

CollectiveWaits collective_waits(const std::vector<TensorPeer>& ranks) {
  CollectiveWaits out;
  struct Arrival {
    const StepOnRank* step;
    int tensor;
    const SpanRow* span;
  };
  // (replica, stage, sequence) -> each peer's span of that collective.
  std::map<std::tuple<int, int, std::int64_t>, std::vector<Arrival>> collectives;
  for (const TensorPeer& p : ranks) {
    std::vector<const SpanRow*> own, computes;
    for (const SpanRow* s : p.step->spans) {
      const SpanKind k = kind_of(*s);
      if (k == SpanKind::kCollective) own.push_back(s);
      if (k == SpanKind::kForward || k == SpanKind::kBackward) computes.push_back(s);
    }
    if (own.empty()) continue;
    std::sort(own.begin(), own.end(),
              [](const SpanRow* a, const SpanRow* b) { return a->start_ns < b->start_ns; });
    RankCollectives& r = out.by_rank[p.step->rank];
    for (std::size_t k = 0; k < own.size(); ++k) {
      const SpanRow* s = own[k];
      r.collective_ns += std::max<std::int64_t>(0, s->end_ns - s->start_ns);
      // (A rank's computes do not overlap one another.)
      for (const SpanRow* c : computes)
        r.in_compute_ns += std::max<std::int64_t>(
            0, std::min(s->end_ns, c->end_ns) - std::max(s->start_ns, c->start_ns));
      ++r.collectives;
      const std::int64_t sequence =
          s->int_attr("dl.collective.sequence", static_cast<std::int64_t>(k));
      collectives[{p.replica, p.step->stage, sequence}].push_back({p.step, p.tensor, s});
    }
  }
  for (const auto& [key, arrivals] : collectives) {
    if (arrivals.size() < 2) {
      for (const Arrival& a : arrivals) ++out.by_rank[a.step->rank].unmatched;
      continue;
    }
    const Arrival* last = &arrivals.front();
    for (const Arrival& a : arrivals)
      if (a.span->start_ns > last->span->start_ns) last = &a;
    for (const Arrival& a : arrivals) {
      if (&a == last) continue;
      const std::int64_t length = std::max<std::int64_t>(0, a.span->end_ns - a.span->start_ns);
      const std::int64_t wait =
          std::clamp<std::int64_t>(last->span->start_ns - a.span->start_ns, 0, length);
      if (wait <= 0) continue;
      RankCollectives& r = out.by_rank[a.step->rank];
      r.wait_ns += wait;
      r.waited_for[last->tensor] += wait;
      WaitInterval iv;
      iv.kind = WaitInterval::Kind::kCollective;
      iv.rank = a.step->rank;
      iv.stage = a.step->stage;
      iv.peer = last->tensor;
      iv.start_ns = a.span->start_ns;
      iv.end_ns = a.span->start_ns + wait;
      out.intervals.push_back(iv);
    }
  }
  return out;
}

}  // namespace lens::analysis
