// A run opened once: what every reader of a run takes (stream_steps, the
// clock pass, check, summary, analyze, the span table, the MPI job's
// parts). Opening finds the rank files: a directory in lens's layout is read
// where it is; any other input (a collector's files, one file, Jaeger or
// Tempo documents: run_import.h) is imported into a temporary folder that
// this value holds, and removes when its last copy goes. A command opens
// its run once and hands the same value to every pass over it.
//
// A path converts to an OpenedRun, so a reader called with a path opens
// the run for that one call (tests, the Python package's one-call readers).
// Copies share one opening; files() are valid while one copy lives.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace lens::analysis {

class OpenedRun {
 public:
  // Throws ReadError (run_reader.h) naming the input when it does not
  // exist, holds no rank files, or does not import.
  OpenedRun(const std::filesystem::path& input);  // NOLINT(google-explicit-constructor)
  OpenedRun(const std::string& input) : OpenedRun(std::filesystem::path(input)) {}  // NOLINT
  OpenedRun(const char* input) : OpenedRun(std::filesystem::path(input)) {}         // NOLINT

  // The input as the user named it.
  const std::filesystem::path& input() const { return state_->input; }
  // The folder of rank-<r>.otlp.jsonl files: the input, or its import.
  const std::filesystem::path& dir() const { return state_->dir; }
  // The rank files, sorted by name (at least one).
  const std::vector<std::filesystem::path>& files() const { return state_->files; }
  // What importing had to say (none for lens's layout).
  const std::vector<std::string>& import_warnings() const { return state_->warnings; }
  bool imported() const { return state_->dir != state_->input; }

 private:
  struct State {
    std::filesystem::path input, dir;
    std::vector<std::filesystem::path> files;
    std::vector<std::string> warnings;
    ~State();
  };
  std::shared_ptr<const State> state_;
};

}  // namespace lens::analysis
