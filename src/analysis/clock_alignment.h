// ClockAlignment: every rank's timestamps on global rank 0's clock, from the
// lens.clock_sync spans the ranks recorded (docs/clock-alignment.md), and
// the causality pass that follows it.
//
// Each sample says, at a local time of its rank, how far rank 0's clock was
// ahead (offset) and within how much (uncertainty). Between two samples of a
// rank the offset is interpolated linearly; before the first and after the
// last it follows the rank's latest drift estimate (lens.clock.drift_ppm),
// or stays constant without one. A rank without samples is left as it is.
//
// Alignment cannot be better than the samples, so after it a transfer can
// still look impossible: a receive ending before its send began. The
// causality pass moves such a receive to just after the send and counts the
// moves; their count and size say how good the alignment was.
//
// Thread safety: values; build, then read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "run_reader.h"

namespace lens::tools {

inline constexpr const char* kClockSyncSpanName = "lens.clock_sync";

struct ClockPoint {
  std::int64_t local_ns = 0;
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;
  std::optional<double> drift_ppm;
};

class ClockAlignment {
 public:
  // Takes a lens.clock_sync span's sample (others are ignored); false when
  // the span is not one or lacks its fields.
  bool add(const SpanRow& span);
  bool empty() const { return points_.empty(); }
  // Ranks with at least one sample.
  std::vector<int> ranks() const;
  const std::vector<ClockPoint>* points(int rank) const;
  // The largest uncertainty of any sample (0 without samples).
  std::int64_t max_uncertainty_ns() const;

  // Rank 0's clock minus `rank`'s at that rank's local time.
  std::int64_t offset_at(int rank, std::int64_t local_ns) const;
  // A span's start and end on rank 0's clock (its rank is span.rank).
  void align(SpanRow& span) const;
  void align(RankFile& file) const;

 private:
  std::map<int, std::vector<ClockPoint>> points_;  // by rank, by local time
  std::map<int, double> latest_drift_ppm_;         // by rank: of its latest sample with one
};

// The samples of the run in `dir`: one pass that parses only the lines
// naming lens.clock_sync. ReadError as the reader throws it.
ClockAlignment read_clock_alignment(const std::filesystem::path& dir);

// What the causality pass moved.
struct CausalityMoves {
  std::size_t transfers = 0;  // receive/send pairs looked at
  std::size_t moved = 0;      // receives that ended before their send began (moved or not)
  std::int64_t max_shift_ns = 0;
  std::int64_t total_shift_ns = 0;
  void add(const CausalityMoves& other);
};

// The causality pass over one step of a run (every file's spans of that
// step): on each channel between neighbouring stages of a replica (forward
// s -> s+1, backward s+1 -> s), the k-th send of the step is the k-th
// receive's match (p2p transfers on a channel arrive in order), and a
// linked receive span counts as the receive it wraps. A receive that ends
// before its matching send began is moved (start and end) to end 1 ns after
// the send's start; with `move` false such receives are only counted (what
// raw clocks look like).
CausalityMoves enforce_transfer_order(Run& step, bool move = true);

// How a view's times were put on one clock, for its reader.
struct ClockReport {
  bool aligned = false;  // false: raw (asked for, or no samples in the run)
  bool raw_asked = false;
  std::size_t ranks = 0, samples = 0;
  std::int64_t max_uncertainty_ns = 0;
  CausalityMoves moves;

  static ClockReport of(const ClockAlignment& alignment);
  // One line: "clock: aligned to rank 0 ..." or "clock: raw ...".
  std::string describe() const;
};

}  // namespace lens::tools
