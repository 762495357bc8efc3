// lens report RUN_DIR [-o report.html]: the run on one self-contained page.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "command.h"
#include "report.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct ReportCommandOptions {
  std::string dir;
  std::string output;
  bool raw_clock = false;
};

int run_report(const ReportCommandOptions& c) {
  ReportOptions o;
  o.raw_clock = c.raw_clock;
  o.progress = reading_options().progress;
  Report r;
  try {
    r = render_report(c.dir, o);
  } catch (const ReadError&) {
    throw;
  } catch (const std::runtime_error& e) {  // Chart.js missing
    std::fprintf(stderr, "lens: %s\n", e.what());
    return kBadInput;
  }
  print_warnings(r.warnings);
  // By default next to the traces: in the run's directory, or beside the
  // one file named.
  const std::filesystem::path run_path(c.dir);
  std::string path = c.output;
  if (path.empty())
    path = std::filesystem::is_directory(run_path) ? (run_path / "report.html").string()
                                                   : run_path.string() + ".report.html";
  if (!write_file(path, r.html)) return kBadInput;
  const std::string charts =
      r.bucket > 1 ? ", charts over steps by " + std::to_string(r.bucket) : "";
  const std::string waves = r.median_step >= 0 ? "the waves of step " +
                                                     std::to_string(r.median_step) +
                                                     " (median) and " +
                                                     std::to_string(r.slowest_step) + " (slowest)"
                                               : "no step to draw";
  std::printf("wrote %s (%zu steps%s; %s)\n%s\n", path.c_str(), r.steps, charts.c_str(),
              waves.c_str(), r.clock.c_str());
  return kOk;
}

}  // namespace

Command add_report(CLI::App& lens) {
  auto o = std::make_shared<ReportCommandOptions>();
  auto* report = lens.add_subcommand(
      "report", "the run on one self-contained HTML page: charts over the run, waves, analysis");
  report->add_option("RUN_DIR", o->dir, kRunHelp)->required();
  report->add_option("-o,--output", o->output, "HTML file to write (default: RUN_DIR/report.html)");
  add_reading_options(report, &o->raw_clock);
  return {report, [o] { return run_report(*o); }};
}

}  // namespace lens::tools::cli
