// Internal header of the pp part: the process-wide counters behind
// pipeline_stats(), shared by the broadcast and the linked span.
#pragma once

#include <atomic>
#include <cstdint>

namespace lens::detail {

struct PipelineCounters {
  std::atomic<std::uint64_t> broadcasts{0};
  std::atomic<std::uint64_t> frames_malformed{0};
  std::atomic<std::uint64_t> frames_without_context{0};
  std::atomic<std::uint64_t> step_mismatches{0};
  std::atomic<std::uint64_t> linked_spans{0};
  std::atomic<std::uint64_t> linked_spans_without_link{0};
  std::atomic<std::uint64_t> derived_steps{0};
  std::atomic<std::uint64_t> step_checks{0};
};

PipelineCounters& pipeline_counters();

inline void count(std::atomic<std::uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace lens::detail
