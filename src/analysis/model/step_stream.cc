#include "step_stream.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "clock_alignment.h"
#include "device_drain.h"
#include "id_set.h"
#include "lines_ahead.h"
#include "pipeline_view.h"
#include "recent.h"
#include "run_import.h"
#include "lens/semconv.h"

namespace lens::analysis {
namespace {

// Ids as the stream keeps them: the reader gives every id as lowercase hex
// of its length (run_reader.h), so a span id's 16 digits are its 64 bits
// and a trace id's 32 are two words: held and compared without a copy of
// the text. (Text of another form, which the reader never gives, is keyed
// by a hash of it.)
struct TraceKey {
  std::uint64_t high = 0, low = 0;
  bool operator==(const TraceKey&) const = default;
};
struct TraceKeyHash {
  std::size_t operator()(const TraceKey& k) const {
    return static_cast<std::size_t>(k.high ^ (k.low * 0x9e3779b97f4a7c15ULL));
  }
};

std::uint64_t span_key(std::string_view id) {
  if (const auto v = hex_word(id)) return *v;
  return std::hash<std::string_view>()(id);
}

TraceKey trace_key(std::string_view id) {
  if (id.size() == 32) {
    const auto high = hex_word(id.substr(0, 16)), low = hex_word(id.substr(16));
    if (high && low) return {*high, *low};
  }
  return {std::hash<std::string_view>()(id), ~std::uint64_t{0}};
}

// A file's lines as one stream takes them (LinesAhead's file `index`).
struct FileLines {
  LinesAhead* lines = nullptr;
  std::size_t index = 0;
  bool next_line() { return lines->next_line(index); }
  bool done() const { return lines->done(index); }
  RankFile& file() { return lines->file(index); }
  const RankFile& file() const { return lines->file(index); }
  std::size_t line_number() const { return lines->line_number(index); }
  std::uintmax_t bytes_read() const { return lines->bytes_read(index); }
};

// One file being read, and its spans not yet handed over.
struct Cursor {
  FileLines reader;
  // Spans of steps whose step span has not arrived yet, by trace id, with
  // when their trace was first seen (what is left of them at the end is
  // returned in that order).
  struct Open {
    std::size_t seen = 0;
    std::vector<SpanRow> rows;
    std::vector<std::size_t> lines;  // each row's
  };
  std::unordered_map<TraceKey, Open, TraceKeyHash> open;
  std::size_t traces_seen = 0;
  // The lines whose spans outside the step windows are this reader's
  // (StreamOptions::owned), and the span ids held in `open` from other lines.
  StreamOptions::Owned owned;
  IdSet borrowed_ids;
  // Completed steps not yet handed over, and their trace ids.
  std::map<std::int64_t, std::vector<SpanRow>> complete;
  std::unordered_map<TraceKey, std::int64_t, TraceKeyHash> complete_trace;
  std::int64_t last_complete = -1;
  std::vector<SpanRow> late;  // step spans that arrived after their step was handed over
  // What was handed over, to tell a span delivered twice from a late one:
  // the trace ids of handed-over steps (with their step), and the latest
  // span ids.
  Recent<TraceKey, std::int64_t, TraceKeyHash> handed_trace{LateSpans::kRememberedTraces};
  struct Handed {};
  Recent<std::uint64_t, Handed, std::hash<std::uint64_t>> handed_ids{LateSpans::kRememberedIds};
  // The span ids of the spans held above (open or complete, not yet handed
  // over): a batch delivered twice before its step was handed over repeats
  // one of them.
  IdSet held_ids;
};

// A span left out of the step windows: a repeat of a span read before (of
// a step held or handed over), or late.
void count_left_out(const Cursor& c, const SpanRow& row, std::int64_t step, bool repeat,
                    LateSpans* late) {
  if (late == nullptr) return;
  const bool duplicate = repeat || c.handed_ids.find(span_key(row.span_id)) != nullptr;
  (duplicate ? late->duplicates : late->late) += 1;
  auto& list = duplicate ? late->duplicate_list : late->late_list;
  if (list.size() < LateSpans::kKept)
    list.push_back(
        {row.rank, c.reader.file().path, c.reader.line_number(), step, row.name, row.span_id.str()});
}

void take_line(Cursor& c, std::int64_t handed_over, LateSpans* late) {
  std::vector<SpanRow> rows = std::move(c.reader.file().spans);
  c.reader.file().spans.clear();
  const std::size_t line = c.reader.line_number();
  const bool owned = line > c.owned.after && line <= c.owned.through;
  // A span left out of the windows, kept and counted by the owner of its line.
  const auto leave_out = [&](SpanRow& row, std::int64_t step, bool repeat) {
    if (!owned) return;
    count_left_out(c, row, step, repeat, late);
    c.late.push_back(std::move(row));
  };
  for (auto& row : rows) {
    const std::uint64_t id = span_key(row.span_id);
    const TraceKey trace = trace_key(row.trace_id);
    if (!row.span_id.empty() && !c.held_ids.insert(id)) {
      // The same span again while its first copy is held: left out.
      const auto done = c.complete_trace.find(trace);
      leave_out(row, done != c.complete_trace.end() ? done->second : -1, true);
      continue;
    }
    if (is_step_span(row)) {
      const std::int64_t step = row.int_attr(semconv::kStep);
      if (step <= handed_over) {
        c.held_ids.erase(id);
        leave_out(row, step, false);
        continue;
      }
      std::vector<SpanRow>& bucket = c.complete[step];
      auto it = c.open.find(trace);
      if (it != c.open.end()) {
        std::vector<SpanRow>& children = it->second.rows;
        // Most often the step's first rows: the children's vector becomes
        // the step's, no row moved.
        if (bucket.empty())
          bucket.swap(children);
        else
          for (auto& child : children) bucket.push_back(std::move(child));
        c.open.erase(it);
      }
      c.complete_trace[trace] = step;
      if (!owned) c.borrowed_ids.insert(id);
      bucket.push_back(std::move(row));
      c.last_complete = std::max(c.last_complete, step);
      continue;
    }
    auto done = c.complete_trace.find(trace);
    if (done != c.complete_trace.end()) {
      if (!owned) c.borrowed_ids.insert(id);
      c.complete[done->second].push_back(std::move(row));  // ended after its step span
    } else if (const std::int64_t* gone = c.handed_trace.find(trace)) {
      c.held_ids.erase(id);
      leave_out(row, *gone, false);  // its step was handed over
    } else {
      auto [it, fresh] = c.open.try_emplace(trace);
      if (fresh) it->second.seen = c.traces_seen++;
      if (!owned) c.borrowed_ids.insert(id);
      it->second.rows.push_back(std::move(row));
      it->second.lines.push_back(line);
    }
  }
  // The emptied rows' room, for the file's next line.
  if (c.reader.file().spans.empty()) {
    rows.clear();
    c.reader.file().spans.swap(rows);
  }
}

}  // namespace

std::string late_warning(const std::filesystem::path& path, std::size_t spans) {
  return path.string() + ": " + std::to_string(spans) +
         " span(s) came after their step was read and are left out of the per-step views";
}

std::string LateSpans::describe() const {
  if (late + duplicates == 0) return {};
  std::string out = "left out: " + std::to_string(late + duplicates) +
                    " spans that arrived after their step was read";
  if (duplicates > 0)
    out += " (" + std::to_string(duplicates) +
           " of them repeat a span read before: a batch "
           "delivered twice)";
  return out + "; lens check names them";
}

nlohmann::json LateSpans::to_json() const {
  return {{"late", late}, {"duplicates", duplicates}, {"ids_forgotten", forgot}};
}

StreamOptions aligned_stream(const ClockAlignment& clock, ClockReport* report, LateSpans* late) {
  StreamOptions so;
  if (!clock.empty()) so.clock = &clock;
  so.clock_report = report;
  so.late = late;
  return so;
}

namespace {

std::atomic<int> g_read_threads{0};  // 0: the machine's cores

// The stream on the calling thread, its lines parsed ahead on
// `parse_workers` threads (none: parsed on this one too).
Run stream_here(const OpenedRun& opened, const std::function<void(StepWindow&)>& on_step,
                const StreamOptions& options, int parse_workers) {
  const std::filesystem::path& dir = opened.input();
  const auto& paths = opened.files();
  std::vector<Cursor> cursors(paths.size());
  std::map<int, ComputeClocks> clocks;  // by rank: its compute's clocks (device_drain.h)
  std::vector<std::unique_ptr<RankFileReader>> readers;
  std::uintmax_t total_bytes = 0;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    readers.push_back(std::make_unique<RankFileReader>(paths[i]));
    if (auto start = options.starts.find(paths[i].filename().string());
        start != options.starts.end())
      readers.back()->start_at(start->second.offset, start->second.line);
    if (auto owned = options.owned.find(paths[i].filename().string());
        owned != options.owned.end())
      cursors[i].owned = owned->second;
    std::error_code ec;
    const auto size = std::filesystem::file_size(paths[i], ec);
    if (!ec) total_bytes += size;
  }
  LinesAhead lines(std::move(readers), parse_workers);
  for (std::size_t i = 0; i < cursors.size(); ++i) cursors[i].reader = {&lines, i};
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
        RankFile f = c.reader.file().without_spans();
        auto it = c.complete.find(step);
        if (it != c.complete.end()) {
          f.spans = std::move(it->second);
          c.complete.erase(it);
          std::erase_if(c.complete_trace, [&](const auto& kv) {
            if (kv.second != step) return false;
            if (options.late) c.handed_trace.remember(kv.first, step, options.late->forgot);
            return true;
          });
          for (const auto& s : f.spans) {
            const std::uint64_t id = span_key(s.span_id);
            if (!c.borrowed_ids.empty() && c.borrowed_ids.erase(id) > 0 &&
                options.part_tally != nullptr && step >= options.first_step)
              options.part_tally->claimed.push_back(s.span_id.str());
            c.held_ids.erase(id);
            if (options.late) c.handed_ids.remember(id, {}, options.late->forgot);
          }
        }
        window.run.files.push_back(std::move(f));
      }
      std::stable_sort(window.run.files.begin(), window.run.files.end(),
                       [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
      handed_over = step;
      if (step < options.first_step) continue;  // before this part's steps
      for (auto& f : window.run.files) settle_device_drain(f, clocks[f.rank]);
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
      if (!c.reader.done() && (behind == nullptr || c.last_complete < behind->last_complete))
        behind = &c;
    if (behind == nullptr || stopped) break;
    const std::uintmax_t before = behind->reader.bytes_read();
    if (behind->reader.next_line()) take_line(*behind, handed_over, options.late);
    bytes += behind->reader.bytes_read() - before;
    if (options.progress) options.progress(bytes, total_bytes);
    std::int64_t ready = std::numeric_limits<std::int64_t>::max();
    for (const auto& c : cursors)
      if (!c.reader.done()) ready = std::min(ready, c.last_complete);
    hand_over(ready);
  }
  hand_over(std::numeric_limits<std::int64_t>::max());

  Run rest;
  rest.dir = dir;
  for (auto& c : cursors) {
    RankFile f = c.reader.file().without_spans();
    std::vector<Cursor::Open*> open;
    for (auto& [trace, o] : c.open) open.push_back(&o);
    std::sort(open.begin(), open.end(),
              [](const Cursor::Open* a, const Cursor::Open* b) { return a->seen < b->seen; });
    const std::string name = f.path.filename().string();
    std::vector<std::size_t>* lines =
        options.part_tally != nullptr ? &options.part_tally->open_lines[name] : nullptr;
    for (Cursor::Open* o : open)
      for (std::size_t i = 0; i < o->rows.size(); ++i) {
        if (!c.borrowed_ids.empty() && c.borrowed_ids.count(span_key(o->rows[i].span_id)))
          continue;
        f.spans.push_back(std::move(o->rows[i]));
        if (lines != nullptr) lines->push_back(o->lines[i]);
      }
    if (options.part_tally != nullptr)
      options.part_tally->late[name] = c.late.size();
    else if (!c.late.empty())
      f.warnings.push_back(late_warning(f.path, c.late.size()));
    for (auto& row : c.late) f.spans.push_back(std::move(row));
    if (options.clock && !options.clock->align(f) && options.clock_report)
      options.clock_report->unaligned_ranks.insert(f.rank);
    rest.files.push_back(std::move(f));
  }
  std::stable_sort(rest.files.begin(), rest.files.end(),
                   [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  if (!rest.files.empty()) {  // what importing another layout had to say (run_import.h)
    const std::vector<std::string>& imported = opened.import_warnings();
    rest.files.front().warnings.insert(rest.files.front().warnings.begin(), imported.begin(),
                                       imported.end());
    std::map<int, std::pair<const RankFile*, ComputeClocks>> seen;
    for (const RankFile& f : rest.files)
      if (const auto c = clocks.find(f.rank); c != clocks.end()) seen[f.rank] = {&f, c->second};
    if (auto warning = host_timed_compute_warning(seen))
      rest.files.front().warnings.push_back(std::move(*warning));
  }
  return rest;
}

// Windows from the reading thread to the caller's, at most kAhead waiting.
// Each side wakes the other only when it waits, and after letting go of the
// lock (a thread woken while the lock is held would only wait again on it).
class WindowPipe {
 public:
  static constexpr std::size_t kAhead = 2;

  // The reading thread's: false once the caller stopped taking windows.
  bool put(StepWindow& w) {
    bool wake = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!abandoned_ && windows_.size() >= kAhead) {
        reader_waits_ = true;
        room_.wait(lock);
        reader_waits_ = false;
      }
      if (abandoned_) return false;
      windows_.push_back(std::move(w));
      wake = taker_waits_;
    }
    if (wake) filled_.notify_one();
    return true;
  }
  // The reading thread's, once it has returned (with its error, if any).
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
      if (!error_) error_ = error;
    }
    filled_.notify_one();
  }
  // The caller's: false when the reading thread has finished and every
  // window was taken.
  bool take(StepWindow& w) {
    bool wake = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!finished_ && windows_.empty()) {
        taker_waits_ = true;
        filled_.wait(lock);
        taker_waits_ = false;
      }
      if (windows_.empty()) return false;
      w = std::move(windows_.front());
      windows_.pop_front();
      wake = reader_waits_;
    }
    if (wake) room_.notify_one();
    return true;
  }
  // The caller's, when it stops taking windows before the end.
  void abandon() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abandoned_ = true;
    }
    room_.notify_one();
  }
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable filled_, room_;
  std::deque<StepWindow> windows_;
  bool taker_waits_ = false, reader_waits_ = false;
  bool finished_ = false;   // the reading thread has returned (or failed)
  bool abandoned_ = false;  // the caller stopped taking windows
  std::exception_ptr error_;
};
struct Abandoned {};

}  // namespace

int default_read_threads() {
  const int set = g_read_threads.load();
  if (set > 0) return set;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void set_default_read_threads(int threads) { g_read_threads.store(std::max(0, threads)); }
bool read_threads_chosen() { return g_read_threads.load() > 0; }

Run stream_steps(const OpenedRun& run, const std::function<void(StepWindow&)>& on_step,
                 const StreamOptions& options) {
  if (options.threads < 2) return stream_here(run, on_step, options, 0);
  WindowPipe pipe;
  Run rest;
  std::thread reader([&] {
    std::exception_ptr error;
    try {
      rest = stream_here(
          run,
          [&](StepWindow& w) {
            if (!pipe.put(w)) throw Abandoned{};
          },
          options, options.threads - 1);
    } catch (const Abandoned&) {
    } catch (...) {
      error = std::current_exception();
    }
    pipe.finish(error);
  });
  try {
    for (;;) {
      StepWindow window;  // let go of (its rows freed) after the call, not under the pipe's lock
      if (!pipe.take(window)) break;
      on_step(window);
    }
  } catch (...) {
    pipe.abandon();
    reader.join();
    throw;
  }
  reader.join();
  if (const auto error = pipe.error()) std::rethrow_exception(error);
  return rest;
}

void scan_spans(const OpenedRun& run,
                const std::function<void(const RankFile&, const std::vector<SpanRow>&)>& on_spans) {
  for (const auto& path : run.files()) {
    RankFileReader reader(path);
    while (reader.next_line()) {
      on_spans(reader.file(), reader.file().spans);
      reader.file().spans.clear();
    }
  }
}

}  // namespace lens::analysis
