// ClockAlignment and the causality pass (clock_alignment.h).
#include "clock_alignment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>

#include "pipeline_view.h"

namespace lens::tools {
namespace {

// Bounds on what a sample may say (the files are untrusted input): clocks
// an hour apart, or drifting by more than 1 %, are not NTP-kept hosts, and
// the bounds keep every sum below in range.
constexpr std::int64_t kMaxOffsetNs = 3'600'000'000'000;
constexpr double kMaxDriftPpm = 10'000;

// t + d, held to the range of a timestamp (0 to the largest int64).
std::int64_t shifted(std::int64_t t, std::int64_t d) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(t, d, &out))
    return d > 0 ? std::numeric_limits<std::int64_t>::max() : 0;
  return std::max<std::int64_t>(out, 0);
}

}  // namespace

bool ClockAlignment::add(const SpanRow& span) {
  if (span.name != kClockSyncSpanName) return false;
  const int rank = static_cast<int>(span.int_attr("dl.rank", span.rank));
  constexpr std::int64_t kMissing = std::numeric_limits<std::int64_t>::min();
  ClockPoint p;
  p.local_ns = span.int_attr("lens.clock.local_time_ns", kMissing);
  p.offset_ns = span.int_attr("lens.clock.offset_ns", kMissing);
  p.uncertainty_ns = span.int_attr("lens.clock.uncertainty_ns", kMissing);
  if (rank < 0 || p.local_ns == kMissing || p.local_ns < 0 || p.offset_ns == kMissing ||
      p.offset_ns < -kMaxOffsetNs || p.offset_ns > kMaxOffsetNs || p.uncertainty_ns == kMissing ||
      p.uncertainty_ns < 0 || p.uncertainty_ns > kMaxOffsetNs)
    return false;
  if (auto it = span.attributes.find("lens.clock.drift_ppm"); it != span.attributes.end()) {
    char* end = nullptr;
    const double d = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0' || !std::isfinite(d) ||
        std::abs(d) > kMaxDriftPpm)
      return false;
    p.drift_ppm = d;
  }
  auto& points = points_[rank];
  const auto at =
      std::lower_bound(points.begin(), points.end(), p.local_ns,
                       [](const ClockPoint& q, std::int64_t t) { return q.local_ns < t; });
  if (at != points.end() && at->local_ns == p.local_ns) return true;  // the same sample twice
  points.insert(at, p);
  // The latest drift estimate, which times outside the samples follow.
  latest_drift_ppm_[rank] = 0;
  for (auto it = points.rbegin(); it != points.rend(); ++it)
    if (it->drift_ppm) {
      latest_drift_ppm_[rank] = *it->drift_ppm;
      break;
    }
  return true;
}

std::vector<int> ClockAlignment::ranks() const {
  std::vector<int> out;
  for (const auto& [rank, points] : points_) out.push_back(rank);
  return out;
}

const std::vector<ClockPoint>* ClockAlignment::points(int rank) const {
  auto it = points_.find(rank);
  return it == points_.end() ? nullptr : &it->second;
}

std::int64_t ClockAlignment::max_uncertainty_ns() const {
  std::int64_t m = 0;
  for (const auto& [rank, points] : points_)
    for (const auto& p : points) m = std::max(m, p.uncertainty_ns);
  return m;
}

std::int64_t ClockAlignment::offset_at(int rank, std::int64_t t) const {
  const auto* points = this->points(rank);
  if (points == nullptr) return 0;
  const auto& v = *points;
  const double drift = latest_drift_ppm_.at(rank);  // for times outside the samples
  const auto extrapolate = [&](const ClockPoint& p) {
    // Held to an hour either way, however far from the sample t is.
    const double moved =
        std::clamp(drift * 1e-6 * (static_cast<double>(t) - static_cast<double>(p.local_ns)),
                   -static_cast<double>(kMaxOffsetNs), static_cast<double>(kMaxOffsetNs));
    return p.offset_ns + std::llround(moved);
  };
  if (t <= v.front().local_ns) return extrapolate(v.front());
  if (t >= v.back().local_ns) return extrapolate(v.back());
  const auto after = std::upper_bound(
      v.begin(), v.end(), t, [](std::int64_t x, const ClockPoint& q) { return x < q.local_ns; });
  const ClockPoint& b = *after;
  const ClockPoint& a = *(after - 1);
  const double f =
      static_cast<double>(t - a.local_ns) / static_cast<double>(b.local_ns - a.local_ns);
  return a.offset_ns + static_cast<std::int64_t>(
                           std::llround(f * static_cast<double>(b.offset_ns - a.offset_ns)));
}

void ClockAlignment::align(SpanRow& span) const {
  if (points(span.rank) == nullptr) return;
  span.start_ns = shifted(span.start_ns, offset_at(span.rank, span.start_ns));
  span.end_ns = shifted(span.end_ns, offset_at(span.rank, span.end_ns));
  if (span.end_ns < span.start_ns) span.end_ns = span.start_ns;
}

void ClockAlignment::align(RankFile& file) const {
  if (points(file.rank) == nullptr) return;
  for (auto& s : file.spans) align(s);
}

ClockAlignment read_clock_alignment(const std::filesystem::path& dir) {
  ClockAlignment alignment;
  for (const auto& path : run_files(dir)) {
    RankFileReader reader(path);
    reader.only_lines_containing(kClockSyncSpanName);
    while (reader.next_line()) {
      for (const auto& s : reader.file().spans) alignment.add(s);
      reader.file().spans.clear();
    }
  }
  return alignment;
}

ClockReport ClockReport::of(const ClockAlignment& alignment) {
  ClockReport r;
  r.aligned = !alignment.empty();
  for (int rank : alignment.ranks()) {
    ++r.ranks;
    r.samples += alignment.points(rank)->size();
  }
  r.max_uncertainty_ns = alignment.max_uncertainty_ns();
  return r;
}

std::string ClockReport::describe() const {
  char line[320];
  if (!aligned) {
    std::snprintf(line, sizeof line,
                  "clock: raw, each rank's own (%s); causality: %zu of %zu receives end before "
                  "their send began",
                  raw_asked ? "--raw-clock" : "the run has no lens.clock_sync samples", moves.moved,
                  moves.transfers);
    return line;
  }
  std::snprintf(line, sizeof line,
                "clock: aligned to rank 0 by %zu samples of %zu ranks (uncertainty up to %.1f "
                "us); causality: %zu of %zu receives moved after their send (by up to %.1f us)",
                samples, ranks, static_cast<double>(max_uncertainty_ns) / 1e3, moves.moved,
                moves.transfers, static_cast<double>(moves.max_shift_ns) / 1e3);
  return line;
}

void CausalityMoves::add(const CausalityMoves& o) {
  transfers += o.transfers;
  moved += o.moved;
  max_shift_ns = std::max(max_shift_ns, o.max_shift_ns);
  total_shift_ns = shifted(total_shift_ns, o.total_shift_ns);
}

namespace {

enum class Direction { kForward, kBackward };

// What a p2p span does on its rank: sends and receives, by direction.
struct P2pRole {
  bool sends_forward = false, sends_backward = false;
  bool receives_forward = false, receives_backward = false;
};

P2pRole role_of(const SpanRow& s) {
  const std::string& n = s.name;
  P2pRole r;
  if (n == "megatron.p2p.send_forward") r.sends_forward = true;
  if (n == "megatron.p2p.send_backward") r.sends_backward = true;
  if (n == "megatron.p2p.recv_forward") r.receives_forward = true;
  if (n == "megatron.p2p.recv_backward") r.receives_backward = true;
  if (n == "megatron.p2p.send_forward_recv_backward") r.sends_forward = r.receives_backward = true;
  if (n == "megatron.p2p.send_backward_recv_forward") r.sends_backward = r.receives_forward = true;
  return r;
}

bool by_start(const SpanRow* a, const SpanRow* b) {
  return std::tie(a->start_ns, a->end_ns) < std::tie(b->start_ns, b->end_ns);
}

void order_pairs(const std::vector<SpanRow*>& sends, const std::vector<SpanRow*>& receives,
                 bool move, CausalityMoves& moves) {
  const std::size_t n = std::min(sends.size(), receives.size());
  for (std::size_t k = 0; k < n; ++k) {
    ++moves.transfers;
    SpanRow& recv = *receives[k];
    const SpanRow& send = *sends[k];
    if (recv.end_ns >= send.start_ns) continue;
    // Both are timestamps (non-negative), so the difference is in range.
    const std::int64_t shift = shifted(send.start_ns - recv.end_ns, 1);
    if (move) {
      recv.start_ns = shifted(recv.start_ns, shift);
      recv.end_ns = shifted(recv.end_ns, shift);
    }
    ++moves.moved;
    moves.max_shift_ns = std::max(moves.max_shift_ns, shift);
    moves.total_shift_ns = shifted(moves.total_shift_ns, shift);
  }
}

}  // namespace

CausalityMoves enforce_transfer_order(Run& step, bool move) {
  // Per (replica, stage): the step's sends and receives in each direction,
  // in time order; linked receives apart.
  struct Ends {
    std::vector<SpanRow*> send[2], recv[2], linked;
  };
  std::map<std::pair<int, int>, Ends> by_stage;
  for (auto& f : step.files) {
    int stage = -1;
    for (const auto& s : f.spans)
      if (is_step_span(s)) stage = static_cast<int>(s.int_attr("dl.pipeline_parallel.rank", -1));
    if (stage < 0) continue;
    Ends& e = by_stage[{f.replica, stage}];
    for (auto& s : f.spans) {
      if (kind_of(s) == SpanKind::kLinked) {
        e.linked.push_back(&s);
        continue;
      }
      const P2pRole r = role_of(s);
      if (r.sends_forward) e.send[0].push_back(&s);
      if (r.sends_backward) e.send[1].push_back(&s);
      if (r.receives_forward) e.recv[0].push_back(&s);
      if (r.receives_backward) e.recv[1].push_back(&s);
    }
    for (auto* v : {&e.send[0], &e.send[1], &e.recv[0], &e.recv[1], &e.linked})
      std::sort(v->begin(), v->end(), by_start);
  }
  CausalityMoves moves;
  for (auto& [key, e] : by_stage) {
    const auto [replica, stage] = key;
    if (auto prev = by_stage.find({replica, stage - 1}); prev != by_stage.end()) {
      // Forward: stage - 1 sent what this stage receives; the linked spans
      // wrap the first receives.
      order_pairs(prev->second.send[0], e.recv[0], move, moves);
      CausalityMoves linked;
      order_pairs(prev->second.send[0], e.linked, move, linked);
      moves.moved += linked.moved;
      moves.max_shift_ns = std::max(moves.max_shift_ns, linked.max_shift_ns);
      moves.total_shift_ns = shifted(moves.total_shift_ns, linked.total_shift_ns);
    }
    if (auto next = by_stage.find({replica, stage + 1}); next != by_stage.end())
      order_pairs(next->second.send[1], e.recv[1], move, moves);  // backward: stage + 1 sent
  }
  return moves;
}

}  // namespace lens::tools
