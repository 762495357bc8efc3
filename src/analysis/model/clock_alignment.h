// ClockAlignment: every process's timestamps on the reference rank's clock
// (global rank 0), from the lens.clock_sync spans the ranks recorded
// (docs/clock-alignment.md), and the causality pass that follows it.
//
// Each sample says, at a local time of its process, how far the reference
// clock was ahead (offset) and within how much at most (uncertainty: half
// the exchange's round trip, a hard bound). Samples are kept per process
// (rank and SpanRow::process), so a rank restarted elsewhere is not
// interpolated across hosts. A process's offset over time follows a fit of
// its samples weighted by 1/uncertainty^2: a straight line when the samples
// pin a drift down (the slope beyond twice its standard error), else a
// constant (their weighted mean); when that fit leaves any sample's bound,
// the clock did something no line describes (a step, a slew), and the
// offset is interpolated between the process's tight samples instead. A
// sample more than kLooseFactor times looser than the process's best is
// "loose": it weighs little in the fit and is no interpolation point.
// A process without samples is left on its own clock and reported.
//
// Alignment cannot be better than the samples, so after it a transfer can
// still look impossible: a receive ending before its send began. The
// causality pass moves such a receive to just after the send when the gap
// is within the two ranks' stated uncertainty and the move keeps it inside
// its parent; a larger gap is a clock error, left as it is and reported
// naming both ranks and its size.
//
// Thread safety: values; build, then read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "run_reader.h"
#include "lens/semconv.h"

namespace lens::analysis {

struct ClockPoint {
  std::int64_t local_ns = 0;
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;
};

// How a process's offset follows its samples (see the file comment).
enum class ClockModel { kConstant, kLine, kPiecewise };
const char* clock_model_name(ClockModel m);

// One process's samples against the run's reference, by local time.
struct ClockSeries {
  int rank = -1;
  std::uint64_t process = 0;
  ClockModel model = ClockModel::kConstant;
  std::vector<ClockPoint> points;
};

class ClockAlignment {
 public:
  // A sample looser than this many times the process's best (at least
  // 1 µs) is loose.
  static constexpr double kLooseFactor = 4;

  // Takes a lens.clock_sync span's sample (others are ignored); false when
  // the span is not one, lacks its fields, holds values no clock could give,
  // or carries no offset because every exchange was discarded (counted).
  bool add(const SpanRow& span);
  bool empty() const { return clocks_.empty(); }
  // Ranks with at least one sample.
  std::vector<int> ranks() const;
  std::size_t samples() const;
  // Every process's samples (against the reference), by rank.
  std::vector<ClockSeries> series() const;
  // The largest uncertainty of any sample (0 without samples).
  std::int64_t max_uncertainty_ns() const;
  // Samples looser than kLooseFactor x their process's best.
  std::size_t loose_samples() const;
  // Exchanges the ranks discarded (a clock stepped during them), and
  // samples left with none.
  std::int64_t discarded_exchanges() const { return discarded_exchanges_; }
  std::size_t empty_samples() const { return empty_samples_; }
  // The global rank whose clock the samples measure against (their
  // lens.clock.reference_rank; 0 when none says); samples naming another
  // are not used and are reported in problems().
  int reference_rank() const { return reference_rank_; }
  // What is wrong with the samples themselves, one line each.
  std::vector<std::string> problems() const;

  bool has(int rank, std::uint64_t process) const { return find(rank, process) != nullptr; }
  std::optional<ClockModel> model(int rank, std::uint64_t process) const;
  // The reference clock minus the process's clock at its local time (0 for
  // a process without samples).
  std::int64_t offset_at(int rank, std::uint64_t process, std::int64_t local_ns) const;
  // How far offset_at may be from the truth there: the nearest tight
  // samples' uncertainty plus how far the fit passes from them; -1 for a
  // process without samples.
  std::int64_t uncertainty_at(int rank, std::uint64_t process, std::int64_t local_ns) const;
  // A span's start and end on the reference clock; false (and the span
  // left as it is) when its process has no samples.
  bool align(SpanRow& span) const;
  // Every span of the file; false when any was left as it is.
  bool align(RankFile& file) const;

 private:
  struct Sample {
    ClockPoint point;
    int reference = 0;
  };
  struct ProcessClock {
    std::vector<Sample> samples;  // by local time, every reference
    // The fit, over the samples naming the run's reference:
    ClockModel model = ClockModel::kConstant;
    std::int64_t origin_ns = 0;         // the first sample's local time
    double intercept_ns = 0;            // offset at origin_ns
    double slope = 0;                   // ns of offset per ns of local time
    std::vector<ClockPoint> knots;      // the tight samples, by local time
    std::vector<double> knot_error_ns;  // per knot: its uncertainty + |fit - its offset|
    std::size_t loose = 0;
  };
  const ProcessClock* find(int rank, std::uint64_t process) const;
  void fit(ProcessClock& c) const;
  double fitted_ns(const ProcessClock& c, std::int64_t t) const;

  std::map<std::pair<int, std::uint64_t>, ProcessClock> clocks_;  // by (rank, process)
  std::map<int, std::size_t> references_;  // samples naming each reference rank
  int reference_rank_ = 0;
  std::int64_t discarded_exchanges_ = 0;
  std::size_t empty_samples_ = 0;
  std::size_t reference_nonzero_ = 0;  // the reference's own samples claiming an offset
};

// The samples of the run in `dir` (its lens.clock_sync spans, in file
// order): one pass that parses only the lines naming them; their
// alignment. ReadError as the reader throws it.
std::vector<SpanRow> read_clock_samples(const OpenedRun& run);
// The samples of one rank file; `look`, when given, sees every line read
// (RankFileReader::look_at_every_line: a scan made in the same reading).
std::vector<SpanRow> read_file_clock_samples(const std::filesystem::path& file,
                                             const RankFileReader::LineLook& look = {});
ClockAlignment read_clock_alignment(const OpenedRun& run);

// A receive that ended before its matching send began by more than the
// alignment allows: a clock error the causality pass exposes instead of
// hiding.
struct ClockViolation {
  std::int64_t step = -1;
  int sender_rank = -1, receiver_rank = -1;
  std::string receive;        // the receive span's name
  std::int64_t early_ns = 0;  // how far the receive ended before the send began
  std::int64_t bound_ns = 0;  // the two ranks' stated uncertainty there (the most a move may be)

  std::string describe() const;
};

// What the causality pass moved and what it refused to.
struct CausalityMoves {
  static constexpr std::size_t kKeptViolations = 16;

  std::size_t transfers = 0;  // receive/send pairs looked at
  std::size_t moved = 0;      // receives that ended before their send began and were moved
                              // (without a clock: that ended before, counted only)
  std::int64_t max_shift_ns = 0;
  std::int64_t total_shift_ns = 0;
  // Early by no more than the bound, but moving them would have ended them
  // after their parent: left as they are (within what the samples allow, so
  // not clock errors; the analysis counts the impossible edges they leave).
  std::size_t held = 0;
  std::size_t violation_count = 0;
  std::vector<ClockViolation> violations;  // the kKeptViolations earliest-ending, largest first
  void add(const CausalityMoves& other);
  void add(const ClockViolation& v);
};

// The causality pass over one step of a run (every file's spans of that
// step): on each channel between neighbouring stages of a pipeline (a
// replica's tensor-parallel rank: TP peers are never paired) (forward
// s -> s+1, backward s+1 -> s), the k-th send of the step is the k-th
// receive's match (p2p transfers on a channel arrive in order), and a
// linked receive span counts as the receive it wraps. With `clock` (the
// spans aligned by it), a receive that ends before its matching send began
// is moved (start and end) to end 1 ns after the send's start when the gap
// is within the bound (the two ranks' uncertainty_at plus 1 µs of rounding)
// and the receive then still ends within its parent; a receive held by its
// parent is left and counted as held, one beyond the bound is left and
// counted as a ClockViolation. Without `clock` (raw clocks) such
// receives are only counted.
CausalityMoves enforce_transfer_order(Run& step, const ClockAlignment* clock);

// How a view's times were put on one clock, for its reader.
struct ClockReport {
  bool aligned = false;  // false: raw (asked for, or no samples in the run)
  bool raw_asked = false;
  int reference_rank = 0;
  std::size_t ranks = 0, samples = 0, loose_samples = 0, empty_samples = 0;
  std::int64_t discarded_exchanges = 0;
  std::int64_t max_uncertainty_ns = 0;
  std::vector<std::string> sample_problems;
  // Ranks with spans whose process has no samples, in a run that has them
  // (filled as the views align).
  std::set<int> unaligned_ranks;
  CausalityMoves moves;

  static ClockReport of(const ClockAlignment& alignment);
  // The --json "clock" object of every view.
  nlohmann::json to_json() const;
  // One line: "clock: aligned to rank 0 ..." or "clock: raw ...", then any
  // clock errors, unaligned ranks and problems with the samples.
  std::string describe() const;
};

}  // namespace lens::analysis
