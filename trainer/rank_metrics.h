// A lens-train rank's live metrics (docs/metrics.md): its step figures on
// an OpenMetrics endpoint, by OTLP and as OTLP/JSON lines beside its trace
// file, the histograms' exemplars pointing at the sampled steps' spans;
// with --metrics-job, rank 0 serving every rank's, brought up to date at
// each meeting; the live straggler scores.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lens/metrics.h"
#include "lens/metrics_endpoint.h"
#include "lens/metrics_exporter.h"
#include "lens/span_context.h"
#include "lens/step_figures.h"
#include "lens/step_meeting.h"
#include "lens/step_metrics.h"
#include "lens/telemetry.h"
#include "train_options.h"

namespace lens::train {

// Where a rank is in the job: its global rank and its place on each axis.
struct RankPlace {
  int rank = 0;
  int stage = 0;
  int replica = 0;
  int tensor = 0;
};

class RankMetrics {
 public:
  /// Turns the step figures on when anything reads them, makes what the
  /// options ask for and says where the endpoint serves. `telemetry` may be
  /// null (not traced).
  RankMetrics(const TrainOptions& o, const RankPlace& place, Telemetry* telemetry,
              const MetricsExportConfig& export_config);
  RankMetrics(const RankMetrics&) = delete;
  RankMetrics& operator=(const RankMetrics&) = delete;

  /// With --metrics-job: the words each rank adds to the meeting (its
  /// encoded step metrics); else empty.
  std::function<std::vector<std::int64_t>()> meeting_words();
  /// What a meeting brought: the straggler scores, every rank's metrics
  /// (rank 0, --metrics-job), and the metrics line.
  void met(const MeetingOutcome& outcome);
  /// A step done: its time, what its spans measured, its span's context
  /// (the exemplar); every 10 steps the span account too.
  void record_step(int step, double seconds, const StepFigureTotals& figures,
                   const SpanContext& step_context);
  /// After the last step: the span account and the metrics line.
  void steps_done();
  /// At the end: the OTLP totals, and the endpoint kept for a last scrape
  /// as --metrics-linger says.
  void finish();

 private:
  void account_spans();
  void write_line();

  const TrainOptions& options_;
  RankPlace place_;
  Telemetry* telemetry_;
  MetricRegistry metrics_;
  std::int64_t start_unix_ns_ = 0;
  std::unique_ptr<StepMetrics> step_metrics_;
  std::unique_ptr<OtlpMetricsExporter> exporter_;
  // --metrics-job: rank 0's, one a rank.
  MetricRegistry job_registry_;
  std::vector<std::unique_ptr<StepMetrics>> job_metrics_;
  std::vector<Gauge*> job_scores_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
  Gauge* straggler_score_ = nullptr;
  std::string file_;  // rank-<r>.metrics.jsonl, when the traces go to files
};

}  // namespace lens::train
