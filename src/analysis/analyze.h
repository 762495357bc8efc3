// `lens analyze` and `lens diff`: a run's steps explained and compared
// (docs/analysis.md). Each step is analysed as it is read (step_analysis.h);
// across steps each stage keeps a few numbers per step, so memory is one
// step's spans plus O(steps x stages) figures.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "clock_alignment.h"
#include "microbatch_variability.h"
#include "stage_verdicts.h"
#include "step_analysis.h"
#include "step_stream.h"

namespace lens::analysis {

struct StageAnalysis {
  int stage = -1, rank = -1, replica = 0, tensor = 0;
  std::size_t steps = 0;
  double compute_per_microbatch_ms = 0;   // median over steps
  double baseline_per_microbatch_ms = 0;  // median over its first kBaselineSteps steps
  double relative = 0;  // compute per microbatch / the fastest stage's (median of per-step ratios)
  double baseline_relative = 0;  // the same over its first steps (imbalance)
  double individual = 0;         // p95 over steps of compute per microbatch / its baseline
  double critical_share_p50 = 0, critical_share_p95 = 0;
  // The columns of its step (p50 over steps each, so they add up only
  // roughly; per step they add up exactly).
  double step_p50_ms = 0, compute_p50_ms = 0;
  double late_sender_p50_ms = 0, late_sender_p95_ms = 0, late_receiver_p50_ms = 0;
  double transfer_p50_ms = 0, sync_wait_p50_ms = 0, rest_p50_ms = 0;
  // At its TP collectives (collective_waits.h): the wait for the last peer,
  // and the peer it waited for longest over the run (-1: none).
  double collective_wait_p50_ms = 0;
  int collective_last_peer = -1;
  int unmatched_transfers = 0;  // over every step
  double idle_p50_ms = 0, warmup_idle_p50_ms = 0, cooldown_idle_p50_ms = 0;
  double imbalance_idle_p50_ms = 0, transfer_idle_p50_ms = 0, schedule_idle_p50_ms = 0;
  // What-ifs, p50 over steps (step_replay.h): how much more compute per
  // step it could take before the step lengthens; the step's change with
  // it at its expected cost (its baseline, or its peers' if lower), and at
  // the replica's median stage's cost (ms, negative = shorter).
  double slack_p50_ms = 0, gain_at_baseline_p50_ms = 0, gain_at_median_p50_ms = 0;
};

// A named straggler, with what fixing it would gain.
struct StragglerReport {
  Straggler who;
  int replica = 0, tensor = 0;  // its data-parallel replica and tensor-parallel rank
  double critical_share_p50 = 0;
  double gain_ms = 0, gain_share = 0;  // p50 over its slow steps; share of the step time
  // What it costs the other replicas: the mean of their ranks' waits at
  // the gradient sync, p50 over its slow steps (none with one replica).
  std::optional<double> others_sync_wait_ms;
  // Where they waited (StageFigures::sync_wait_at): each place and the
  // stages whose ranks waited there most often over its slow steps.
  std::vector<std::pair<std::string, std::vector<int>>> others_sync_wait_at;
  // What it costs its TP peers: the mean of their waits for it at the TP
  // collectives, p50 over its slow steps (none without TP collectives).
  std::optional<double> peers_collective_wait_ms;
};

struct ImbalanceReport {
  Imbalance what;
  double gain_ms = 0, gain_share = 0;  // with the stage at the median stage's cost
};

// One stage's figures in one step, and its what-ifs (step_replay.h): the
// rows of --json "what_if", one per step and stage.
struct StageStepFigures {
  std::int64_t step = 0;
  int replica = 0, tensor = 0, stage = -1, rank = -1;
  double step_ms = 0;  // the step's time (its longest step span)
  double slack_ms = 0, gain_at_baseline_ms = 0, gain_at_median_ms = 0;
  double sync_wait_ms = 0;        // at the gradient sync, for the last replica to arrive
  int sync_last_replica = -1;     // that replica (-1: no sync)
  std::string sync_wait_at;       // the span it waited in, or "untraced" (empty: no wait)
  double collective_wait_ms = 0;  // at the TP collectives, for the last peer
  int collective_last_peer = -1;  // the peer it waited for longest (-1: none)
  // The stage's own columns (StageFigures): its step span's time is
  // compute + late sender + late receiver + transfer + collective wait +
  // sync wait + rest exactly.
  int microbatches = 0;
  double stage_step_ms = 0, compute_ms = 0, compute_per_microbatch_ms = 0;
  double late_sender_ms = 0, late_receiver_ms = 0, transfer_ms = 0, rest_ms = 0;
  double idle_ms = 0, critical_share = 0;
};

// One step's figures and the replica that set it (the one that arrived
// last at the gradient sync): the rows of --json "set_by".
struct StepRow {
  std::int64_t step = 0;
  int replica = 0, tensor = 0;  // the pipeline of it whose compute ended last
  double step_ms = 0, critical_path_ms = 0;
  double critical_compute_ms = 0, critical_transfer_ms = 0, critical_all_reduce_ms = 0;
  double bubble = -1;  // the stages' mean idle share of the forward-backward window; -1 none
};

// One stretch of a step's critical path, for --json "critical_path" (kept
// only when asked: AnalyzeOptions::keep_critical_path).
struct PathRow {
  std::int64_t step = 0;
  PathSegment segment;
};
const char* path_segment_kind_name(PathSegment::Kind kind);

struct Analysis {
  int stages = 0, microbatches = 0;
  int virtual_stages = 1;  // model chunks per stage (the interleaved schedule)
  // Idle share of the forward-backward window: measured (p50 over steps of
  // the stages' mean) and the schedule's (P-1)/(VM+P-1).
  double bubble_p50 = -1, theoretical_bubble = -1;
  std::size_t steps = 0;  // steps with every stage's compute spans
  double step_p50_ms = 0, step_p95_ms = 0;
  double critical_path_p50_ms = 0, critical_compute_p50_ms = 0, critical_transfer_p50_ms = 0,
         critical_all_reduce_p50_ms = 0;
  std::vector<StageAnalysis> stages_analysis;  // by replica, then stage
  std::vector<StragglerReport> stragglers;
  // Ranks slow long enough but within the run's noise: not named, with
  // their evidence (stage_verdicts.h).
  std::vector<StragglerReport> not_named;
  std::vector<ImbalanceReport> imbalance;
  std::vector<StageStepFigures> stage_steps;  // by replica, tensor, stage, then step
  std::vector<StepRow> step_rows;             // by step
  std::vector<PathRow> critical_paths;        // by step, in time order (when kept)
  Variability variability;
  int replicas = 1, tensors = 1;
  // The slowest stage's relative score, whatever the verdict.
  int slowest_stage = -1;
  double slowest_relative = 0;
  // Computes that began before the neighbour's compute they need ended,
  // over every step (step_graph.h): clock errors alignment did not remove.
  int impossible_edges = 0;
  ClockReport clock;
  LateSpans left_out;  // spans the step windows left out (set by the caller)
  // What the run's correlation inferred (lens.inferred: Megatron-LM's own
  // traces, upstream_steps.h); "" when its spans say it all.
  std::string inferred;
};

// One step's contribution to an Analysis: its StepAnalysis less the graphs,
// with each stage's gain at its baseline worked out (which needs the graph
// and the stage's first steps). AnalysisBuilder adds records in step order;
// a record made elsewhere (another process, partial_analysis.h) adds the
// same figures.
struct StepRecord {
  std::int64_t step = 0;
  int stages = 0, virtual_stages = 1, microbatches = 0, impossible_edges = 0;
  double step_ms = 0, critical_path_ms = 0, critical_compute_ms = 0, critical_transfer_ms = 0,
         critical_all_reduce_ms = 0;
  int critical_replica = 0, critical_tensor = 0;
  std::vector<PathSegment> critical_path;  // when kept
  std::vector<MicrobatchCost> microbatch_costs;
  std::vector<PipelineKey> pipelines;        // the step's pipelines (its graphs')
  std::vector<StageFigures> stages_figures;  // by replica, then stage
  std::vector<double> gains;                 // per stages_figures: the step at its baseline
};

// Each series' (replica, tensor, stage) per-microbatch cost in its first
// kBaselineSteps steps: the baseline its gain is measured against.
using StepBaselines = std::map<std::tuple<int, int, int>, std::vector<double>>;

// The record of a complete step (`stages`: the pipeline's stages); updates
// `baselines` with the step's costs while they are among the first.
StepRecord record_step(const StepAnalysis& a, int stages, int virtual_stages,
                       StepBaselines& baselines, bool keep_critical_path);

// The record of every complete step of `view` (a window of `run`), in
// order: what AnalysisBuilder::add adds, for a builder elsewhere.
void for_each_record(const PipelineView& view, const Run& run, StepBaselines& baselines,
                     bool keep_critical_path, const std::function<void(const StepRecord&)>& each);

class AnalysisBuilder {
 public:
  // With `keep_critical_path`, every step's critical path is kept
  // (O(steps x microbatches x stages) segments).
  explicit AnalysisBuilder(bool keep_critical_path = false)
      : keep_critical_path_(keep_critical_path) {}
  void add(const PipelineView& view, const Run& run);
  // One complete step's record; records are added in step order.
  void add_record(const StepRecord& record);
  Analysis finish();

 private:
  struct Series {
    int rank = -1, replica = 0, tensor = 0;
    std::vector<std::int64_t> steps;
    std::vector<double> per_microbatch, compute, critical_share, step, late_sender, transfer,
        late_receiver, sync_wait, rest, idle, warmup, cooldown, imbalance, transfer_idle,
        schedule_idle, slack, gain_at_baseline, gain_at_median;
    std::vector<int> sync_last_replica, microbatches;
    std::vector<std::string> sync_wait_at;
    std::vector<double> collective_wait;
    std::vector<std::map<int, double>> collective_waited_for;  // TP rank -> wait, per step
    std::vector<double> step_time;  // the step's time (the longest step span), for shares
    int unmatched = 0;
  };
  std::map<std::tuple<int, int, int>, Series> series_;  // (replica, tensor, stage)
  // finish()'s parts: a stage's figures over the run, its rows per step,
  // and what fixing each verdict would gain.
  using Fastest = std::map<std::pair<int, std::int64_t>, double>;  // (pipeline, step) -> ms
  static StageAnalysis stage_analysis(const Series& s, int stage, double baseline_ms,
                                      double baseline_relative, const Fastest& fastest,
                                      int pipeline);
  static void add_stage_steps(const Series& s, const StageAnalysis& st,
                              std::vector<StageStepFigures>& rows);
  StragglerReport straggler_report(const Straggler& who, const Series& s) const;
  static ImbalanceReport imbalance_report(const Imbalance& what, const Analysis& out);
  std::vector<double> step_ms_, critical_ms_, critical_compute_ms_, critical_transfer_ms_,
      critical_all_reduce_ms_, bubble_;
  std::vector<StepRow> step_rows_;
  std::vector<PathRow> critical_paths_;
  bool keep_critical_path_ = false;
  StepBaselines baselines_;
  MicrobatchVariability variability_;
  int stages_ = 0, microbatches_ = 0, virtual_stages_ = 1, impossible_edges_ = 0, replicas_ = 1,
      tensors_ = 1;
  std::size_t steps_ = 0;
};

Analysis analyze_dir(const OpenedRun& run, const StreamOptions& options,
                     std::vector<std::string>* warnings, bool keep_critical_path = false);

struct AnalyzeOptions {
  bool raw_clock = false;  // each rank's clock as recorded (--raw-clock)
  bool keep_critical_path = false;
  // The run's clock alignment when the caller has read it already (else
  // read here unless raw_clock).
  const ClockAlignment* clock = nullptr;
  // Reading progress, as StreamOptions::progress.
  std::function<void(std::uintmax_t, std::uintmax_t)> progress;
};

// `lens analyze RUN`: the run's clock alignment read first (unless
// raw_clock), then every step analysed on it; the result's clock and
// left_out filled. The readers' warnings go to `warnings`.
Analysis analyze_run(const OpenedRun& run, const AnalyzeOptions& options,
                     std::vector<std::string>* warnings);
std::string format_table(const Analysis& a);
// `lens analyze --per-step`: a row per step and stage with the columns that
// add up to its step span (the table's are medians, which need not).
std::string format_per_step(const Analysis& a);
// The same rows in step order (stage_steps is by stage, then step).
std::vector<StageStepFigures> by_step(const Analysis& a);
// The verdict lines of the table: stragglers, imbalance, variable work.
std::string format_verdicts(const Analysis& a);
// `lens analyze --json`: the document (json_text.h: as nlohmann::json's
// dump(1) writes it).
std::string format_json(const Analysis& a);
// Per stage, run A against run B, and the stage that changed most.
std::string format_diff(const Analysis& a, const Analysis& b);

}  // namespace lens::analysis
