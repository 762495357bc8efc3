// `lens check`: verifies a run's cross-rank correlation and reports each
// violated invariant, in plain words, with the step, rank and span.
//
// The invariants, per step and, in pipeline scope, per (dp, tp) pipeline:
// - every rank's megatron.train_step is in one trace, and no trace id is
//   used by two steps;
// - the step spans of every rank but the source are roots (no parent);
// - every linked span (megatron.pp.recv_forward.linked) is on a non-first
//   stage, a child of its own rank's step span, with one link, to the
//   source's step span, and carries dl.pipeline_parallel.rank (its stage)
//   and dl.microbatch_id (0 <= id < M);
// - a stage s with p2p spans has exactly min(P-s-1, M) + [M > P-s-1]
//   linked spans per step (the warmup receives and the pre-1F1B one of
//   Megatron's 1F1B schedule);
// - in pipeline scope, every other pipeline's step span links to global
//   rank 0's step span;
// - the stage is below the pipeline size P;
// - no span id twice in a trace; on one rank, no child starts before its
//   parent; every link resolves to a span of the run, in the trace it names;
// - one file per rank, one run id, a file for every rank (unless an export
//   filter left ranks out); no span still open at shutdown (but those a
//   signal that stopped the process ended, lens.stopped_by: counted, and a
//   step some rank was in then is not held to every rank or the counts);
// - where a rank has megatron.forward_backward, the schedule's spans
//   (microbatch forward/backward, p2p, linked) of its step are inside it;
// - every rank's megatron.job span is in one trace, and every step span
//   links to its rank's job span;
// - with broadcast step contexts (not prefetched): the source's step span
//   starts first, before every other span of its step on any rank of its
//   pipeline, so every linked span starts after its link target. Start
//   times of two ranks are compared within a tolerance (StartOrder): on one
//   host's clock, or on rank 0's clock by the run's clock samples; ranks on
//   several hosts without samples are not compared.
// A link whose target's rank was left out by an export filter cannot be
// verified: it is counted, not failed.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "clock_alignment.h"
#include "pipeline_view.h"
#include "step_stream.h"

namespace lens::analysis {

struct Violation {
  std::int64_t step = -1;  // -1: not about one step
  int rank = -1;           // -1: not about one rank
  std::string what;
  std::string span;  // "name span-id" of the span at fault, or empty
};

// Whether, and within how much, start times of spans on different ranks
// can be compared.
struct StartOrder {
  // Two processes on one host read one clock; their span clocks differ by
  // the reading of their clock offsets (span_clock.h): microseconds.
  static constexpr std::int64_t kSameHostSlackNs = 50'000;

  bool judged = true;
  std::int64_t tolerance_ns = kSameHostSlackNs;
  // When set, start times are compared on rank 0's clock (must outlive the
  // checker).
  const ClockAlignment* clock = nullptr;
  std::string how;  // in words: on which clock, or why not judged

  // `hosts`: the files' host.name values (empty ones left out); `ranks`:
  // the files' ranks; `clock`: the run's samples, used when every rank but
  // 0 has some (then within their largest uncertainty more).
  static StartOrder of(const std::set<std::string>& hosts, const std::set<int>& ranks,
                       const ClockAlignment& clock);
  // A span's start on the clock the comparison uses.
  std::int64_t start_of(const SpanRow& span) const;
};

// Checks a run a part at a time: each step's window as it is read (or the
// whole run at once), then what is left.
class RunChecker {
 public:
  explicit RunChecker(StartOrder order = {}) : order_(std::move(order)) {}

  // Checks the steps of `view`, built from `part`, and the links and
  // truncation of `part`'s spans.
  void add(const Run& part, const PipelineView& view);

  // Finds the trace ids of the asked-for span ids that are in the run.
  using FindSpans = std::function<void(std::map<std::string, std::string>& trace_of_span)>;

  // `files`: every file's metadata, and in `spans` those not given to add().
  // `find_spans` is called once, only if some link's target was not among
  // the spans of its part or of `files`.
  std::vector<Violation> finish(const Run& files, const FindSpans& find_spans);

  std::size_t steps() const { return steps_; }
  // How start times were compared; "not judged" when every file's step
  // contexts are derived or prefetched (nothing orders the ranks' steps).
  std::string start_order() const;
  // Spans ended by the signal that stopped a process (lens.stopped_by),
  // which signal, and the steps some rank was in when it stopped.
  std::size_t stopped_spans() const { return stopped_spans_; }
  const std::string& stopped_by() const { return stopped_by_; }
  std::size_t interrupted_steps() const { return interrupted_steps_; }
  // Links that point at ranks an export filter left out (known after finish).
  std::size_t unverifiable_links() const { return unverifiable_; }

  // Split over processes (partial_analysis.h): a checker of a part of the
  // run's steps leaves the steps' trace ids to be judged when its state is
  // absorbed, in step order, by the checker that finishes the run.
  void check_as_part() { part_ = true; }
  void absorb(RunChecker&& part);

 private:
  friend struct CheckerBytes;  // a part's state as bytes (partial_analysis.cc)
  struct PendingLink {
    std::int64_t step;
    int rank;
    std::string name, span_id, trace, span;
  };
  struct LinkedCount {
    std::int64_t step;
    int rank, stage;
    std::size_t linked;
    bool has_p2p;
  };
  struct StageSeen {
    std::int64_t step;
    int rank, stage;
    std::string span;
  };
  void check_spans(const Run& part, const PipelineView& view,
                   const IdIndex<std::int64_t>& step_of_span);
  void check_step(const StepView& sv, const PipelineView& view, bool pipeline_scope,
                  const std::map<int, std::pair<int, int>>& pipeline_of, bool ordered);
  void check_start_order(const StepView& sv, const StepOnRank& source,
                         const std::vector<const StepOnRank*>& pipeline);
  void check_nesting(const StepView& sv, const StepOnRank& sr, const PipelineView& view);
  void check_job(std::vector<Violation>& out);
  template <typename Traces>
  void note_traces(std::int64_t step, const Traces& traces);

  // A part's step trace ids, with how many findings came before them.
  struct TraceUse {
    std::size_t found;
    std::int64_t step;
    std::vector<std::string> traces;
  };
  bool part_ = false;
  std::vector<TraceUse> trace_uses_;

  std::vector<Violation> found_;
  std::vector<PendingLink> pending_;
  std::vector<LinkedCount> linked_;                     // stages > 0
  std::vector<StageSeen> stages_;                       // judged against P at the end
  std::map<int, std::set<std::size_t>> linked_counts_;  // rank -> distinct counts per step
  std::map<std::string, std::int64_t> step_of_trace_;   // trace id -> the step that used it
  int pipeline_stages_ = 0;
  int declared_stages_ = 0;  // dl.pipeline_parallel.size, when a span says it
  int microbatches_ = 0;
  int virtual_stages_ = 1;
  std::size_t steps_ = 0;
  std::size_t unverifiable_ = 0;
  StartOrder order_;
  std::size_t stopped_spans_ = 0, interrupted_steps_ = 0;
  std::string stopped_by_;
  // The run's correlation was inferred (lens.inferred: Megatron-LM's own
  // traces, upstream_steps.h): its ranks' steps are matched by number, each
  // in a trace of its own, with no linked receives to count.
  bool inferred_ = false;
  bool unordered_seen_ = false;  // some part's step contexts do not order the steps
  bool ordered_seen_ = false;
  // Each rank's megatron.job span (trace id, span id), and how many of its
  // step spans link to each of the first targets their links name.
  std::map<int, std::pair<std::string, std::string>> job_of_rank_;
  std::map<int, std::map<std::string, std::size_t>> step_link_targets_;
  std::map<int, std::size_t> steps_of_rank_;
};

// The whole run, in memory.
std::vector<Violation> check_run(const Run& run, const PipelineView& view);

// The run in `dir`, read a step at a time (step_stream.h). Warnings of the
// reader go to `warnings`; `span_count` and `ranks` say what was read.
struct CheckResult {
  std::vector<Violation> violations;
  std::vector<std::string> warnings;
  std::size_t steps = 0, spans = 0, files = 0;
  std::size_t unverifiable_links = 0;  // their targets' ranks were filtered out of the export
  bool pipeline_scope = false;         // some file says lens.trace_scope=pipeline
  std::string inferred;                // what was inferred (lens.inferred), "" when nothing
  std::string start_order;             // how start times were compared (StartOrder)
  std::size_t stopped_spans = 0;       // ended by the signal that stopped a process
  std::size_t interrupted_steps = 0;   // some rank was in them when it stopped
  std::string stopped_by;              // that signal ("SIGTERM")
  // Spans that arrived after their step had been checked: the duplicates
  // are violations too (one per kept duplicate); the others were not
  // checked, which `lens check` fails on unless told to allow it.
  LateSpans late;
};
CheckResult check_dir(const OpenedRun& run, const StreamOptions& options = {});

// The pieces of check_dir a run split over processes uses (partial_analysis.h):
// how start times are compared (from the files' first lines and `clock`,
// which must outlive it),
// and the result from a checker that has seen every step window, the spans
// in no window (`rest`, every file's metadata), the windows' span count and
// what the stream left out.
StartOrder start_order_of(const OpenedRun& run, const ClockAlignment& clock);
CheckResult finish_check(const OpenedRun& run, RunChecker& checker, const Run& rest,
                         std::size_t window_spans, LateSpans late);

// "step 3, rank 2: what [span-name span-id]"
std::string format_violation(const Violation& v);

}  // namespace lens::analysis
