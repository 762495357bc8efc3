// `lens report`: a run on one page (docs/report.md). One self-contained
// HTML file, opened from disk with no network: step time over the run
// (p50 and p95 marked, stragglers and imbalance where they began), each
// stage's time per step split into compute, waits, transfer and the rest,
// the critical path's share per stage, the measured bubble against the
// schedule's, each rank's clock offset and uncertainty over the run, the
// wave of the median and of the slowest step with their critical paths,
// and the `lens analyze` table.
//
// The numbers are `lens analyze`'s (analyze_run); the charts are drawn by
// Chart.js, read from Debian's libjs-chart.js at run time and embedded.
// Over max_points steps, series are averaged over buckets of steps (step
// time keeps each bucket's maximum too), so a long run's page stays small.
// Memory: the analysis's O(steps x stages) figures and two steps' spans.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "opened_run.h"

namespace lens::tools {

// Where Chart.js is read from: LENS_CHART_JS, else Debian's libjs-chart.js.
std::filesystem::path chart_js_path();

struct ReportOptions {
  bool raw_clock = false;
  std::size_t max_points = 1000;  // points per series before steps are bucketed
  std::filesystem::path chart_js = chart_js_path();
  std::function<void(std::uintmax_t, std::uintmax_t)> progress;  // reading, as StreamOptions
};

struct Report {
  std::string html;
  std::size_t steps = 0;                             // steps analysed
  std::size_t bucket = 1;                            // steps per point
  std::int64_t median_step = -1, slowest_step = -1;  // the waves drawn (-1: none)
  std::string clock;                                 // the clock report's line
  std::vector<std::string> warnings;
};

// Throws analysis::ReadError for a bad run, std::runtime_error when
// Chart.js cannot be read.
Report render_report(const analysis::OpenedRun& run, const ReportOptions& options);

}  // namespace lens::tools
