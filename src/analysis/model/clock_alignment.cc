// ClockAlignment and the causality pass (clock_alignment.h).
#include "clock_alignment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>
#include <unordered_map>

#include "per_file.h"
#include "pipeline_view.h"
#include "step_stream.h"
#include "lens/semconv.h"
#include "lens/line_fit.h"

namespace lens::analysis {
namespace {

// Bounds on what a sample may say (the files are untrusted input): clocks
// an hour apart, or drifting by more than 1 %, are not NTP-kept hosts, and
// the bounds keep every sum below in range.
constexpr std::int64_t kMaxOffsetNs = 3'600'000'000'000;
constexpr double kMaxDriftPpm = 10'000;
constexpr std::int64_t kMaxExchanges = 64;  // measure_clock_offset's limit
// No sample weighs more than one 1 µs uncertain, so the reference's exact
// zeros and sub-µs round trips do not make the fit ill-conditioned.
constexpr std::int64_t kMinWeightNs = 1000;
// Timestamps are whole ns and offsets are rounded: a fit or a move this
// close is not an error.
constexpr std::int64_t kRoundingNs = 1000;

// t + d, held to the range of a timestamp (0 to the largest int64).
std::int64_t shifted(std::int64_t t, std::int64_t d) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(t, d, &out))
    return d > 0 ? std::numeric_limits<std::int64_t>::max() : 0;
  return std::max<std::int64_t>(out, 0);
}

}  // namespace

const char* clock_model_name(ClockModel m) {
  switch (m) {
    case ClockModel::kConstant:
      return "constant";
    case ClockModel::kLine:
      return "line";
    case ClockModel::kPiecewise:
      return "piecewise";
  }
  return "?";
}

bool ClockAlignment::add(const SpanRow& span) {
  if (span.name != semconv::kClockSyncSpan) return false;
  const int rank = static_cast<int>(span.int_attr(semconv::kRank, span.rank));
  constexpr std::int64_t kMissing = std::numeric_limits<std::int64_t>::min();
  const std::int64_t exchanges = span.int_attr("lens.clock.exchanges", kMissing);
  const std::int64_t discarded = span.int_attr("lens.clock.discarded", kMissing);
  const bool discarded_ok = discarded != kMissing && discarded >= 0 && discarded <= kMaxExchanges;
  ClockPoint p;
  p.local_ns = span.int_attr("lens.clock.local_time_ns", kMissing);
  p.offset_ns = span.int_attr("lens.clock.offset_ns", kMissing);
  p.uncertainty_ns = span.int_attr("lens.clock.uncertainty_ns", kMissing);
  if (p.offset_ns == kMissing && p.uncertainty_ns == kMissing && discarded_ok &&
      exchanges == discarded) {
    // Every exchange of this sample crossed a clock step: nothing to align by.
    ++empty_samples_;
    discarded_exchanges_ += discarded;
    return false;
  }
  if (rank < 0 || p.local_ns == kMissing || p.local_ns < 0 || p.offset_ns == kMissing ||
      p.offset_ns < -kMaxOffsetNs || p.offset_ns > kMaxOffsetNs || p.uncertainty_ns == kMissing ||
      p.uncertainty_ns < 0 || p.uncertainty_ns > kMaxOffsetNs)
    return false;
  if (span.int_attr("lens.clock.round_trip_ns", 0) < 0) return false;  // no exchange gives that
  if (const auto text = span.attributes.text("lens.clock.drift_ppm")) {
    const std::string drift(*text);
    char* end = nullptr;
    const double d = std::strtod(drift.c_str(), &end);
    if (end == drift.c_str() || *end != '\0' || !std::isfinite(d) ||
        std::abs(d) > kMaxDriftPpm)
      return false;
  }
  const std::int64_t reference = span.int_attr("lens.clock.reference_rank", 0);
  if (reference < 0 || reference > std::numeric_limits<int>::max()) return false;
  if (rank == reference && (p.offset_ns != 0 || p.uncertainty_ns != 0)) {
    ++reference_nonzero_;  // the reference against itself is exact
    return false;
  }
  auto& samples = clocks_[{rank, span.process}].samples;
  const auto at =
      std::lower_bound(samples.begin(), samples.end(), p.local_ns,
                       [](const Sample& q, std::int64_t t) { return q.point.local_ns < t; });
  if (at != samples.end() && at->point.local_ns == p.local_ns)
    return true;  // the same sample twice
  samples.insert(at, Sample{p, static_cast<int>(reference)});
  if (discarded_ok) discarded_exchanges_ += discarded;
  ++references_[static_cast<int>(reference)];
  // The run's reference: the one most samples name (the lowest on a tie).
  int chosen = reference_rank_;
  std::size_t most = 0;
  for (const auto& [r, n] : references_)
    if (n > most) {
      most = n;
      chosen = r;
    }
  if (chosen != reference_rank_) {
    reference_rank_ = chosen;
    for (auto& [key, c] : clocks_) fit(c);
  } else {
    fit(clocks_[{rank, span.process}]);
  }
  return true;
}

void ClockAlignment::fit(ProcessClock& c) const {
  c.knots.clear();
  c.knot_error_ns.clear();
  c.loose = 0;
  std::vector<ClockPoint> points;
  for (const auto& s : c.samples)
    if (s.reference == reference_rank_) points.push_back(s.point);
  if (points.empty()) return;
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  for (const auto& p : points) best = std::min(best, p.uncertainty_ns);
  const double tight = kLooseFactor * static_cast<double>(std::max(best, kMinWeightNs));

  // Weighted least squares of offset (ns) over time since the first sample
  // (s), each sample weighed by 1 / uncertainty^2 (at least 1 µs): the
  // drift's one formula (line_fit.h), as ClockDriftFit measures it.
  c.origin_ns = points.front().local_ns;
  WeightedLineFit fit;
  for (const auto& p : points) {
    const double x = static_cast<double>(p.local_ns - c.origin_ns) * 1e-9;
    const double u = static_cast<double>(std::max(p.uncertainty_ns, kMinWeightNs));
    fit.add(x, static_cast<double>(p.offset_ns), 1.0 / (u * u));
  }
  c.model = ClockModel::kConstant;
  c.intercept_ns = fit.mean();
  c.slope = 0;
  const auto line = fit.line();  // ns per s
  if (line && std::abs(line->slope) > 2 * line->slope_error) {  // a drift the samples pin down
    c.model = ClockModel::kLine;
    c.intercept_ns = line->intercept;
    c.slope = line->slope * 1e-9;
  }
  // Each sample's true offset is within its uncertainty (a hard bound): a
  // fit that leaves one's bound is not how this clock moved.
  for (const auto& p : points)
    if (std::abs(fitted_ns(c, p.local_ns) - static_cast<double>(p.offset_ns)) >
        static_cast<double>(p.uncertainty_ns + kRoundingNs)) {
      c.model = ClockModel::kPiecewise;
      break;
    }
  for (const auto& p : points) {
    if (static_cast<double>(p.uncertainty_ns) > tight) {
      ++c.loose;
      continue;
    }
    c.knots.push_back(p);
  }
  for (const auto& k : c.knots) {
    const double miss = c.model == ClockModel::kPiecewise
                            ? 0.0
                            : std::abs(fitted_ns(c, k.local_ns) - static_cast<double>(k.offset_ns));
    c.knot_error_ns.push_back(static_cast<double>(k.uncertainty_ns) + miss);
  }
}

double ClockAlignment::fitted_ns(const ProcessClock& c, std::int64_t t) const {
  const double bound = 2.0 * static_cast<double>(kMaxOffsetNs);
  if (c.model != ClockModel::kPiecewise) {
    const double v =
        c.intercept_ns + c.slope * (static_cast<double>(t) - static_cast<double>(c.origin_ns));
    return std::clamp(v, -bound, bound);
  }
  const auto& k = c.knots;  // never empty once fitted
  if (t <= k.front().local_ns) return static_cast<double>(k.front().offset_ns);
  if (t >= k.back().local_ns) return static_cast<double>(k.back().offset_ns);
  const auto after = std::upper_bound(
      k.begin(), k.end(), t, [](std::int64_t x, const ClockPoint& q) { return x < q.local_ns; });
  const ClockPoint& b = *after;
  const ClockPoint& a = *(after - 1);
  const double f =
      static_cast<double>(t - a.local_ns) / static_cast<double>(b.local_ns - a.local_ns);
  return static_cast<double>(a.offset_ns) + f * static_cast<double>(b.offset_ns - a.offset_ns);
}

const ClockAlignment::ProcessClock* ClockAlignment::find(int rank, std::uint64_t process) const {
  auto it = clocks_.find({rank, process});
  if (it == clocks_.end() || it->second.knots.empty()) return nullptr;
  return &it->second;
}

std::vector<int> ClockAlignment::ranks() const {
  std::set<int> out;
  for (const auto& [key, c] : clocks_)
    if (!c.knots.empty()) out.insert(key.first);
  return {out.begin(), out.end()};
}

std::size_t ClockAlignment::samples() const {
  std::size_t n = 0;
  for (const auto& [key, c] : clocks_)
    for (const auto& s : c.samples) n += s.reference == reference_rank_ ? 1 : 0;
  return n;
}

std::vector<ClockSeries> ClockAlignment::series() const {
  std::vector<ClockSeries> out;
  for (const auto& [key, c] : clocks_) {
    ClockSeries series{key.first, key.second, c.model, {}};
    for (const auto& s : c.samples)
      if (s.reference == reference_rank_) series.points.push_back(s.point);
    if (!series.points.empty()) out.push_back(std::move(series));
  }
  return out;
}

std::size_t ClockAlignment::loose_samples() const {
  std::size_t n = 0;
  for (const auto& [key, c] : clocks_) n += c.loose;
  return n;
}

std::int64_t ClockAlignment::max_uncertainty_ns() const {
  std::int64_t m = 0;
  for (const auto& [key, c] : clocks_)
    for (const auto& s : c.samples)
      if (s.reference == reference_rank_) m = std::max(m, s.point.uncertainty_ns);
  return m;
}

std::vector<std::string> ClockAlignment::problems() const {
  std::vector<std::string> out;
  for (const auto& [r, n] : references_)
    if (r != reference_rank_)
      out.push_back(
          fmt::format("{} samples measure against rank {}, not the run's reference "
                      "rank {}: not used",
                      n, r, reference_rank_));
  if (reference_nonzero_ > 0)
    out.push_back(
        fmt::format("{} samples of the reference rank against itself claim an offset: "
                    "not used",
                    reference_nonzero_));
  return out;
}

std::optional<ClockModel> ClockAlignment::model(int rank, std::uint64_t process) const {
  const ProcessClock* c = find(rank, process);
  if (c == nullptr) return std::nullopt;
  return c->model;
}

std::int64_t ClockAlignment::offset_at(int rank, std::uint64_t process, std::int64_t t) const {
  const ProcessClock* c = find(rank, process);
  return c == nullptr ? 0 : std::llround(fitted_ns(*c, t));
}

std::int64_t ClockAlignment::uncertainty_at(int rank, std::uint64_t process, std::int64_t t) const {
  const ProcessClock* c = find(rank, process);
  if (c == nullptr) return -1;
  const auto& k = c->knots;
  const auto after = std::upper_bound(
      k.begin(), k.end(), t, [](std::int64_t x, const ClockPoint& q) { return x < q.local_ns; });
  const auto i = static_cast<std::size_t>(after - k.begin());
  double e = 0;
  if (i == 0)
    e = c->knot_error_ns.front();
  else if (i == k.size())
    e = c->knot_error_ns.back();
  else
    e = std::max(c->knot_error_ns[i - 1], c->knot_error_ns[i]);
  return std::llround(std::min(e, static_cast<double>(kMaxOffsetNs)));
}

bool ClockAlignment::align(SpanRow& span) const {
  const ProcessClock* c = find(span.rank, span.process);
  if (c == nullptr) return false;
  span.start_ns = shifted(span.start_ns, std::llround(fitted_ns(*c, span.start_ns)));
  span.end_ns = shifted(span.end_ns, std::llround(fitted_ns(*c, span.end_ns)));
  if (span.end_ns < span.start_ns) span.end_ns = span.start_ns;
  return true;
}

bool ClockAlignment::align(RankFile& file) const {
  bool all = true;
  for (auto& s : file.spans) all = align(s) && all;
  return all;
}

std::vector<SpanRow> read_file_clock_samples(const std::filesystem::path& file,
                                             const RankFileReader::LineLook& look) {
  std::vector<SpanRow> samples;
  RankFileReader reader(file);
  reader.only_spans_named(semconv::kClockSyncSpan);
  if (look) reader.look_at_every_line(look);
  while (reader.next_line()) {
    for (auto& s : reader.file().spans) samples.push_back(std::move(s));
    reader.file().spans.clear();
  }
  return samples;
}

std::vector<SpanRow> read_clock_samples(const OpenedRun& run) {
  // The files read side by side (default_read_threads), their samples in
  // file order as one after the other gives them.
  std::vector<SpanRow> samples;
  for (auto& file : per_file(run.files(), default_read_threads(),
                             [](const auto& path) { return read_file_clock_samples(path); }))
    for (auto& s : file) samples.push_back(std::move(s));
  return samples;
}

ClockAlignment read_clock_alignment(const OpenedRun& run) {
  ClockAlignment alignment;
  for (const auto& s : read_clock_samples(run)) alignment.add(s);
  return alignment;
}

ClockReport ClockReport::of(const ClockAlignment& alignment) {
  ClockReport r;
  r.aligned = !alignment.empty();
  r.reference_rank = alignment.reference_rank();
  r.ranks = alignment.ranks().size();
  r.samples = alignment.samples();
  r.loose_samples = alignment.loose_samples();
  r.empty_samples = alignment.empty_samples();
  r.discarded_exchanges = alignment.discarded_exchanges();
  r.max_uncertainty_ns = alignment.max_uncertainty_ns();
  r.sample_problems = alignment.problems();
  return r;
}

std::string ClockViolation::describe() const {
  std::string out =
      fmt::format("step {}: rank {}'s {} ended {:.1f} us before rank {}'s send began", step,
                  receiver_rank, receive, static_cast<double>(early_ns) / 1e3, sender_rank);
  return out +
         fmt::format(" (the ranks' samples allow {:.1f} us)", static_cast<double>(bound_ns) / 1e3);
}

std::string ClockReport::describe() const {
  std::string out;
  if (!aligned) {
    out = fmt::format(
        "clock: raw, each rank's own ({}); causality: {} of {} receives end before their send "
        "began",
        raw_asked ? "--raw-clock" : "the run has no lens.clock_sync samples", moves.moved,
        moves.transfers);
  } else {
    out = fmt::format(
        "clock: aligned to rank {} by {} samples of {} ranks (uncertainty up to {:.1f} us); "
        "causality: {} of {} receives moved after their send (by up to {:.1f} us)",
        reference_rank, samples, ranks, static_cast<double>(max_uncertainty_ns) / 1e3, moves.moved,
        moves.transfers, static_cast<double>(moves.max_shift_ns) / 1e3);
  }
  if (moves.held > 0)
    out += fmt::format(
        "; {} left early within the ranks' uncertainty (moving them would end them after their "
        "parent)",
        moves.held);
  if (moves.violation_count > 0)
    out += fmt::format(
        "; CLOCK ERROR: {} receives end before their send by more than the alignment allows "
        "and are left as they are; the largest: {}",
        moves.violation_count, moves.violations.front().describe());
  if (!unaligned_ranks.empty()) {
    std::string list;
    for (int r : unaligned_ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    out += fmt::format(
        "; WARNING: rank(s) {} have no clock samples of their process and stay on their own "
        "clock",
        list);
  }
  if (loose_samples > 0)
    out += fmt::format("; {} loose samples (over {}x their rank's best uncertainty) weighted down",
                       loose_samples, ClockAlignment::kLooseFactor);
  if (discarded_exchanges > 0)
    out +=
        fmt::format("; {} exchanges discarded (a clock stepped during them)", discarded_exchanges);
  if (empty_samples > 0)
    out += fmt::format("; {} samples had every exchange discarded", empty_samples);
  for (const auto& p : sample_problems) out += "; " + p;
  return out;
}

nlohmann::json ClockReport::to_json() const {
  nlohmann::json violations = nlohmann::json::array();
  for (const auto& v : moves.violations)
    violations.push_back({{"step", v.step},
                          {"sender_rank", v.sender_rank},
                          {"receiver_rank", v.receiver_rank},
                          {"receive", v.receive},
                          {"early_us", static_cast<double>(v.early_ns) / 1e3},
                          {"bound_us", static_cast<double>(v.bound_ns) / 1e3}});
  return {{"aligned", aligned},
          {"reference_rank", aligned ? nlohmann::json(reference_rank) : nlohmann::json(nullptr)},
          {"ranks", ranks},
          {"samples", samples},
          {"loose_samples", loose_samples},
          {"discarded_exchanges", discarded_exchanges},
          {"empty_samples", empty_samples},
          {"max_uncertainty_us", static_cast<double>(max_uncertainty_ns) / 1e3},
          {"unaligned_ranks", unaligned_ranks},
          {"receives_checked", moves.transfers},
          {"receives_moved", moves.moved},
          {"receives_held", moves.held},
          {"max_move_us", static_cast<double>(moves.max_shift_ns) / 1e3},
          {"clock_errors", moves.violation_count},
          {"clock_error_list", violations},
          {"sample_problems", sample_problems}};
}

void CausalityMoves::add(const CausalityMoves& o) {
  transfers += o.transfers;
  moved += o.moved;
  held += o.held;
  max_shift_ns = std::max(max_shift_ns, o.max_shift_ns);
  total_shift_ns = shifted(total_shift_ns, o.total_shift_ns);
  for (const auto& v : o.violations) add(v);
  violation_count += o.violation_count - o.violations.size();
}

void CausalityMoves::add(const ClockViolation& v) {
  ++violation_count;
  const auto at = std::upper_bound(
      violations.begin(), violations.end(), v.early_ns,
      [](std::int64_t early, const ClockViolation& kept) { return early > kept.early_ns; });
  if (static_cast<std::size_t>(at - violations.begin()) >= kKeptViolations) return;
  violations.insert(at, v);
  if (violations.size() > kKeptViolations) violations.pop_back();
}

namespace {

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

// One step's pass: what it needs to judge a move.
struct Pass {
  const ClockAlignment* clock;
  std::int64_t step;
  std::unordered_map<std::string_view, const SpanRow*> by_id;  // the step's spans
  CausalityMoves moves;

  // The most a receive may move on the samples' word: the two processes'
  // stated uncertainty there, plus rounding.
  std::int64_t bound_ns(const SpanRow& send, const SpanRow& recv) const {
    const std::int64_t a = clock->uncertainty_at(send.rank, send.process, send.start_ns);
    const std::int64_t b = clock->uncertainty_at(recv.rank, recv.process, recv.end_ns);
    return std::max<std::int64_t>(a, 0) + std::max<std::int64_t>(b, 0) + kRoundingNs;
  }

  void order(const std::vector<SpanRow*>& sends, const std::vector<SpanRow*>& receives,
             bool count_transfers) {
    const std::size_t n = std::min(sends.size(), receives.size());
    for (std::size_t k = 0; k < n; ++k) {
      if (count_transfers) ++moves.transfers;
      SpanRow& recv = *receives[k];
      const SpanRow& send = *sends[k];
      if (recv.end_ns >= send.start_ns) continue;
      // Both are timestamps (non-negative), so the difference is in range.
      const std::int64_t early = send.start_ns - recv.end_ns;
      const std::int64_t shift = shifted(early, 1);
      if (clock != nullptr) {
        ClockViolation v{step, send.rank, recv.rank, recv.name, early, bound_ns(send, recv)};
        if (early > v.bound_ns) {
          moves.add(v);
          continue;
        }
        if (auto p = by_id.find(recv.parent_span_id);
            !recv.parent_span_id.empty() && p != by_id.end() &&
            shifted(recv.end_ns, shift) > p->second->end_ns) {
          ++moves.held;
          continue;
        }
        recv.start_ns = shifted(recv.start_ns, shift);
        recv.end_ns = shifted(recv.end_ns, shift);
      }
      ++moves.moved;
      moves.max_shift_ns = std::max(moves.max_shift_ns, shift);
      moves.total_shift_ns = shifted(moves.total_shift_ns, shift);
    }
  }
};

}  // namespace

CausalityMoves enforce_transfer_order(Run& step, const ClockAlignment* clock) {
  // Per pipeline (replica, tensor rank) and stage: the step's sends and
  // receives in each direction, in time order; linked receives apart. Each
  // TP rank of a stage sends to the same TP rank of the next, so TP peers'
  // spans are never paired.
  struct Ends {
    std::vector<SpanRow*> send[2], recv[2], linked;
  };
  Pass pass{clock, -1, {}, {}};
  std::map<std::tuple<int, int, int>, Ends> by_stage;  // (replica, tensor, stage)
  for (auto& f : step.files) {
    int stage = -1;
    for (const auto& s : f.spans) {
      pass.by_id.emplace(s.span_id, &s);
      if (is_step_span(s)) {
        stage = static_cast<int>(s.int_attr(semconv::kPipelineRank, -1));
        pass.step = s.int_attr(semconv::kStep, pass.step);
      }
    }
    if (stage < 0) continue;
    Ends& e = by_stage[{f.replica, std::max(0, f.tensor_rank), stage}];
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
  for (auto& [key, e] : by_stage) {
    const auto [replica, tensor, stage] = key;
    if (auto prev = by_stage.find({replica, tensor, stage - 1}); prev != by_stage.end()) {
      // Forward: stage - 1 sent what this stage receives; the linked spans
      // wrap the first receives.
      pass.order(prev->second.send[0], e.recv[0], true);
      pass.order(prev->second.send[0], e.linked, false);
    }
    if (auto next = by_stage.find({replica, tensor, stage + 1}); next != by_stage.end())
      pass.order(next->second.send[1], e.recv[1], true);  // backward: stage + 1 sent
  }
  return pass.moves;
}

}  // namespace lens::analysis
