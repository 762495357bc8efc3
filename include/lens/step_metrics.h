/// \file
/// StepMetrics: a rank's step figures as metrics (docs/metrics.md).
///
///   lens::set_step_figures(true);              // the spans time their figures
///   lens::MetricRegistry registry;
///   lens::StepMetrics metrics(registry, {{"rank", "3"}, {"stage", "1"}});
///   for (step ...) {
///     ... the step, its spans opened as always ...
///     metrics.record_step(seconds, lens::take_step_figures(), step_span.context(), now);
///   }
///
/// Histograms, in seconds, with the buckets of kStepBounds:
/// lens_step_duration_seconds (the step), lens_step_compute_seconds,
/// lens_step_p2p_wait_seconds, lens_step_p2p_send_seconds,
/// lens_step_all_reduce_seconds, lens_step_optimizer_seconds (the step's
/// figures; a figure no span of the step counted toward is not recorded);
/// with a sampled step span, each keeps the step as its bucket's exemplar.
/// Counters: lens_steps_total, and lens_spans_ended_total /
/// lens_spans_dropped_total brought up to the telemetry's account
/// (record_spans).
///
/// Thread safety: as MetricRegistry's metrics: from any thread.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "lens/metrics.h"
#include "lens/step_figures.h"

namespace lens {

/// Step-time buckets: 5 ms to 120 s.
inline constexpr std::array<double, 14> kStepBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                        1,     2.5,  5,     10,   30,  60,   120};
inline const std::vector<double> kStepBounds(kStepBuckets.begin(), kStepBuckets.end());

class StepMetrics {
 public:
  /// Makes the families in `registry` (which must outlive this) with
  /// `labels` on every metric.
  StepMetrics(MetricRegistry& registry, const MetricLabels& labels);

  /// One step: `step_seconds` from its start to its end, the figures its
  /// thread's spans measured, the step span's context (the exemplar, when
  /// sampled) and the time of the measurement (Unix ns) for the exemplar.
  void record_step(double step_seconds, const StepFigureTotals& figures,
                   const SpanContext& step = {}, std::int64_t time_unix_ns = 0);

  /// The telemetry's span account so far (SpanAccount: ended, dropped).
  void record_spans(std::uint64_t ended, std::uint64_t dropped);

  /// These metrics as kWords fixed-size words, for one rank that serves the
  /// job's (a job-wide endpoint): every histogram's buckets, count, sum and
  /// its latest exemplar, and the counters.
  /// A version word; per histogram its buckets' counts, count, sum and an
  /// exemplar (present, value, time, trace id as two words, span id); the
  /// three counters.
  static constexpr std::size_t kHistogramWords = (kStepBuckets.size() + 1) + 2 + 6;
  static constexpr std::size_t kWords = 1 + kStepFigureCount * kHistogramWords + 3;
  std::vector<std::int64_t> encode() const;
  /// Takes another rank's encoded metrics as these (its latest exemplar per
  /// histogram kept). False, and nothing changed, for words that are not
  /// step metrics (wrong size or version, counts that do not add up).
  bool assign(const std::vector<std::int64_t>& words);

 private:
  Histogram& step_;
  std::array<Histogram*, kStepFigureCount> figures_{};  // [kNone] stays null
  Counter& steps_;
  Counter& spans_ended_;
  Counter& spans_dropped_;
};

}  // namespace lens
