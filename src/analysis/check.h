// `lens check`: verifies a run's cross-rank correlation and reports each
// violated invariant, in plain words, with the step and rank.
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

 private:
  struct PendingLink {
    std::int64_t step;
    int rank;
    std::string name, trace, span;
  };
  struct LinkedCount {
    std::int64_t step;
    int rank, stage;
    std::size_t linked;
  };
  void check_spans(const Run& part, const PipelineView& view,
                   const std::map<std::string, std::int64_t>& step_of_span);

  std::vector<Violation> found_;
  std::vector<PendingLink> pending_;
  std::vector<LinkedCount> linked_;                     // stages > 0 with linked spans
  std::map<int, std::set<std::size_t>> linked_counts_;  // rank -> distinct counts per step
  int pipeline_stages_ = 0;
  std::size_t steps_ = 0;
};

// The whole run, in memory.
std::vector<Violation> check_run(const Run& run, const PipelineView& view);

// The run in `dir`, read a step at a time (step_stream.h). Warnings of the
// reader go to `warnings`; `span_count` and `ranks` say what was read.
struct CheckResult {
  std::vector<Violation> violations;
  std::vector<std::string> warnings;
  std::size_t steps = 0, spans = 0, files = 0;
  bool pipeline_scope = false;  // some file says lens.trace_scope=pipeline
};
CheckResult check_dir(const std::filesystem::path& dir, const StreamOptions& options = {});

std::string format_violation(const Violation& v);

}  // namespace lens::tools
