// lens export RUN_DIR --perfetto out.json | --jaeger out.json: the run in a
// viewer's format.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "command.h"
#include "viewer_export.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct ExportCommandOptions {
  std::string dir;
  std::string perfetto, jaeger;
  JaegerOptions jaeger_options;
  bool raw_clock = false;
};

int run_export(const ExportCommandOptions& c) {
  if (c.perfetto.empty() && c.jaeger.empty()) {
    std::fprintf(stderr, "lens: export needs --perfetto FILE or --jaeger FILE\n");
    return kBadInput;
  }
  AlignedReading reading(c.raw_clock);
  std::optional<OpenedRun> run;  // opened once, at the first export
  for (const auto& [path, perfetto_format] :
       {std::pair{c.perfetto, true}, std::pair{c.jaeger, false}}) {
    if (path.empty()) continue;
    std::ofstream out(path, std::ios::binary);
    if (!out) {
      std::fprintf(stderr, "lens: cannot write %s\n", path.c_str());
      return kBadInput;
    }
    ExportCounts n;
    try {
      if (!run) run.emplace(c.dir);
      n = perfetto_format ? export_perfetto(*run, out, reading.options(*run))
                          : export_jaeger(*run, out, reading.options(*run), c.jaeger_options);
    } catch (...) {
      out.close();
      std::filesystem::remove(path);  // no half-written file left behind
      throw;
    }
    out.close();
    if (!out) {
      std::fprintf(stderr, "lens: cannot write %s\n", path.c_str());
      return kBadInput;
    }
    print_warnings(n.warnings);
    std::printf("wrote %s: %zu spans, %zu links (%s)\n", path.c_str(), n.spans, n.links,
                perfetto_format ? "open it in ui.perfetto.dev or chrome://tracing"
                                : "load it in Jaeger UI: Search -> JSON File");
    std::printf("%s\n", reading.clock_report().describe().c_str());
    if (const std::string l = reading.late_spans().describe(); !l.empty())
      std::printf("%s\n", l.c_str());
  }
  return kOk;
}

}  // namespace

Command add_export(CLI::App& lens) {
  auto o = std::make_shared<ExportCommandOptions>();
  auto* exp = lens.add_subcommand("export", "write the run in a viewer's format");
  exp->add_option("RUN_DIR", o->dir, kRunHelp)->required();
  exp->add_option("--perfetto", o->perfetto, "Chrome trace-event JSON for Perfetto UI");
  exp->add_option("--jaeger", o->jaeger, "JSON for Jaeger UI's file upload");
  exp->add_flag("--plain-service-name", o->jaeger_options.plain_service_name,
                "Jaeger: keep each rank's service name as it is (default: \"<service> r<rank> "
                "s<stage>\", so ranks are told apart)");
  add_reading_options(exp, &o->raw_clock);
  return {exp, [o] { return run_export(*o); }};
}

}  // namespace lens::tools::cli
