// lens summary RUN_DIR [--json]: time per step and stage, bubble, slowest
// stage.
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "mpi_analyze.h"
#include "split_threads.h"
#include "summary.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct SummaryOptions {
  std::string dir;
  bool as_json = false;
  bool use_mpi = false;
  bool raw_clock = false;
};

}  // namespace

Command add_summary(CLI::App& lens) {
  auto o = std::make_shared<SummaryOptions>();
  auto* summary = lens.add_subcommand("summary", "time per step and stage, bubble, slowest stage");
  summary->add_option("RUN_DIR", o->dir, kRunHelp)->required();
  summary->add_flag("--json", o->as_json, "machine-readable output");
  add_mpi_flag(summary, o->use_mpi);
  add_reading_options(summary, &o->raw_clock);
  return {summary, [o] {
            const auto print = [&](const Summary& s, const std::vector<std::string>& warnings) {
              print_warnings(warnings);
              std::fputs((o->as_json ? format_json(s) : format_table(s)).c_str(), stdout);
            };
            if (split_over_mpi(o->use_mpi)) return mpi_summary(o->dir, o->raw_clock, print);
            std::vector<std::string> warnings;
            const OpenedRun run(o->dir);  // read twice: its clock samples, then its steps
            if (auto split = summary_on_threads(run, o->raw_clock, default_read_threads(),
                                                &warnings, reading_options().progress)) {
              print(*split, warnings);
              return kOk;
            }
            AlignedReading reading(o->raw_clock);
            Summary s = summarize_dir(run, reading.options(run), &warnings);
            s.clock = reading.clock_report();
            s.left_out = reading.late_spans();
            print(s, warnings);
            return kOk;
          }};
}

}  // namespace lens::tools::cli
