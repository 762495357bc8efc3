// lens diff RUN_A RUN_B: per stage, what changed from one run to another.
#include <cstdio>
#include <memory>
#include <string>

#include "analyze.h"
#include "command.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct DiffOptions {
  std::string dir, other_dir;
  bool raw_clock = false;
};

}  // namespace

Command add_diff(CLI::App& lens) {
  auto o = std::make_shared<DiffOptions>();
  auto* diff = lens.add_subcommand("diff", "per stage, what changed from run A to run B");
  diff->add_option("RUN_A", o->dir, "the first run's directory")->required();
  diff->add_option("RUN_B", o->other_dir, "the second run's directory")->required();
  add_reading_options(diff, &o->raw_clock);
  return {diff, [o] {
            std::vector<std::string> warnings;
            const Analysis a = analyze_run(o->dir, analyze_options(o->raw_clock), &warnings);
            const Analysis b = analyze_run(o->other_dir, analyze_options(o->raw_clock), &warnings);
            print_warnings(warnings);
            std::printf("A: %s\nB: %s\n%s", o->dir.c_str(), o->other_dir.c_str(),
                        format_diff(a, b).c_str());
            return kOk;
          }};
}

}  // namespace lens::tools::cli
