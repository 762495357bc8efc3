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
//   filter left ranks out); no span still open at shutdown.
// A link whose target's rank was left out by an export filter cannot be
// verified: it is counted, not failed.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "pipeline_view.h"
#include "step_stream.h"

namespace lens::tools {

struct Violation {
  std::int64_t step = -1;  // -1: not about one step
  int rank = -1;           // -1: not about one rank
  std::string what;
  std::string span;  // "name span-id" of the span at fault, or empty
};

// Checks a run a part at a time: each step's window as it is read (or the
// whole run at once), then what is left.
class RunChecker {
 public:
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
  // Links that point at ranks an export filter left out (known after finish).
  std::size_t unverifiable_links() const { return unverifiable_; }

 private:
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
                   const std::map<std::string, std::int64_t>& step_of_span);
  void check_step(const StepView& sv, const PipelineView& view, bool pipeline_scope,
                  const std::map<int, std::pair<int, int>>& pipeline_of);

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
};
CheckResult check_dir(const std::filesystem::path& dir, const StreamOptions& options = {});

// "step 3, rank 2: what [span-name span-id]"
std::string format_violation(const Violation& v);

}  // namespace lens::tools
