// lens analyze RUN_DIR [--json | --per-step]: critical path, waits, idle by
// cause, stragglers.
#include <cstdio>
#include <memory>
#include <string>

#include "analyze.h"
#include "command.h"
#include "mpi_analyze.h"
#include "split_threads.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct AnalyzeCommandOptions {
  std::string dir;
  bool as_json = false;
  bool per_step = false;
  bool use_mpi = false;
  bool raw_clock = false;
};

}  // namespace

Command add_analyze(CLI::App& lens) {
  auto o = std::make_shared<AnalyzeCommandOptions>();
  auto* analyze = lens.add_subcommand(
      "analyze", "critical path, wait states, idle by cause and stragglers, per stage");
  analyze->add_option("RUN_DIR", o->dir, kRunHelp)->required();
  analyze->add_flag("--json", o->as_json, "machine-readable output");
  add_mpi_flag(analyze, o->use_mpi);
  analyze
      ->add_flag("--per-step", o->per_step,
                 "a row per step and stage: the columns that add up to its step span")
      ->excludes("--json");
  add_reading_options(analyze, &o->raw_clock);
  return {analyze, [o] {
            const auto print = [&](const Analysis& a, const std::vector<std::string>& warnings) {
              print_warnings(warnings);
              std::fputs((o->as_json    ? format_json(a)
                          : o->per_step ? format_per_step(a)
                                        : format_table(a))
                             .c_str(),
                         stdout);
            };
            if (split_over_mpi(o->use_mpi)) return mpi_analyze(o->dir, o->raw_clock, print);
            std::vector<std::string> warnings;
            const OpenedRun run(o->dir);
            const Analysis a = analyze_on_threads_or_one_stream(
                run, analyze_options(o->raw_clock), default_read_threads(), &warnings);
            print(a, warnings);
            return kOk;
          }};
}

}  // namespace lens::tools::cli
