// `lens check`: verifies a run's cross-rank correlation and reports each
// violated invariant, in plain words, with the step and rank.
#pragma once

#include <string>
#include <vector>

#include "pipeline_view.h"

namespace lens::tools {

struct Violation {
  std::int64_t step = -1;  // -1: not about one step
  int rank = -1;           // -1: not about one rank
  std::string what;
};

std::vector<Violation> check_run(const Run& run, const PipelineView& view);

std::string format_violation(const Violation& v);

}  // namespace lens::tools
