#include "step_stream.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>

#include "clock_alignment.h"
#include "pipeline_view.h"

namespace lens::tools {
namespace {

// One file being read, and its spans not yet handed over.
struct Cursor {
  std::unique_ptr<RankFileReader> reader;
  // Spans of steps whose step span has not arrived yet, by trace id.
  std::unordered_map<std::string, std::vector<SpanRow>> open;
  // Completed steps not yet handed over, and their trace ids.
  std::map<std::int64_t, std::vector<SpanRow>> complete;
  std::unordered_map<std::string, std::int64_t> complete_trace;
  std::int64_t last_complete = -1;
  std::vector<SpanRow> late;  // step spans that arrived after their step was handed over
};

void take_line(Cursor& c, std::int64_t handed_over) {
  std::vector<SpanRow> rows = std::move(c.reader->file().spans);
  c.reader->file().spans.clear();
  for (auto& row : rows) {
    if (is_step_span(row)) {
      const std::int64_t step = row.int_attr("dl.step");
      if (step <= handed_over) {
        c.late.push_back(std::move(row));
        continue;
      }
      std::vector<SpanRow>& bucket = c.complete[step];
      auto it = c.open.find(row.trace_id);
      if (it != c.open.end()) {
        for (auto& child : it->second) bucket.push_back(std::move(child));
        c.open.erase(it);
      }
      c.complete_trace[row.trace_id] = step;
      bucket.push_back(std::move(row));
      c.last_complete = std::max(c.last_complete, step);
      continue;
    }
    auto done = c.complete_trace.find(row.trace_id);
    if (done != c.complete_trace.end())
      c.complete[done->second].push_back(std::move(row));  // ended after its step span
    else
      c.open[row.trace_id].push_back(std::move(row));
  }
}

}  // namespace

Run stream_steps(const std::filesystem::path& dir, const std::function<void(StepWindow&)>& on_step,
                 const StreamOptions& options) {
  const auto paths = run_files(dir);
  std::vector<Cursor> cursors(paths.size());
  std::uintmax_t total_bytes = 0;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    cursors[i].reader = std::make_unique<RankFileReader>(paths[i]);
    std::error_code ec;
    const auto size = std::filesystem::file_size(paths[i], ec);
    if (!ec) total_bytes += size;
  }
  std::int64_t handed_over = std::numeric_limits<std::int64_t>::min();
  bool stopped = false;

  // Hands over every completed step up to `ready`, smallest first.
  const auto hand_over = [&](std::int64_t ready) {
    for (;;) {
      std::int64_t step = std::numeric_limits<std::int64_t>::max();
      for (const auto& c : cursors)
        if (!c.complete.empty()) step = std::min(step, c.complete.begin()->first);
      if (stopped || step == std::numeric_limits<std::int64_t>::max() || step > ready) return;
      StepWindow window;
      window.step = step;
      window.run.dir = dir;
      for (auto& c : cursors) {
        RankFile f = c.reader->file().without_spans();
        auto it = c.complete.find(step);
        if (it != c.complete.end()) {
          f.spans = std::move(it->second);
          c.complete.erase(it);
          std::erase_if(c.complete_trace, [&](const auto& kv) { return kv.second == step; });
        }
        window.run.files.push_back(std::move(f));
      }
      std::stable_sort(window.run.files.begin(), window.run.files.end(),
                       [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
      handed_over = step;
      if (options.clock)
        for (auto& f : window.run.files)
          if (!options.clock->align(f) && options.clock_report)
            options.clock_report->unaligned_ranks.insert(f.rank);
      if (options.clock_report)
        options.clock_report->moves.add(enforce_transfer_order(window.run, options.clock));
      on_step(window);
      stopped = step >= options.stop_after_step;
    }
  };

  std::uintmax_t bytes = 0;
  for (;;) {
    // The file furthest behind is read next, so that every file has
    // completed a step before it is handed over.
    Cursor* behind = nullptr;
    for (auto& c : cursors)
      if (!c.reader->done() && (behind == nullptr || c.last_complete < behind->last_complete))
        behind = &c;
    if (behind == nullptr || stopped) break;
    const std::uintmax_t before = behind->reader->bytes_read();
    if (behind->reader->next_line()) take_line(*behind, handed_over);
    bytes += behind->reader->bytes_read() - before;
    if (options.progress) options.progress(bytes, total_bytes);
    std::int64_t ready = std::numeric_limits<std::int64_t>::max();
    for (const auto& c : cursors)
      if (!c.reader->done()) ready = std::min(ready, c.last_complete);
    hand_over(ready);
  }
  hand_over(std::numeric_limits<std::int64_t>::max());

  Run rest;
  rest.dir = dir;
  for (auto& c : cursors) {
    RankFile f = c.reader->file().without_spans();
    for (auto& [trace, rows] : c.open)
      for (auto& row : rows) f.spans.push_back(std::move(row));
    if (!c.late.empty())
      f.warnings.push_back(f.path.string() + ": " + std::to_string(c.late.size()) +
                           " step span(s) came after later steps and are left out of the "
                           "per-step views");
    for (auto& row : c.late) f.spans.push_back(std::move(row));
    if (options.clock && !options.clock->align(f) && options.clock_report)
      options.clock_report->unaligned_ranks.insert(f.rank);
    rest.files.push_back(std::move(f));
  }
  std::stable_sort(rest.files.begin(), rest.files.end(),
                   [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  return rest;
}

void scan_spans(const std::filesystem::path& dir,
                const std::function<void(const RankFile&, const std::vector<SpanRow>&)>& on_spans) {
  for (const auto& path : run_files(dir)) {
    RankFileReader reader(path);
    while (reader.next_line()) {
      on_spans(reader.file(), reader.file().spans);
      reader.file().spans.clear();
    }
  }
}

}  // namespace lens::tools
