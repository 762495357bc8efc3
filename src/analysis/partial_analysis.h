// `lens analyze` split over processes (docs/scale.md): the pieces an MPI
// job (tools/mpi_analyze.cc) moves between its processes, without MPI.
//
//  1. step_index: for each rank file, where each step ends (the line of
//     its step span: a byte offset and a line number), found by a scan for
//     dl.step that parses nothing else; kept beside the run
//     (.lens-step-index) and used again while the files are unchanged.
//  2. split_steps: the run's steps in K contiguous ranges.
//  3. clock_samples: every lens.clock_sync span, as bytes; every process
//     builds the same ClockAlignment from them (clock_from_samples).
//  4. analyze_part: one range's steps, each file read from the line of the
//     step before the range (its earlier bytes are never read), as rows:
//     each complete step's StepRecord (analyze.h), with what the stream
//     counted (causality moves, unaligned ranks, spans left out) and the
//     files' warnings. A range after the first also reads the run's first
//     steps, for the stages' baselines.
//  5. merge_parts: the rows of every range, in order, through the same
//     AnalysisBuilder as one process: the same figures, the same bytes.
//
// Each part also owns the lines of each file from the line where its reading
// begins (not included) to the line where the next part's begins: the spans
// of those lines outside the step windows (of no step, late, repeated) are
// its to send and count, so the merge returns the files one stream would
// have (the summary's tail selection and the check's job, links and
// truncation read them). `lens summary` and `lens check` split the same way.
//
// Parts are plain bytes (doubles as their bits), for any transport.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analyze.h"
#include "check.h"
#include "clock_alignment.h"
#include "summary.h"

namespace lens::analysis {

struct StepEnd {
  std::int64_t step = 0;
  std::uint64_t offset = 0;  // the byte where the line holding the step span begins
  std::size_t line = 0;      // that line's number (1-based)
};

struct FileSteps {
  std::string name;  // the file's name in the run's directory
  std::uint64_t size = 0;
  std::int64_t modified = 0;  // last write time, as the file system counts it
  std::vector<StepEnd> steps;  // in file order
};

struct StepIndex {
  std::vector<FileSteps> files;  // as OpenedRun::files sorts them
  // Every step of the run, ascending.
  std::vector<std::int64_t> steps() const;
};

// The index of the run: read from <input>/.lens-step-index (the input
// as named, when it is a directory) when it names the same files, sizes
// and times, else built and written there (when the directory is
// writable). ReadError for an unreadable run.
StepIndex step_index(const OpenedRun& run);
// The same in pieces, for processes that build it together: the saved
// index when it names the files as they are now; the index of every
// `shares`-th file from the `share`-th (as OpenedRun::files sorts them); the shares
// of 0 .. K-1, in that order, as one index (saved beside the run).
std::optional<StepIndex> saved_step_index(const OpenedRun& run);
StepIndex index_share(const OpenedRun& run, int share, int shares);
// index_share and the clock samples of the same files
// (read_file_clock_samples) from one reading of each file: per file its
// samples, and the error the clock pass would have raised on it (nullptr:
// none; a file that cannot be opened among them), by which its index may
// be cut short.
struct IndexAndClockShare {
  StepIndex index;
  std::vector<std::vector<SpanRow>> samples;
  std::vector<std::exception_ptr> errors;
};
IndexAndClockShare index_and_clock_share(const OpenedRun& run, int share, int shares);
// (`save`: written beside the run for the next reading.)
StepIndex join_index_shares(const OpenedRun& run, std::vector<StepIndex> shares,
                            bool save = true);
std::string to_bytes(const StepIndex& index);
StepIndex step_index_from_bytes(std::string_view bytes);

struct StepRange {
  std::int64_t first = 0, last = -1;  // inclusive; empty when first > last
  bool empty() const { return first > last; }
};
// Whether the run can be cut between its steps: in every file the steps
// the index found (each dl.step, of step spans and others) never go back.
// A batch delivered again after later steps does, and a range reading the
// repeat cannot know the first copy.
bool cuts_cleanly(const StepIndex& index);
// `parts` contiguous ranges of the run's steps, as even as the count allows
// (the first ones a step longer); empty ranges when there are fewer steps.
// A run that does not cut cleanly: the first range is every step, the
// others are empty (the first part is then one stream).
std::vector<StepRange> split_steps(const StepIndex& index, int parts);

// Every lens.clock_sync span of the run, as bytes; the alignment of them.
std::string clock_samples(const OpenedRun& run);
// The same in shares: the samples of every `shares`-th file from the
// `share`-th, and the shares of 0 .. K-1 as clock_samples's bytes.
std::string clock_samples_share(const OpenedRun& run, int share, int shares);
std::string join_clock_samples(const std::vector<std::string>& shares);
ClockAlignment clock_from_samples(std::string_view bytes);

// A range's reading as it goes: (bytes read, the run's bytes), as
// StreamOptions::progress.
using ReadProgress = std::function<void(std::uintmax_t, std::uintmax_t)>;

// The rows of the steps of `range` (see the file comment). `clock`: the
// run's alignment (empty for raw clocks). ReadError as the readers throw.
std::string analyze_part(const OpenedRun& run, const StepIndex& index,
                         StepRange range, const ClockAlignment& clock, bool keep_critical_path,
                         const ReadProgress& progress = {});

// Every part's rows, in range order, as one Analysis (its clock report and
// spans left out included); the files' warnings to `warnings`.
// `rest_repeats`: set when the spans of no step (as merged) hold a span id
// twice, a repeat one stream would have counted that no range could (its
// first copy on another range's lines).
Analysis merge_parts(const std::vector<std::string>& parts, const ClockAlignment& clock,
                     bool raw_clock, bool keep_critical_path,
                     std::vector<std::string>* warnings, bool* rest_repeats = nullptr);

// `lens summary` and `lens check` alike: a range's rows (a summary's per
// stage rows; a checker's findings and what it judges at the end), and the
// parts merged as one process would have ended (the summary's clock report
// and spans left out set; the check's result as check_dir's). A check's
// parts and its merge take the same StartOrder (start_order_of).
std::string summary_part(const OpenedRun& run, const StepIndex& index,
                         StepRange range, const ClockAlignment& clock,
                         const ReadProgress& progress = {});
Summary merge_summary_parts(const std::vector<std::string>& parts, const ClockAlignment& clock,
                            bool raw_clock, std::vector<std::string>* warnings,
                            bool* rest_repeats = nullptr);
std::string check_part(const OpenedRun& run, const StepIndex& index,
                       StepRange range, const StartOrder& order,
                       const ReadProgress& progress = {});
CheckResult merge_check_parts(const std::vector<std::string>& parts, const OpenedRun& run,
                              const StartOrder& order, bool* rest_repeats = nullptr);

}  // namespace lens::analysis
