/// \file
/// Clock offsets between the ranks of a job, measured over the job's own
/// collective engine (docs/clock-alignment.md).
///
/// Span timestamps stay as each rank's clock read them; lens records how
/// each rank's clock relates to the reference rank's (global rank 0) so that
/// readers can put every rank on one clock. The measurement is NTP's
/// four-timestamp exchange: the reference stamps t1 and sends; the rank
/// stamps t2 when it receives and t3 when it answers; the reference stamps t4
/// when the answer has arrived. Whatever the two paths take, the reference
/// clock minus the rank's clock lies within half the round trip
/// ((t4 - t1) - (t3 - t2)) of ((t1 - t2) + (t4 - t3)) / 2, so every sample
/// carries its own error bound. Of several exchanges the one with the lowest
/// round trip is kept (NTP's clock filter). Drift comes from a least-squares
/// fit over samples taken minutes apart.
///
/// measure_clock_offset runs the exchanges point to point over the job's
/// engine (Communicator::send / recv, tag kClockSyncTag): global rank 0
/// with each other rank in turn, so that an exchange involves two ranks and
/// one message each way, and its round trip is as short as the engine
/// allows. (Collectives would be cheaper for many ranks but their paths are
/// not symmetric: an all-gather's answer reaches rank 0 only after every
/// rank's, which biases the estimate by up to the collective's whole time.)
/// A sample costs `exchanges` round trips per rank, one rank after another.
///
/// Thread safety: measure_clock_offset is run by every rank, one thread per
/// rank, as a collective of the communicator; the other types are values.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "lens/communicator.h"
#include "lens/line_fit.h"

namespace lens {

/// One exchange between a rank and the reference rank, in ns: t1 and t4 on
/// the reference's clock, t2 and t3 on the rank's.
struct ClockExchange {
  std::int64_t t1 = 0, t2 = 0, t3 = 0, t4 = 0;

  /// What the messages took, the rank's own time between them left out.
  std::int64_t round_trip_ns() const { return (t4 - t1) - (t3 - t2); }
  /// The reference clock minus the rank's clock, assuming equal paths.
  std::int64_t offset_ns() const { return ((t1 - t2) + (t4 - t3)) / 2; }
  /// False when a clock stepped during the exchange: an answer stamped
  /// before its ping, or a round trip below zero. Such an exchange bounds
  /// nothing, and would be the one the lowest round trip prefers.
  bool consistent() const { return t4 >= t1 && t3 >= t2 && round_trip_ns() >= 0; }
};

/// A rank's clock against the reference rank's at one moment.
struct ClockSample {
  int rank = 0;            ///< in the communicator the sample was measured over
  int reference_rank = 0;  ///< the rank whose clock is the reference (0)
  /// This rank's clock at the kept exchange (midway between t2 and t3).
  std::int64_t local_time_ns = 0;
  /// The reference clock minus this rank's: a local time t is t + offset_ns
  /// on the reference clock.
  std::int64_t offset_ns = 0;
  /// Half the kept round trip: the true offset is within this of offset_ns.
  std::int64_t uncertainty_ns = 0;
  std::int64_t round_trip_ns = 0;
  int exchanges = 0;  ///< how many were made; the lowest round trip is kept
  int discarded = 0;  ///< of those, how many were not consistent() and were left out

  /// False when every exchange was discarded: the sample says nothing (its
  /// uncertainty is -1) and is not recorded as one.
  bool measured() const { return uncertainty_ns >= 0; }
};

/// The sample a rank's exchanges give: of the consistent() exchanges, the
/// one with the lowest round trip; the others are counted as discarded, and
/// with none left the sample is not measured(). On the reference rank
/// (rank == reference_rank) the offset and uncertainty are 0. Throws
/// std::invalid_argument when `exchanges` is empty.
ClockSample best_sample(std::span<const ClockExchange> exchanges, int rank, int reference_rank);

/// The drift of a rank's clock against the reference: the slope of offset
/// over local time, by least squares over samples weighted by the inverse
/// square of their uncertainty (at least 1 µs, so that the reference rank's
/// exact zeros do not dominate), as the analysis fits it (line_fit.h).
class ClockDriftFit {
 public:
  /// The largest standard error, in ppm, of a drift the fit reports.
  static constexpr double kMaxDriftErrorPpm = 5;

  void add(const ClockSample& sample);
  std::size_t samples() const { return line_.points(); }
  /// Parts per million (offset change in µs per second of local time);
  /// empty until the samples pin it down to kMaxDriftErrorPpm (two samples
  /// 25 µs uncertain need about 10 s between them).
  std::optional<double> drift_ppm() const;

 private:
  std::int64_t origin_ns_ = 0;  // the first sample's time: keeps the sums well conditioned
  WeightedLineFit line_;        // offset (ns) over seconds since origin_ns_
};

/// A reading of the clock spans are stamped with, in Unix ns.
using ClockReading = std::function<std::int64_t()>;

/// The tag of the exchange's point-to-point messages.
inline constexpr int kClockSyncTag = 0x4c43;

/// Bytes the reference rank hands every rank with a sample (the caller's own
/// use: lens's schedule puts the sample's trace id and the next sample's step
/// there).
inline constexpr std::size_t kClockSyncSharedBytes = 32;

struct ClockSyncOptions {
  /// Exchanges per sample, 1 to 64.
  int exchanges = 8;
  /// For each collective.
  std::chrono::milliseconds timeout{300000};
};

/// Measures this rank's clock against comm rank 0's: every rank of comm
/// calls it with the same options (like a collective; other ranks only
/// wait while rank 0 exchanges with one). `now` reads the clock being measured
/// (the one spans are stamped with). `shared` is rank 0's on input and, on
/// return, rank 0's on every rank. Throws CommError when a collective fails
/// or a frame from rank 0 is not one of this exchange (a rank that called
/// another collective), std::invalid_argument for exchanges out of range.
ClockSample measure_clock_offset(Communicator& comm, const ClockReading& now,
                                 std::span<std::uint8_t, kClockSyncSharedBytes> shared,
                                 const ClockSyncOptions& options = {});

}  // namespace lens
