// libFuzzer target: the `lens` command's OTLP-JSON-lines reader (compared
// line by line with the DOM reference it replaced), and the
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
#include "reference_request_parser.h"
#include "run_reader.h"

namespace {

// The parser and the DOM reference (tests/support) agree on every line: the
// same rows and resource fields, or both refuse it.
void compare_with_the_reference(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::size_t from = 0;
  while (from < text.size()) {
    std::size_t end = text.find('\n', from);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(from, end - from);
    from = end + 1;
    lens::analysis::RankFile a, b;
    bool a_ok = true, b_ok = true;
    try {
      lens::analysis::parse_request(a, line);
    } catch (const std::exception&) {
      a_ok = false;
    }
    try {
      lens::analysis::parse_request_reference(b, line);
    } catch (const std::exception&) {
      b_ok = false;
    }
    if (a_ok != b_ok) std::abort();
    if (!a_ok) continue;
    if (a.spans.size() != b.spans.size() || a.rank != b.rank || a.resource != b.resource ||
        a.resource_types != b.resource_types || a.process != b.process)
      std::abort();
    for (std::size_t i = 0; i < a.spans.size(); ++i) {
      const auto& x = a.spans[i];
      const auto& y = b.spans[i];
      if (x.trace_id != y.trace_id || x.span_id != y.span_id ||
          x.parent_span_id != y.parent_span_id || x.name != y.name || x.start_ns != y.start_ns ||
          x.end_ns != y.end_ns || x.kind != y.kind || x.status_code != y.status_code ||
          x.status_message != y.status_message || x.attributes != y.attributes ||
          x.links != y.links || x.rank != y.rank)
        std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  compare_with_the_reference(data, size);
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
