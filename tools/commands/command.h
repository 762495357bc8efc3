// The `lens` command's subcommands, one file each (docs/DESIGN.md: where a
// command goes). A subcommand adds its options to the app and returns what
// runs once they are parsed; lens_main.cc parses and runs the one chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "analyze.h"
#include "clock_alignment.h"
#include "step_stream.h"

namespace lens::tools::cli {

// Exit codes: every command's, as the README gives them.
inline constexpr int kOk = 0, kViolations = 1, kBadInput = 2;

// The help of a RUN_DIR positional.
extern const char* const kRunHelp;

// A subcommand: `run` is called after parsing when `app` was chosen.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_check(CLI::App& lens);
Command add_summary(CLI::App& lens);
Command add_analyze(CLI::App& lens);
Command add_diff(CLI::App& lens);
Command add_timeline(CLI::App& lens);
Command add_report(CLI::App& lens);
Command add_export(CLI::App& lens);
Command add_upload(CLI::App& lens);

// --- shared by the commands that read a run ------------------------------

// --mpi on a command that can split its reading over an MPI job.
void add_mpi_flag(CLI::App* command, bool& use_mpi);

// The options every reading command takes, in this order: --raw-clock
// (where `raw_clock` is given), --rank-order, --threads, --run. The last
// three act when parsed (the environment the readers consult, the default
// read threads).
void add_reading_options(CLI::App* command, bool* raw_clock);

// Whether the command's reading is split over an MPI job: asked with --mpi,
// or started by an MPI launcher in a build that has MPI.
bool split_over_mpi(bool asked);

// Reading progress on a terminal, by bytes of all the run's files.
analysis::StreamOptions reading_options();

// The analysis options of `analyze` and `diff`.
analysis::AnalyzeOptions analyze_options(bool raw_clock);

// Warnings as `lens: warning: ...` lines, imports named as the user gave them.
void print_warnings(const std::vector<std::string>& warnings);

// Writes `content` to `path`; false (the failure printed) when it cannot.
bool write_file(const std::string& path, const std::string& content);

// A run read a step at a time with every rank on rank 0's clock (unless
// --raw-clock): what the views then print about the clock and the spans
// left out. Not copied or moved: the stream options point into it.
class AlignedReading {
 public:
  explicit AlignedReading(bool raw_clock);
  AlignedReading(const AlignedReading&) = delete;
  AlignedReading& operator=(const AlignedReading&) = delete;

  // The stream options for reading `run`, its clock samples read first;
  // each call starts the clock report and the spans left out afresh.
  analysis::StreamOptions options(const analysis::OpenedRun& run);

  const analysis::ClockReport& clock_report() const { return clock_report_; }
  const analysis::LateSpans& late_spans() const { return late_spans_; }

 private:
  bool raw_clock_;
  analysis::ClockAlignment clock_;
  analysis::ClockReport clock_report_;
  analysis::LateSpans late_spans_;
};

}  // namespace lens::tools::cli
