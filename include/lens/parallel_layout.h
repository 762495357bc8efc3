/// \file
/// How a job is laid out in parallel, as configuration and the step protocol
/// see it: a rank's coordinates (pipeline stage, data-parallel replica,
/// tensor-parallel rank), how far one step's trace reaches
/// (LENS_TRACE_SCOPE), and which ranks export (LENS_EXPORT_FILTER).
/// Configuration resolves them; the step protocol (step_trace.h) and the
/// start-up agreement act on them.
///
/// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lens {

/// How far one step's trace reaches (LENS_TRACE_SCOPE).
enum class TraceScope : std::uint8_t {
  kWorld,     ///< one trace per step for all ranks (the original behaviour)
  kPipeline,  ///< one trace per step per pipeline replica, linked to global rank 0's
};
std::string_view trace_scope_name(TraceScope scope);

/// How every rank learns a step's context (LENS_STEP_CONTEXT).
enum class StepContextMode : std::uint8_t {
  kBroadcast,  ///< the source reserves it and broadcasts it each step (the reference page's)
  kDerived,    ///< every rank derives it from what the start-up agreement shared
};
std::string_view step_context_mode_name(StepContextMode mode);

/// A rank's place in the job's parallel layout (-1: unknown).
struct ParallelCoordinates {
  int pp = -1;  ///< pipeline stage
  int dp = -1;  ///< data-parallel replica
  int tp = -1;  ///< tensor-parallel rank
  friend bool operator==(const ParallelCoordinates&, const ParallelCoordinates&) = default;
};

/// Which ranks export (LENS_EXPORT_FILTER, e.g. "dp=0" or "dp=0,tp=0"): a
/// rank exports when each named coordinate equals the given value. An empty
/// filter keeps every rank. Filtering never changes which ranks take part in
/// collectives.
struct ExportFilter {
  std::optional<int> pp, dp, tp;
  bool empty() const { return !pp && !dp && !tp; }
  /// True when a rank at `at` exports. An unknown (-1) coordinate that the
  /// filter names does not match.
  bool keeps(const ParallelCoordinates& at) const;
  /// "dp=0,tp=0", or "" when empty.
  std::string to_string() const;
  /// Parses "axis=value[,axis=value]" (axes pp, dp, tp; values 0..2^30);
  /// throws ConfigError naming `setting` on anything else.
  static ExportFilter parse(std::string_view spec, std::string_view setting = "export filter");
};

}  // namespace lens
