// Reading a run's OTLP-JSON-lines files back, and checking the step
// protocol's invariants across ranks. Shared by the multi-process tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lens::testing {

struct ExportedSpan {
  std::string file;
  std::string trace_id, span_id, parent_span_id, name;
  std::int64_t start_ns = 0, end_ns = 0;
  std::map<std::string, std::string> attributes;  // scalars as text
  std::map<std::string, std::string> resource;
  std::vector<std::pair<std::string, std::string>> links;  // (trace id, span id)
  std::int64_t int_attr(const std::string& key) const;
};

// Every span of every *.otlp.jsonl file in dir (via the `lens` command's
// reader; its ReadError names file and line on malformed input). The
// resource map holds dl.rank, service.name and nemo.run.id.
std::vector<ExportedSpan> read_run(const std::filesystem::path& dir);

struct CorrelationExpectation {
  int ranks = 0;
  int steps = 0;
  // Expected linked spans per step on a rank of stage s (0 for stage 0).
  std::function<int(int stage)> linked_per_step;
};

// Violations in plain words; empty when all invariants hold.
std::vector<std::string> check_correlation(const std::vector<ExportedSpan>& spans,
                                           const CorrelationExpectation& expect);

// The clock skew the multi-process tests inject through the test aid when
// LENS_TEST_CLOCK_SKEW is set: milliseconds of offset and tens of ppm of
// drift, per rank (rank 0 first; 4 ranks at most).
struct InjectedClocks {
  std::vector<double> offset_us, drift_ppm;
};
InjectedClocks test_clock_skew();

// Violations of the clock samples: a rank with no lens.clock_sync span, or
// a sample further from the injected truth (rank 0's skew minus the rank's)
// than max(50 µs, the sample's own uncertainty).
std::vector<std::string> check_clock_samples(const std::vector<ExportedSpan>& spans,
                                             const InjectedClocks& injected, int ranks);

}  // namespace lens::testing
