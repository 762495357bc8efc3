// Reading a run one step at a time, so that a long run's files never have
// to fit in memory.
//
// The files of a run are read side by side, a line at a time, always the
// file that is furthest behind. A rank's step is complete when its
// megatron.train_step span (with dl.step) arrives: the spans of a step end
// before its step span does, and the exporters write spans in the order they
// end. Once every file has completed a step (or ended), that step's spans of
// all ranks are handed over as one window and then dropped. What is held at
// any time is the steps in flight between the files plus the spans that
// belong to no step (the job span, spans of a step whose step span is not
// recorded); a run recorded without the `step` group therefore still ends
// up whole in memory.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <nlohmann/json.hpp>

#include "run_reader.h"

namespace lens::analysis {

// One step of a run: every file's metadata (rank, world size, run id, ...)
// and, in each file's `spans`, only that rank's spans of this step.
struct StepWindow {
  std::int64_t step = 0;
  Run run;
};

class ClockAlignment;
struct ClockReport;

// A span that arrived in a file after its step had been handed over (its
// step span came after later steps', or its batch was delivered again).
struct LateSpan {
  int rank = -1;
  std::filesystem::path path;
  std::size_t line = 0;  // 1-based
  std::int64_t step = -1;
  std::string name, span_id;
};

// What the stream left out of the step windows.
struct LateSpans {
  static constexpr std::size_t kKept = 16;
  // Per file, the span ids of this many of the latest handed-over spans are
  // remembered to recognise a span delivered twice; older ones are
  // forgotten (and `forgot` says so).
  static constexpr std::size_t kRememberedIds = 1 << 18;
  static constexpr std::size_t kRememberedTraces = 1 << 16;  // handed-over traces, per file

  std::size_t duplicates = 0;  // the same span id as a span of the same file already handed over
  std::size_t late = 0;        // the others: genuinely late, left out of the step windows
  std::vector<LateSpan> duplicate_list, late_list;  // the first kKept of each
  bool forgot = false;

  // "" when nothing was left out; else one line for a view's output.
  std::string describe() const;
  nlohmann::json to_json() const;
};

// The threads a stream uses unless told (StreamOptions::threads): what
// set_default_read_threads set (`lens --threads N`), else the machine's
// cores.
int default_read_threads();
void set_default_read_threads(int threads);
// Whether set_default_read_threads chose a number (else: the cores).
bool read_threads_chosen();

struct StreamOptions {
  // Called after each line read with (bytes read, bytes in all files).
  std::function<void(std::uintmax_t, std::uintmax_t)> progress;
  // Stop reading once this step has been handed over (the returned files
  // then hold what was read so far).
  std::int64_t stop_after_step = std::numeric_limits<std::int64_t>::max();
  // When set, every span handed over is on rank 0's clock (the samples of
  // read_clock_alignment).
  const ClockAlignment* clock = nullptr;
  // When set, each step has the causality pass (enforce_transfer_order),
  // which moves receives only when `clock` is set; its counts are added to
  // the report's moves, and ranks with spans `clock` could not align to its
  // unaligned_ranks.
  ClockReport* clock_report = nullptr;
  // When set, spans of steps already handed over are counted here (and
  // kept in the returned files' spans, as before).
  LateSpans* late = nullptr;
  // A part of the run (partial_analysis.h): steps before this one are read
  // and handed over unseen (not to on_step, not aligned or counted), and
  // each file named here (by file name) is read from its start: a byte
  // offset and the number of the line there.
  std::int64_t first_step = std::numeric_limits<std::int64_t>::min();
  struct Start {
    std::uint64_t offset = 0;
    std::size_t line = 1;
  };
  std::map<std::string, Start> starts;
  // The lines of a file (by file name; a file not named: all of them) whose
  // spans outside the step windows (of no step, late, repeated) are this
  // stream's to return and count: parts that each read a line at their
  // boundary count its spans once. Lines after `after`, through `through`.
  struct Owned {
    std::size_t after = 0;
    std::size_t through = std::numeric_limits<std::size_t>::max();
  };
  std::map<std::string, Owned> owned;
  // What a part of the run needs beyond the returned files (when set): per
  // file name, how many of its returned spans are late (the last ones; the
  // files' warnings then leave them out, the caller words them with
  // late_warning) and the line of each of the others; and the ids of spans
  // from lines this stream does not own that it handed over in its windows
  // (the part that owns those lines leaves them out of its spans of no step).
  struct PartTally {
    std::map<std::string, std::size_t> late;
    std::map<std::string, std::vector<std::size_t>> open_lines;
    std::vector<std::string> claimed;
  };
  PartTally* part_tally = nullptr;
  // Threads: with 2 or more, the windows are assembled on a thread of their
  // own while on_step runs on the caller's, up to two windows ahead, and
  // the files' lines are parsed ahead on threads - 1 more (LinesAhead:
  // each file's lines in its order, the same rows whichever thread parsed
  // them); on_step is called in the same order with the same windows (and
  // the options' counts are filled by the assembling thread, to be read
  // after the call returns). 1: everything on the caller's thread.
  int threads = default_read_threads();
};

// The warning a file gets for spans left out of the windows.
std::string late_warning(const std::filesystem::path& path, std::size_t spans);

// Options for a view on one clock: every span handed over on `clock`'s
// reference (when it has samples), the causality pass counted in `report`
// and what the stream leaves out in `late` (either may be null).
StreamOptions aligned_stream(const ClockAlignment& clock, ClockReport* report, LateSpans* late);

// Calls `on_step` for every step, in increasing step number. Returns the
// files' metadata and, in their `spans`, the spans that belong to no step
// window (those of each trace together, traces in the order they were first
// read), then the late ones, with the files' warnings. Throws ReadError for
// unreadable or malformed input (naming the file and line).
Run stream_steps(const OpenedRun& run, const std::function<void(StepWindow&)>& on_step,
                 const StreamOptions& options = {});

// Calls `on_line_spans` with each line's spans of every file, in file order,
// keeping nothing: for a second pass that looks for a few spans.
void scan_spans(const OpenedRun& run,
                const std::function<void(const RankFile&, const std::vector<SpanRow>&)>& on_spans);

}  // namespace lens::analysis
