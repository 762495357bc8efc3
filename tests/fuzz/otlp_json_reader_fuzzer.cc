// libFuzzer target: the `lens` command's OTLP-JSON-lines reader, and the
// check that runs over what it read, both whole and a step at a time, and
// the clock alignment, causality pass and step analysis the views run. Any
// file content must give spans or a ReadError naming the file and line,
// never a crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "analyze.h"
#include "check.h"
#include "clock_alignment.h"
#include "run_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path =
      "/tmp/lens-reader-fuzz-" + std::to_string(getpid()) + ".otlp.jsonl";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    lens::tools::Run run = lens::tools::read_run(path);
    lens::tools::PipelineView view = lens::tools::build_view(run);
    (void)lens::tools::check_run(run, view);
    (void)lens::tools::check_dir(path);
    const lens::tools::ClockAlignment clock = lens::tools::read_clock_alignment(path);
    lens::tools::ClockReport report = lens::tools::ClockReport::of(clock);
    lens::tools::StreamOptions aligned;
    aligned.clock = &clock;
    aligned.clock_report = &report;
    lens::tools::Analysis analysis = lens::tools::analyze_dir(path, aligned, nullptr);
    analysis.clock = report;
    (void)lens::tools::format_table(analysis);
    (void)lens::tools::format_json(analysis);
    // The same bytes under a small line limit, so inputs of fuzzing size
    // reach the too-long-line path too.
    lens::tools::RankFileReader small(path, 512);
    while (small.next_line()) {
    }
  } catch (const lens::tools::ReadError& e) {
    if (std::string(e.what()).find(path) == std::string::npos) std::abort();  // must name the file
  }
  return 0;
}
