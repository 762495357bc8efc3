// `lens analyze` split over processes (partial_analysis.h).
#include "partial_analysis.h"

#include <string.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <type_traits>

#include "line_reader.h"
#include "pipeline_view.h"
#include "run_reader.h"
#include "stage_verdicts.h"
#include "step_analysis.h"
#include "step_stream.h"
#include "upstream_steps.h"

namespace lens::analysis {
namespace {

// ---- bytes ---------------------------------------------------------------

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put<std::uint64_t>(s.size());
    out_ += s;
  }
  template <typename T, typename Each>
  void list(const std::vector<T>& items, Each&& each) {
    put<std::uint64_t>(items.size());
    for (const auto& item : items) each(item);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string text() {
    const auto n = get<std::uint64_t>();
    need(n);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  std::size_t count() {
    const auto n = get<std::uint64_t>();
    if (n > in_.size()) throw std::runtime_error("a part's bytes are malformed");
    return n;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void need(std::size_t n) const {
    if (n > in_.size() - at_) throw std::runtime_error("a part's bytes end too soon");
  }
  std::string_view in_;
  std::size_t at_ = 0;
};

constexpr std::uint32_t kPartMagic = 0x6c6e7031;  // "lnp1"

void put_figures(Writer& w, const StageFigures& f) {
  for (int v : {f.rank, f.stage, f.replica, f.tensor, f.microbatches, f.sync_last_replica,
                f.unmatched_transfers})
    w.put<std::int32_t>(v);
  for (double v : {f.forward_ms, f.backward_ms, f.all_reduce_ms, f.optimizer_ms, f.step_ms,
                   f.compute_ms, f.late_sender_ms, f.late_receiver_ms, f.transfer_ms,
                   f.collective_ms, f.collective_wait_ms, f.sync_wait_ms, f.rest_ms,
                   f.critical_ms, f.critical_share, f.window_ms, f.idle_ms, f.warmup_idle_ms,
                   f.cooldown_idle_ms, f.imbalance_idle_ms, f.transfer_idle_ms,
                   f.schedule_idle_ms, f.slack_ms, f.gain_at_median_ms})
    w.put<double>(v);
  w.put<std::uint64_t>(f.collective_waited_for_ms.size());
  for (const auto& [rank, ms] : f.collective_waited_for_ms) {
    w.put<std::int32_t>(rank);
    w.put<double>(ms);
  }
}

StageFigures get_figures(Reader& r) {
  StageFigures f;
  for (int* v : {&f.rank, &f.stage, &f.replica, &f.tensor, &f.microbatches, &f.sync_last_replica,
                 &f.unmatched_transfers})
    *v = r.get<std::int32_t>();
  for (double* v : {&f.forward_ms, &f.backward_ms, &f.all_reduce_ms, &f.optimizer_ms, &f.step_ms,
                    &f.compute_ms, &f.late_sender_ms, &f.late_receiver_ms, &f.transfer_ms,
                    &f.collective_ms, &f.collective_wait_ms, &f.sync_wait_ms, &f.rest_ms,
                    &f.critical_ms, &f.critical_share, &f.window_ms, &f.idle_ms,
                    &f.warmup_idle_ms, &f.cooldown_idle_ms, &f.imbalance_idle_ms,
                    &f.transfer_idle_ms, &f.schedule_idle_ms, &f.slack_ms, &f.gain_at_median_ms})
    *v = r.get<double>();
  for (std::size_t n = r.count(); n > 0; --n) {
    const int rank = r.get<std::int32_t>();
    f.collective_waited_for_ms[rank] = r.get<double>();
  }
  return f;
}

void put_record(Writer& w, const StepRecord& a) {
  w.put<std::int64_t>(a.step);
  for (int v : {a.stages, a.virtual_stages, a.microbatches, a.impossible_edges, a.critical_replica,
                a.critical_tensor})
    w.put<std::int32_t>(v);
  for (double v : {a.step_ms, a.critical_path_ms, a.critical_compute_ms, a.critical_transfer_ms,
                   a.critical_all_reduce_ms})
    w.put<double>(v);
  w.list(a.critical_path, [&](const PathSegment& s) {
    w.put<std::int32_t>(static_cast<std::int32_t>(s.kind));
    w.put<std::int32_t>(s.stage);
    w.put<std::int32_t>(s.rank);
    w.put<std::int64_t>(s.microbatch);
    w.put<double>(s.start_ms);
    w.put<double>(s.end_ms);
    w.put<std::int64_t>(s.start_ns);
    w.put<std::int64_t>(s.end_ns);
  });
  w.list(a.microbatch_costs, [&](const MicrobatchCost& c) {
    w.put<std::int32_t>(c.replica);
    w.put<std::int32_t>(c.stage);
    w.put<std::int32_t>(c.tensor);
    w.put<std::int64_t>(c.microbatch);
    w.put<double>(c.ms);
  });
  w.list(a.pipelines, [&](const PipelineKey& p) {
    w.put<std::int32_t>(p.replica);
    w.put<std::int32_t>(p.tensor);
  });
  w.list(a.stages_figures, [&](const StageFigures& f) { put_figures(w, f); });
  w.list(a.gains, [&](double g) { w.put<double>(g); });
}

StepRecord get_record(Reader& r) {
  StepRecord a;
  a.step = r.get<std::int64_t>();
  for (int* v : {&a.stages, &a.virtual_stages, &a.microbatches, &a.impossible_edges,
                 &a.critical_replica, &a.critical_tensor})
    *v = r.get<std::int32_t>();
  for (double* v : {&a.step_ms, &a.critical_path_ms, &a.critical_compute_ms,
                    &a.critical_transfer_ms, &a.critical_all_reduce_ms})
    *v = r.get<double>();
  for (std::size_t n = r.count(); n > 0; --n) {
    PathSegment s;
    s.kind = static_cast<PathSegment::Kind>(r.get<std::int32_t>());
    s.stage = r.get<std::int32_t>();
    s.rank = r.get<std::int32_t>();
    s.microbatch = r.get<std::int64_t>();
    s.start_ms = r.get<double>();
    s.end_ms = r.get<double>();
    s.start_ns = r.get<std::int64_t>();
    s.end_ns = r.get<std::int64_t>();
    a.critical_path.push_back(s);
  }
  for (std::size_t n = r.count(); n > 0; --n) {
    MicrobatchCost c;
    c.replica = r.get<std::int32_t>();
    c.stage = r.get<std::int32_t>();
    c.tensor = r.get<std::int32_t>();
    c.microbatch = r.get<std::int64_t>();
    c.ms = r.get<double>();
    a.microbatch_costs.push_back(c);
  }
  for (std::size_t n = r.count(); n > 0; --n) {
    PipelineKey p;
    p.replica = r.get<std::int32_t>();
    p.tensor = r.get<std::int32_t>();
    a.pipelines.push_back(p);
  }
  for (std::size_t n = r.count(); n > 0; --n) a.stages_figures.push_back(get_figures(r));
  for (std::size_t n = r.count(); n > 0; --n) a.gains.push_back(r.get<double>());
  return a;
}

void put_moves(Writer& w, const CausalityMoves& m) {
  for (std::uint64_t v : {std::uint64_t{m.transfers}, std::uint64_t{m.moved},
                          std::uint64_t{m.held}, std::uint64_t{m.violation_count}})
    w.put<std::uint64_t>(v);
  w.put<std::int64_t>(m.max_shift_ns);
  w.put<std::int64_t>(m.total_shift_ns);
  w.list(m.violations, [&](const ClockViolation& v) {
    w.put<std::int64_t>(v.step);
    w.put<std::int32_t>(v.sender_rank);
    w.put<std::int32_t>(v.receiver_rank);
    w.put(v.receive);
    w.put<std::int64_t>(v.early_ns);
    w.put<std::int64_t>(v.bound_ns);
  });
}

CausalityMoves get_moves(Reader& r) {
  CausalityMoves m;
  m.transfers = r.get<std::uint64_t>();
  m.moved = r.get<std::uint64_t>();
  m.held = r.get<std::uint64_t>();
  m.violation_count = r.get<std::uint64_t>();
  m.max_shift_ns = r.get<std::int64_t>();
  m.total_shift_ns = r.get<std::int64_t>();
  for (std::size_t n = r.count(); n > 0; --n) {
    ClockViolation v;
    v.step = r.get<std::int64_t>();
    v.sender_rank = r.get<std::int32_t>();
    v.receiver_rank = r.get<std::int32_t>();
    v.receive = r.text();
    v.early_ns = r.get<std::int64_t>();
    v.bound_ns = r.get<std::int64_t>();
    m.violations.push_back(std::move(v));
  }
  return m;
}

void put_late(Writer& w, const LateSpans& l) {
  w.put<std::uint64_t>(l.duplicates);
  w.put<std::uint64_t>(l.late);
  w.put<std::uint8_t>(l.forgot ? 1 : 0);
  for (const auto* list : {&l.duplicate_list, &l.late_list})
    w.list(*list, [&](const LateSpan& s) {
      w.put<std::int32_t>(s.rank);
      w.put(s.path.string());
      w.put<std::uint64_t>(s.line);
      w.put<std::int64_t>(s.step);
      w.put(s.name);
      w.put(s.span_id);
    });
}

void merge_late(Reader& r, LateSpans& into) {
  into.duplicates += r.get<std::uint64_t>();
  into.late += r.get<std::uint64_t>();
  into.forgot = r.get<std::uint8_t>() != 0 || into.forgot;
  for (auto* list : {&into.duplicate_list, &into.late_list})
    for (std::size_t n = r.count(); n > 0; --n) {
      LateSpan s;
      s.rank = r.get<std::int32_t>();
      s.path = r.text();
      s.line = r.get<std::uint64_t>();
      s.step = r.get<std::int64_t>();
      s.name = r.text();
      s.span_id = r.text();
      if (list->size() < LateSpans::kKept) list->push_back(std::move(s));
    }
}

// The step spans' dl.step as lens's writers (and the import) put it.
constexpr std::string_view kStepNeedle = R"("key":"dl.step","value":{"intValue":")";

FileSteps index_file(const std::filesystem::path& path) {
  FileSteps f;
  f.name = path.filename().string();
  std::error_code ec;
  f.size = std::filesystem::file_size(path, ec);
  f.modified = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReadError(path.string() + ": cannot open");
  LineReader lines(in);
  std::string line;
  std::uint64_t offset = 0;
  std::size_t number = 0;
  for (;;) {
    const auto status = lines.next(line);
    if (status == LineReader::Status::kEnd || status == LineReader::Status::kTooLong) break;
    ++number;
    for (const char* at = line.data(), *end = line.data() + line.size();;) {
      const void* hit = ::memmem(at, static_cast<std::size_t>(end - at), kStepNeedle.data(),
                                 kStepNeedle.size());
      if (hit == nullptr) break;
      at = static_cast<const char*>(hit) + kStepNeedle.size();
      std::int64_t step = 0;
      bool digits = false;
      while (at < end && *at >= '0' && *at <= '9' && step < (std::int64_t{1} << 60)) {
        step = step * 10 + (*at++ - '0');
        digits = true;
      }
      if (digits) f.steps.push_back({step, offset, number});
    }
    offset = lines.bytes_read();
  }
  return f;
}

constexpr std::uint32_t kIndexMagic = 0x6c6e7831;  // "lnx1"
constexpr const char* kIndexName = ".lens-step-index";

}  // namespace

std::vector<std::int64_t> StepIndex::steps() const {
  std::vector<std::int64_t> all;
  for (const auto& f : files)
    for (const auto& s : f.steps) all.push_back(s.step);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

std::string to_bytes(const StepIndex& index) {
  Writer w;
  w.put<std::uint32_t>(kIndexMagic);
  w.list(index.files, [&](const FileSteps& f) {
    w.put(f.name);
    w.put<std::uint64_t>(f.size);
    w.put<std::int64_t>(f.modified);
    w.list(f.steps, [&](const StepEnd& s) {
      w.put<std::int64_t>(s.step);
      w.put<std::uint64_t>(s.offset);
      w.put<std::uint64_t>(s.line);
    });
  });
  return w.take();
}

StepIndex step_index_from_bytes(std::string_view bytes) {
  Reader r(bytes);
  if (r.get<std::uint32_t>() != kIndexMagic) throw std::runtime_error("not a lens step index");
  StepIndex index;
  for (std::size_t n = r.count(); n > 0; --n) {
    FileSteps f;
    f.name = r.text();
    f.size = r.get<std::uint64_t>();
    f.modified = r.get<std::int64_t>();
    for (std::size_t k = r.count(); k > 0; --k) {
      StepEnd s;
      s.step = r.get<std::int64_t>();
      s.offset = r.get<std::uint64_t>();
      s.line = r.get<std::uint64_t>();
      f.steps.push_back(s);
    }
    index.files.push_back(std::move(f));
  }
  if (!r.done()) throw std::runtime_error("a lens step index with bytes after its end");
  return index;
}

StepIndex step_index(const std::filesystem::path& dir) {
  const auto paths = run_files(dir);
  const std::filesystem::path saved = std::filesystem::is_directory(dir) ? dir / kIndexName
                                                                         : std::filesystem::path();
  // The saved index, when it names these files as they are now.
  if (!saved.empty()) {
    std::ifstream in(saved, std::ios::binary);
    if (in) {
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      try {
        StepIndex index = step_index_from_bytes(bytes);
        bool same = index.files.size() == paths.size();
        for (std::size_t i = 0; same && i < paths.size(); ++i) {
          std::error_code ec;
          same = index.files[i].name == paths[i].filename().string() &&
                 index.files[i].size == std::filesystem::file_size(paths[i], ec) &&
                 index.files[i].modified ==
                     std::filesystem::last_write_time(paths[i], ec).time_since_epoch().count();
        }
        if (same) return index;
      } catch (const std::exception&) {
        // a stale or damaged index: built again below
      }
    }
  }
  StepIndex index;
  for (const auto& p : paths) index.files.push_back(index_file(p));
  if (!saved.empty()) {
    // Written whole under another name, then renamed: a reader never sees
    // half an index. A run on a read-only file system goes without.
    const std::filesystem::path temp = saved.string() + ".tmp";
    std::ofstream out(temp, std::ios::binary);
    const std::string bytes = to_bytes(index);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    std::error_code ec;
    if (out)
      std::filesystem::rename(temp, saved, ec);
    else
      std::filesystem::remove(temp, ec);
  }
  return index;
}

std::vector<StepRange> split_steps(const StepIndex& index, int parts) {
  const std::vector<std::int64_t> steps = index.steps();
  std::vector<StepRange> out;
  const std::size_t n = steps.size(), k = static_cast<std::size_t>(std::max(parts, 1));
  std::size_t at = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t count = n / k + (i < n % k ? 1 : 0);
    if (count == 0) {
      out.push_back({1, 0});  // empty
      continue;
    }
    out.push_back({steps[at], steps[at + count - 1]});
    at += count;
  }
  // The first range from the start, the last to the end: spans of no step
  // number (before the first step, after the last) are read as by one
  // process.
  return out;
}

std::string clock_samples(const std::filesystem::path& dir) {
  Writer w;
  std::vector<SpanRow> rows;
  for (const auto& path : run_files(dir)) {
    RankFileReader reader(path);
    reader.only_lines_containing(kClockSyncSpanName);
    while (reader.next_line()) {
      for (auto& s : reader.file().spans)
        if (s.name == kClockSyncSpanName) rows.push_back(std::move(s));
      reader.file().spans.clear();
    }
  }
  w.list(rows, [&](const SpanRow& s) {
    w.put<std::int32_t>(s.rank);
    w.put<std::uint64_t>(s.process);
    w.put(s.name);
    w.put<std::uint64_t>(s.attributes.size());
    for (const auto& [k, v] : s.attributes) {
      w.put(k);
      w.put(v);
    }
  });
  return w.take();
}

ClockAlignment clock_from_samples(std::string_view bytes) {
  Reader r(bytes);
  ClockAlignment clock;
  for (std::size_t n = r.count(); n > 0; --n) {
    SpanRow s;
    s.rank = r.get<std::int32_t>();
    s.process = r.get<std::uint64_t>();
    s.name = r.text();
    for (std::size_t k = r.count(); k > 0; --k) {
      std::string key = r.text();
      s.attributes[std::move(key)] = r.text();
    }
    clock.add(s);
  }
  return clock;
}

namespace {

// Thrown by the baseline pass once it has what it needs.
struct BaselinesComplete {};

// Where each file is read from for steps from `first`: the line holding
// the step span of the last step before it (spans of `first` end after
// that one did).
std::map<std::string, StreamOptions::Start> starts_for(const StepIndex& index,
                                                       std::int64_t first) {
  std::map<std::string, StreamOptions::Start> starts;
  for (const auto& f : index.files) {
    const StepEnd* before = nullptr;
    for (const auto& s : f.steps)
      if (s.step < first && (before == nullptr || s.offset > before->offset)) before = &s;
    if (before != nullptr) starts[f.name] = {before->offset, before->line};
  }
  return starts;
}

}  // namespace

std::string analyze_part(const std::filesystem::path& dir, const StepIndex& index,
                         StepRange range, const ClockAlignment& clock, bool keep_critical_path) {
  Writer w;
  w.put<std::uint32_t>(kPartMagic);
  const std::vector<std::int64_t> steps = index.steps();
  StepBaselines baselines;
  ClockReport report = ClockReport::of(clock);
  LateSpans late;
  std::vector<std::string> records;
  Run rest;
  if (!range.empty()) {
    // The stages' baselines: their first steps' costs, as the one process
    // saw them before this range.
    if (!steps.empty() && range.first > steps.front()) {
      ClockReport unused = ClockReport::of(clock);
      StreamOptions so = aligned_stream(clock, &unused, nullptr);
      so.stop_after_step = range.first - 1;
      std::size_t seen = 0;
      try {
        stream_steps(dir, [&](StepWindow& window) {
          for_each_record(build_view(window.run), window.run, baselines, false,
                          [&](const StepRecord&) { ++seen; });
          bool all = seen >= kBaselineSteps;
          for (const auto& [key, first] : baselines) all = all && first.size() >= kBaselineSteps;
          if (all) throw BaselinesComplete{};
        }, so);
      } catch (const BaselinesComplete&) {
      }
    }
    StreamOptions so = aligned_stream(clock, &report, &late);
    const bool first_range = steps.empty() || range.first <= steps.front();
    const bool last_range = steps.empty() || range.last >= steps.back();
    if (!first_range) {
      so.first_step = range.first;
      so.starts = starts_for(index, range.first);
    }
    if (!last_range) so.stop_after_step = range.last;
    rest = stream_steps(dir, [&](StepWindow& window) {
      for_each_record(build_view(window.run), window.run, baselines, keep_critical_path,
                      [&](const StepRecord& r) {
        Writer one;
        put_record(one, r);
        records.push_back(one.take());
      });
    }, so);
  }
  w.put<std::uint64_t>(records.size());
  for (const auto& r : records) w.put(r);
  put_moves(w, report.moves);
  w.put<std::uint64_t>(report.unaligned_ranks.size());
  for (int rank : report.unaligned_ranks) w.put<std::int32_t>(rank);
  put_late(w, late);
  // Per file (by rank): its warnings, and the inferred correlation.
  w.list(rest.files, [&](const RankFile& f) {
    w.put<std::int32_t>(f.rank);
    w.list(f.warnings, [&](const std::string& s) { w.put(s); });
  });
  w.put(inferred_of(rest.files));
  return w.take();
}

Analysis merge_parts(const std::vector<std::string>& parts, const ClockAlignment& clock,
                     bool raw_clock, bool keep_critical_path,
                     std::vector<std::string>* warnings) {
  AnalysisBuilder builder(keep_critical_path);
  ClockReport report = ClockReport::of(clock);
  report.raw_asked = raw_clock;
  LateSpans late;
  std::map<int, std::vector<std::string>> file_warnings;  // by rank, every part's in order
  std::string inferred;
  for (const std::string& part : parts) {
    Reader r(part);
    if (r.get<std::uint32_t>() != kPartMagic) throw std::runtime_error("not a lens analysis part");
    for (std::size_t n = r.count(); n > 0; --n) {
      const std::string bytes = r.text();
      Reader one(bytes);
      builder.add_record(get_record(one));
    }
    report.moves.add(get_moves(r));
    for (std::size_t n = r.count(); n > 0; --n) report.unaligned_ranks.insert(r.get<std::int32_t>());
    merge_late(r, late);
    for (std::size_t n = r.count(); n > 0; --n) {
      const int rank = r.get<std::int32_t>();
      auto& list = file_warnings[rank];
      for (std::size_t k = r.count(); k > 0; --k) list.push_back(r.text());
    }
    const std::string part_inferred = r.text();
    if (inferred.empty()) inferred = part_inferred;
    if (!r.done()) throw std::runtime_error("a lens analysis part with bytes after its end");
  }
  if (warnings)
    for (const auto& [rank, list] : file_warnings)
      warnings->insert(warnings->end(), list.begin(), list.end());
  Analysis a = builder.finish();
  a.inferred = inferred;
  a.clock = std::move(report);
  a.left_out = std::move(late);
  return a;
}

}  // namespace lens::analysis
