// lens: look at a pipeline-parallel run's traces.
//
//   lens check RUN_DIR                 correlation invariants; exit 0 ok, 1 violated, 2 bad input
//   lens summary RUN_DIR [--json]      time per step and stage, bubble, slowest stage
//   lens analyze RUN_DIR [--json | --per-step]  critical path, waits, idle by cause, stragglers
//   lens diff RUN_A RUN_B              per stage, what changed between two runs
//   lens timeline RUN_DIR -o wave.html [--steps A-B]
//   lens report RUN_DIR [-o report.html]    the run on one page (charts, waves, analysis)
//   lens export RUN_DIR --perfetto out.json | --jaeger out.json
//   lens upload DIR|FILE... [--endpoint URL]   send files to an OTLP/HTTP endpoint
//
// Each command is a file of its own under commands/ (command.h).
// RUN_DIR is a directory of rank-<r>.otlp.jsonl files (lens-traces/<run-id>),
// or any file or directory of OTLP traces, imported first (run_import.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "commands/command.h"
#include "lens/version.h"
#include "run_import.h"
#include "run_reader.h"

namespace {

using namespace lens::analysis;
using namespace lens::tools::cli;

int run_lens(int argc, char** argv) {
  CLI::App app{"lens: check, summarise and draw a pipeline-parallel run's traces"};
  app.set_version_flag("--version", std::string("lens ") + lens::kVersion);
  app.require_subcommand(1);
  const std::vector<Command> commands = {add_check(app),    add_summary(app), add_analyze(app),
                                         add_diff(app),     add_timeline(app), add_report(app),
                                         add_export(app),   add_upload(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kOk : kBadInput;
  }
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    try {
      return command.run();
    } catch (const ReadError& e) {
      std::fprintf(stderr, "lens: %s\n", name_imports(e.what()).c_str());
      return kBadInput;
    }
  }
  return kOk;
}

// Memory held back for when an allocation fails. nlohmann::json frees a
// parsed document iteratively, with a vector of its own, inside a noexcept
// destructor: when memory runs out there, an exception would terminate the
// process. The first failure frees half the reserve and lets the allocation
// try again (a document being freed can then be freed); the second frees
// the rest and throws std::bad_alloc, so that what unwinds can free itself.
struct MemoryReserve {
  static constexpr std::size_t kBytes = std::size_t{32} << 20;
  static inline char* first = nullptr;
  static inline char* second = nullptr;
  static void on_failure() {
    if (first != nullptr) {
      delete[] std::exchange(first, nullptr);
      return;
    }
    if (second != nullptr) delete[] std::exchange(second, nullptr);
    throw std::bad_alloc();
  }
  static void install() {
    first = new char[kBytes];
    second = new char[kBytes];
    // Touch the pages so that the reserve is really memory, not a promise.
    std::memset(first, 1, kBytes);
    std::memset(second, 1, kBytes);
    std::set_new_handler(&on_failure);
  }
};

}  // namespace

// Whatever goes wrong (an unreadable directory, memory running out, a bug)
// ends as exit 2 with a message, never as a crash.
int main(int argc, char** argv) {
  try {
    MemoryReserve::install();
    remove_imports_on_signals();
    return run_lens(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lens: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lens: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "lens: unexpected error\n");
  }
  return kBadInput;
}
