#include "rank_metrics.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "lens/semconv.h"

namespace lens::train {
namespace {

constexpr const char* kScoreHelpTail =
    "compute over the last window against its own start or its stage's other ranks, whichever "
    "is larger (1: as expected; the live rule names 1.5 and more).";

MetricLabels labels_of(const std::string& run, int rank, int stage, int replica, int tensor) {
  return {{"run", run},
          {"rank", std::to_string(rank)},
          {"stage", std::to_string(stage)},
          {"replica", std::to_string(replica)},
          {"tensor", std::to_string(tensor)}};
}

}  // namespace

RankMetrics::RankMetrics(const TrainOptions& o, const RankPlace& place, Telemetry* telemetry,
                         const MetricsExportConfig& export_config)
    : options_(o), place_(place), telemetry_(telemetry) {
  // The spans time the step figures, recorded or not, when anything reads
  // them.
  if (o.metrics_port >= 0 || o.live_every > 0 || export_config.otlp) set_step_figures(true);
  start_unix_ns_ = telemetry ? telemetry->now_unix_ns()
                             : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  const std::string run = telemetry ? telemetry->config().run_id : std::string();
  const MetricLabels labels =
      labels_of(run, place.rank, place.stage, place.replica, place.tensor);
  if (o.metrics_port >= 0 || export_config.otlp)
    step_metrics_ = std::make_unique<StepMetrics>(metrics_, labels);
  if (export_config.otlp) {
    Resource resource;
    if (telemetry) {
      resource = telemetry->resource();
    } else {  // not traced: enough to tell the rank's series apart
      resource.set("service.name", std::string("megatron-lm"));
      resource.set(semconv::kRank, std::int64_t{place.rank});
    }
    exporter_ = std::make_unique<OtlpMetricsExporter>(
        metrics_, std::move(resource), export_config.options, export_config.interval,
        start_unix_ns_);
  }
  // --metrics-job: rank 0 alone serves the job's metrics, every rank's
  // step metrics under its labels.
  if (o.metrics_job && place.rank == 0) {
    for (int r = 0; r < o.world(); ++r) {
      const MetricLabels rl = labels_of(run, r, o.stage_of(r), o.replica_of(r), o.tensor_of(r));
      job_metrics_.push_back(std::make_unique<StepMetrics>(job_registry_, rl));
      if (o.live_every > 0)
        job_scores_.push_back(&job_registry_.gauge(
            "lens_straggler_score", std::string("The rank's ") + kScoreHelpTail, {}, rl));
    }
  }
  if (o.metrics_port >= 0 && (!o.metrics_job || place.rank == 0)) {
    endpoint_ = std::make_unique<MetricsEndpoint>(
        o.metrics_job ? job_registry_ : metrics_, o.metrics_host,
        o.metrics_port == 0 ? 0 : o.metrics_port + (o.metrics_job ? 0 : place.rank));
    std::fprintf(stderr, "lens-train: rank %d: %s at http://%s:%d/metrics\n", place.rank,
                 o.metrics_job ? "the job's metrics" : "metrics", o.metrics_host.c_str(),
                 endpoint_->port());
  }
  if (o.live_every > 0 && endpoint_)
    straggler_score_ = &metrics_.gauge("lens_straggler_score",
                                       std::string("This rank's ") + kScoreHelpTail, {}, labels);
  // The same metrics as OTLP/JSON lines beside the rank's trace file, one
  // cumulative request at each live meeting and at the end.
  if (step_metrics_ && telemetry && telemetry->trace_file().ends_with(".otlp.jsonl")) {
    const std::string& f = telemetry->trace_file();
    file_ = f.substr(0, f.size() - std::string(".otlp.jsonl").size()) + ".metrics.jsonl";
  }
}

std::function<std::vector<std::int64_t>()> RankMetrics::meeting_words() {
  if (!options_.metrics_job) return {};
  return [this] { return step_metrics_->encode(); };
}

void RankMetrics::met(const MeetingOutcome& outcome) {
  if (!outcome.scores.empty()) {
    if (straggler_score_ != nullptr)
      straggler_score_->set(outcome.scores[static_cast<std::size_t>(place_.rank)]);
    for (std::size_t r = 0; r < job_scores_.size(); ++r) job_scores_[r]->set(outcome.scores[r]);
  }
  for (std::size_t r = 0; r < job_metrics_.size() && r < outcome.words.size(); ++r)
    if (!job_metrics_[r]->assign(outcome.words[r]))
      std::fprintf(stderr, "lens-train: rank 0: rank %zu's metrics did not decode\n", r);
  write_line();
}

void RankMetrics::record_step(int step, double seconds, const StepFigureTotals& figures,
                              const SpanContext& step_context) {
  if (!step_metrics_) return;
  step_metrics_->record_step(seconds, figures, step_context,
                             telemetry_ ? telemetry_->now_unix_ns() : 0);
  if ((step + 1) % 10 == 0) account_spans();
}

void RankMetrics::steps_done() {
  account_spans();
  write_line();
}

void RankMetrics::account_spans() {
  if (!step_metrics_ || !telemetry_) return;
  const SpanAccount account = SpanAccount::of(telemetry_->stats());
  step_metrics_->record_spans(account.ended, account.dropped());
}

void RankMetrics::write_line() {
  if (file_.empty()) return;
  std::ofstream out(file_, std::ios::app);
  out << metrics_.otlp_json(telemetry_->resource(), start_unix_ns_, telemetry_->now_unix_ns())
      << '\n';
}

void RankMetrics::finish() {
  const int rank = place_.rank;
  const double linger = options_.metrics_linger_s;
  if (exporter_) exporter_->shutdown();  // the totals at the end
  if (endpoint_ && linger > 0) {         // a last scrape or two
    std::fprintf(stderr, "lens-train: rank %d: steps done; metrics served %g s more\n", rank,
                 linger);
    std::this_thread::sleep_for(std::chrono::duration<double>(linger));
  } else if (endpoint_ && linger < 0) {
    // Until the final figures were scraped once: they were set at the last
    // meeting, before the job's closing barrier, so the next answer holds
    // them.
    const std::uint64_t before = endpoint_->stats().scrapes;
    std::fprintf(stderr,
                 "lens-train: rank %d: steps done; metrics served until the next scrape (at most "
                 "%g s; --metrics-linger 0 stops at once)\n",
                 rank, kFinalScrapeWaitS);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(kFinalScrapeWaitS);
    while (endpoint_->stats().scrapes == before && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (endpoint_->stats().scrapes == before)
      std::fprintf(stderr, "lens-train: rank %d: the final metrics were not scraped in %g s\n",
                   rank, kFinalScrapeWaitS);
  }
}

}  // namespace lens::train
