// What the subcommands share: the reading options, progress, warnings,
// writing a file, the clock-aligned reading.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "command.h"
#include "mpi_analyze.h"
#include "rank_order.h"
#include "run_import.h"

namespace lens::tools::cli {

using namespace lens::analysis;

const char* const kRunHelp =
    "the run: a directory of rank-<r>.otlp.jsonl files, or any file or directory of OTLP "
    "traces (a collector's files, Jaeger api_v3 or Tempo documents: docs/collector-files.md)";

void add_mpi_flag(CLI::App* command, bool& use_mpi) {
  command->add_flag("--mpi", use_mpi,
                    "split the reading over the processes of an MPI job (the default when "
                    "started by mpirun with more than one process): mpirun -n K lens " +
                        command->get_name() + " RUN");
}

void add_reading_options(CLI::App* command, bool* raw_clock) {
  if (raw_clock != nullptr)
    command->add_flag("--raw-clock", *raw_clock,
                      "each rank's timestamps as recorded, not aligned to rank 0's clock by the "
                      "run's lens.clock_sync samples");

  // Megatron-LM's own traces (docs/megatron-traces.md): the order in which
  // ranks vary over the parallel dimensions, for runs that give sizes only.
  command
      ->add_option_function<std::string>(
          "--rank-order",
          [](const std::string& order) { ::setenv("LENS_RANK_ORDER", order.c_str(), 1); },
          "for Megatron-LM's own traces: the parallel dimensions fastest first "
          "(default tp-cp-ep-dp-pp, Megatron's; e.g. tp-cp-ep-pp-dp); "
          "LENS_RANK_ORDER too")
      ->check([](const std::string& order) {
        try {
          place_rank(0, -1, {1, 1, 1, 1, 1}, order);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });

  // The run's steps split over threads (split_threads.h), else read on a
  // thread of its own while the views work (step_stream.h).
  command
      ->add_option_function<int>(
          "--threads", [](const int& n) { set_default_read_threads(n); },
          "threads: 1 reads and works on one; with 2 or more, check, summary and analyze split "
          "a run in lens's layout into N ranges of steps, each read and worked on by a "
          "thread of its own, and the other commands assemble the steps on one while "
          "the view works on another and parse the files' lines on the other N-1 (the "
          "same output); default: the machine's cores (under MPI, shared between the "
          "node's processes)")
      ->check(CLI::Range(1, 1024));

  // Traces of several runs in one place: the one to read, by its run id.
  command->add_option_function<std::string>(
      "--run", [](const std::string& id) { ::setenv("LENS_RUN", id.c_str(), 1); },
      "when the traces hold several runs: the one to read, by its run id "
      "(nemo.lens.run_uuid or nemo.run.id on the resource); LENS_RUN too");
}

bool split_over_mpi(bool asked) { return asked || (launched_by_mpi() && have_mpi()); }

StreamOptions reading_options() {
  StreamOptions o;
  if (!isatty(STDERR_FILENO)) return o;
  o.progress = [last = -1](std::uintmax_t done, std::uintmax_t total) mutable {
    if (total < (8u << 20)) return;  // small runs read in a blink
    const int percent = static_cast<int>(100 * done / total);
    if (percent == last) return;
    last = percent;
    std::fprintf(stderr, "\rreading %ju/%ju MiB (%d%%)", done >> 20, total >> 20, percent);
    if (done >= total) std::fprintf(stderr, "\r\033[K");
  };
  return o;
}

void print_warnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings)
    std::fprintf(stderr, "lens: warning: %s\n", name_imports(w).c_str());
}

bool write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out) {
    std::fprintf(stderr, "lens: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

AnalyzeOptions analyze_options(bool raw_clock) {
  AnalyzeOptions o;
  o.raw_clock = raw_clock;
  o.progress = reading_options().progress;
  return o;
}

AlignedReading::AlignedReading(bool raw_clock) : raw_clock_(raw_clock) {}

StreamOptions AlignedReading::options(const OpenedRun& run) {
  late_spans_ = {};
  if (!raw_clock_) clock_ = read_clock_alignment(run);
  clock_report_ = ClockReport::of(clock_);
  clock_report_.raw_asked = raw_clock_;
  StreamOptions so = aligned_stream(clock_, &clock_report_, &late_spans_);
  so.progress = reading_options().progress;
  return so;
}

}  // namespace lens::tools::cli
