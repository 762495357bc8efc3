// lens timeline RUN_DIR -o wave.html [--steps A-B]: the pipeline wave of a
// few steps as a self-contained HTML page.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "command.h"
#include "pipeline_view.h"
#include "timeline.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct TimelineCommandOptions {
  std::string dir;
  std::string output;
  std::string steps = "0-2";
  bool raw_clock = false;
};

// "A-B" or "A": whole non-negative numbers, A <= B.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_step_range(std::string_view text) {
  const auto number = [](std::string_view t) -> std::optional<std::int64_t> {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || ptr != t.data() + t.size() || v < 0) return std::nullopt;
    return v;
  };
  const auto dash = text.find('-');
  const auto first = number(text.substr(0, dash));
  const auto last = dash == std::string_view::npos ? first : number(text.substr(dash + 1));
  if (!first || !last || *first > *last) return std::nullopt;
  return std::pair{*first, *last};
}

int run_timeline(const TimelineCommandOptions& c) {
  TimelineOptions o;
  const auto range = parse_step_range(c.steps);
  if (!range) {
    std::fprintf(stderr,
                 "lens: --steps '%s' is not valid; accepted: A-B or A (step numbers, A <= B)\n",
                 c.steps.c_str());
    return kBadInput;
  }
  std::tie(o.first_step, o.last_step) = *range;
  o.title = "lens timeline: " + c.dir + ", steps " + std::to_string(o.first_step) + "-" +
            std::to_string(o.last_step);
  // Only the chosen steps are kept, and reading stops after the last.
  AlignedReading reading(c.raw_clock);
  const OpenedRun opened(c.dir);  // read twice: its clock samples, then its steps
  StreamOptions so = reading.options(opened);
  so.stop_after_step = o.last_step;
  std::map<std::filesystem::path, std::vector<SpanRow>> chosen;
  std::int64_t first_seen = std::numeric_limits<std::int64_t>::max();
  std::int64_t last_seen = std::numeric_limits<std::int64_t>::min();
  std::size_t drawn = 0;
  Run run = stream_steps(
      opened,
      [&](StepWindow& w) {
        first_seen = std::min(first_seen, w.step);
        last_seen = std::max(last_seen, w.step);
        if (w.step < o.first_step) return;
        ++drawn;
        for (auto& f : w.run.files)
          for (auto& s : f.spans) chosen[f.path].push_back(std::move(s));
      },
      so);
  for (auto& f : run.files) {
    print_warnings(f.warnings);
    auto& spans = chosen[f.path];
    f.spans.insert(f.spans.end(), std::make_move_iterator(spans.begin()),
                   std::make_move_iterator(spans.end()));
  }
  if (drawn == 0) {
    // Nothing to draw: say why instead of writing an empty page.
    if (first_seen > last_seen)
      std::fprintf(stderr,
                   "lens: %s has no steps (no megatron.train_step span with dl.step: record "
                   "the step span group); no timeline written\n",
                   c.dir.c_str());
    else
      std::fprintf(stderr,
                   "lens: no step in --steps %s (the run has steps %lld-%lld); no timeline "
                   "written\n",
                   c.steps.c_str(), static_cast<long long>(first_seen),
                   static_cast<long long>(last_seen));
    return kBadInput;
  }
  const PipelineView view = build_view(run);
  o.pipeline_of = pipelines_of(run);
  const ClockReport& clock = reading.clock_report();
  o.title += clock.aligned ? " (clock aligned to rank " + std::to_string(clock.reference_rank) + ")"
                           : std::string(" (raw clocks)");
  if (!write_file(c.output, render_timeline(view, o))) return kBadInput;
  std::printf("wrote %s (%zu ranks, steps %lld-%lld)\n%s\n", c.output.c_str(), run.files.size(),
              static_cast<long long>(o.first_step), static_cast<long long>(o.last_step),
              clock.describe().c_str());
  if (const std::string l = reading.late_spans().describe(); !l.empty())
    std::printf("%s\n", l.c_str());
  return kOk;
}

}  // namespace

Command add_timeline(CLI::App& lens) {
  auto o = std::make_shared<TimelineCommandOptions>();
  auto* timeline =
      lens.add_subcommand("timeline", "draw the pipeline wave as a self-contained HTML file");
  timeline->add_option("RUN_DIR", o->dir, kRunHelp)->required();
  timeline->add_option("-o,--output", o->output, "HTML file to write")->required();
  timeline->add_option("--steps", o->steps, "steps to draw, A-B or A")->capture_default_str();
  add_reading_options(timeline, &o->raw_clock);
  return {timeline, [o] { return run_timeline(*o); }};
}

}  // namespace lens::tools::cli
