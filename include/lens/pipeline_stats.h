/// \file
/// Process-wide counters of the pipeline-parallel integration, so what went
/// wrong without stopping training (a malformed frame, a linked span that had
/// no context to link to) is visible and testable.
///
/// Thread safety: counters are atomic; pipeline_stats() may be called anytime.
#pragma once

#include <cstdint>

namespace lens {

struct PipelineStats {
  std::uint64_t broadcasts = 0;                 ///< broadcast_trace_context calls completed
  std::uint64_t frames_malformed = 0;           ///< received frames that did not decode
  std::uint64_t frames_without_context = 0;     ///< well-formed frames that said "no context"
  std::uint64_t step_mismatches = 0;            ///< frame's step differed from the local step
  std::uint64_t linked_spans = 0;               ///< linked spans created with their link
  std::uint64_t linked_spans_without_link = 0;  ///< created without a valid remote context
  std::uint64_t derived_steps = 0;  ///< step contexts derived without a collective (derived mode)
  std::uint64_t step_checks = 0;    ///< step check all-gathers completed (step_check.h)
};

PipelineStats pipeline_stats();
void reset_pipeline_stats();

}  // namespace lens
