// `lens analyze`, `lens summary` and `lens check` split over the threads of
// one process:
// the split an MPI job makes over its processes (partial_analysis.h), each
// range of steps read and analysed on a thread of its own, from its own
// byte ranges of the files, then merged in step order. Each thread reads,
// parses and analyses its own spans, so nothing crosses between cores but
// a range's rows, and the result is the one stream's, byte for byte.
//
// The step index is the one an MPI run saved beside the run when it still
// names the files as they are, else built (a share of the files per
// thread) and kept in memory: a read-only command writes nothing into the
// run. The clock samples are the ones one stream reads
// (read_clock_alignment), added in file order: taken in the same reading
// of each file as its index (index_and_clock_share), or read on their own
// when the index was saved.
//
// Thread safety: plain functions; each starts and joins its own threads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analyze.h"
#include "check.h"
#include "partial_analysis.h"
#include "summary.h"

namespace lens::analysis {

// nullopt where the split does not apply (fewer than 2 threads, a run
// not in lens's layout, fewer than 2 steps, a file whose steps go back,
// cuts_cleanly) or where its ranges could see
// less than one stream does: spans left out of their step (late, or
// delivered twice: a repeat whose first copy another range read is counted
// late there, or, of a span of no step, shows as that span twice among the
// merged spans of no step) and, for check, any violation (a trace two steps share, a
// link count, judged across ranges). The caller then reads as one stream,
// so a run with those faults costs two readings and says what one stream
// says. ReadError as the one stream would raise it: of the earliest range
// that fails.
// `progress`: the ranges' reading as one line (the bytes all have read),
// from one thread. `keep_critical_path`: every step's critical path kept, as
// AnalyzeOptions::keep_critical_path keeps it.
std::optional<Analysis> analyze_on_threads(const OpenedRun& run, bool raw_clock, int threads,
                                           std::vector<std::string>* warnings,
                                           const ReadProgress& progress = {},
                                           bool keep_critical_path = false);
// `lens analyze RUN` as the command reads it: split over `threads` where
// analyze_on_threads applies, else one stream (analyze_run); the options'
// clock alignment is not used by the split, which reads its own.
Analysis analyze_on_threads_or_one_stream(const OpenedRun& run, const AnalyzeOptions& options,
                                          int threads, std::vector<std::string>* warnings);
std::optional<Summary> summary_on_threads(const OpenedRun& run, bool raw_clock, int threads,
                                          std::vector<std::string>* warnings,
                                          const ReadProgress& progress = {});
std::optional<CheckResult> check_on_threads(const OpenedRun& run, int threads,
                                            const ReadProgress& progress = {});

}  // namespace lens::analysis
