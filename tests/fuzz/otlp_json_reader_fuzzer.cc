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
    lens::analysis::Run run = lens::analysis::read_run(path);
    lens::analysis::PipelineView view = lens::analysis::build_view(run);
    (void)lens::analysis::check_run(run, view);
    (void)lens::analysis::check_dir(path);
    const lens::analysis::ClockAlignment clock = lens::analysis::read_clock_alignment(path);
    lens::analysis::ClockReport report = lens::analysis::ClockReport::of(clock);
    lens::analysis::StreamOptions aligned;
    aligned.clock = &clock;
    aligned.clock_report = &report;
    lens::analysis::Analysis analysis = lens::analysis::analyze_dir(path, aligned, nullptr);
    analysis.clock = report;
    (void)lens::analysis::format_table(analysis);
    (void)lens::analysis::format_json(analysis);
    // The same bytes under a small line limit, so inputs of fuzzing size
    // reach the too-long-line path too.
    lens::analysis::RankFileReader small(path, 512);
    while (small.next_line()) {
    }
  } catch (const lens::analysis::ReadError& e) {
    if (std::string(e.what()).find(path) == std::string::npos) std::abort();  // must name the file
  }
  return 0;
}
