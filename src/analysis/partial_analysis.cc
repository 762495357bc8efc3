// `lens analyze` split over processes (partial_analysis.h).
#include "partial_analysis.h"

#include <string.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "line_reader.h"
#include "pipeline_view.h"
#include "run_reader.h"
#include "summary.h"
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
  void put(std::string_view s) {
    put<std::uint64_t>(s.size());
    out_ += s;
  }
  void put(const std::string& s) { put(std::string_view(s)); }
  // A map of text keys to text (or to a trivially copyable value).
  template <typename V>
  void put_map(const std::map<std::string, V>& m) {
    put<std::uint64_t>(m.size());
    for (const auto& [k, v] : m) {
      put(k);
      put(v);
    }
  }
  // A span's attribute texts as a map of text to text, then (with_types)
  // their types as a map of text to char.
  void put_attributes(const Attributes& a, bool with_types) {
    put<std::uint64_t>(a.size());
    for (const Attributes::Entry e : a) {
      put(e.key);
      put(e.text);
    }
    if (!with_types) return;
    put<std::uint64_t>(a.size());
    for (const Attributes::Entry e : a) {
      put(e.key);
      put(e.type);
    }
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
  // A trace or span id (at most HexId::kCapacity characters).
  HexId id() {
    const auto n = get<std::uint64_t>();
    need(n);
    if (n > HexId::kCapacity) throw std::runtime_error("a part's span id is too long");
    HexId id(in_.substr(at_, n));
    at_ += n;
    return id;
  }
  template <typename V>
  void get_map(std::map<std::string, V>& m) {
    for (std::size_t n = count(); n > 0; --n) {
      std::string key = text();
      if constexpr (std::is_same_v<V, std::string>)
        m[std::move(key)] = text();
      else
        m[std::move(key)] = get<V>();
    }
  }
  // What put_attributes wrote.
  void get_attributes(Attributes& a, bool with_types) {
    std::vector<std::pair<std::string, std::string>> texts;
    for (std::size_t n = count(); n > 0; --n) {
      std::string key = text();
      texts.emplace_back(std::move(key), text());
    }
    std::map<std::string, char> types;
    if (with_types) get_map(types);
    for (const auto& [key, value] : texts) {
      const auto type = types.find(key);
      a.set(key, value, type == types.end() ? 's' : type->second);
    }
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

constexpr std::uint32_t kPartMagic = 0x6c6e7032;  // "lnp2": figures with sync_wait_at

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
  w.put(f.sync_wait_at);
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
  f.sync_wait_at = r.text();
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

// A file's entry before its lines are scanned: its name, size and time.
FileSteps file_entry(const std::filesystem::path& path) {
  FileSteps f;
  f.name = path.filename().string();
  std::error_code ec;
  f.size = std::filesystem::file_size(path, ec);
  f.modified = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  return f;
}

// Each dl.step of a step span on `line` (line `number`, from byte `offset`).
void scan_steps(std::string_view line, std::uint64_t offset, std::size_t number, FileSteps& f) {
  for (const char *at = line.data(), *end = line.data() + line.size();;) {
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
}

FileSteps index_file(const std::filesystem::path& path) {
  FileSteps f = file_entry(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReadError(path.string() + ": cannot open");
  LineReader lines(in);
  std::string line;
  std::uint64_t offset = 0;
  std::size_t number = 0;
  for (;;) {
    const auto status = lines.next(line);
    if (status == LineReader::Status::kEnd || status == LineReader::Status::kTooLong) break;
    scan_steps(line, offset, ++number, f);
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

namespace {
std::filesystem::path saved_index_path(const std::filesystem::path& dir) {
  return std::filesystem::is_directory(dir) ? dir / kIndexName : std::filesystem::path();
}
}  // namespace

std::optional<StepIndex> saved_step_index(const OpenedRun& run) {
  const std::filesystem::path saved = saved_index_path(run.input());
  if (saved.empty()) return std::nullopt;
  std::ifstream in(saved, std::ios::binary);
  if (!in) return std::nullopt;
  const auto& paths = run.files();
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
    // a stale or damaged index: built again
  }
  return std::nullopt;
}

StepIndex index_share(const OpenedRun& run, int share, int shares) {
  const auto& paths = run.files();
  StepIndex index;
  for (std::size_t i = static_cast<std::size_t>(std::max(share, 0)); i < paths.size();
       i += static_cast<std::size_t>(std::max(shares, 1)))
    index.files.push_back(index_file(paths[i]));
  return index;
}

IndexAndClockShare index_and_clock_share(const OpenedRun& run, int share, int shares) {
  const auto& paths = run.files();
  IndexAndClockShare out;
  for (std::size_t i = static_cast<std::size_t>(std::max(share, 0)); i < paths.size();
       i += static_cast<std::size_t>(std::max(shares, 1))) {
    FileSteps f = file_entry(paths[i]);
    std::vector<SpanRow> samples;
    std::exception_ptr error;
    try {
      samples = read_file_clock_samples(
          paths[i], [&](std::string_view line, std::uint64_t offset, std::size_t number) {
            scan_steps(line, offset, number, f);
          });
    } catch (...) {
      error = std::current_exception();  // the clock pass's error (the index then cut short)
    }
    out.index.files.push_back(std::move(f));
    out.samples.push_back(std::move(samples));
    out.errors.push_back(error);
  }
  return out;
}

StepIndex join_index_shares(const OpenedRun& run, std::vector<StepIndex> shares, bool save) {
  StepIndex index;
  const std::size_t k = shares.size();
  std::size_t total = 0;
  for (const auto& s : shares) total += s.files.size();
  // File i is share i mod k's (i / k)-th.
  for (std::size_t i = 0; i < total; ++i) {
    auto& from = shares[i % k].files;
    if (i / k >= from.size()) throw std::runtime_error("the step index's shares do not fit");
    index.files.push_back(std::move(from[i / k]));
  }
  const std::filesystem::path saved = save ? saved_index_path(run.input()) : std::filesystem::path();
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

StepIndex step_index(const OpenedRun& run) {
  if (auto saved = saved_step_index(run)) return std::move(*saved);
  std::vector<StepIndex> one;
  one.push_back(index_share(run, 0, 1));
  return join_index_shares(run, std::move(one));
}

bool cuts_cleanly(const StepIndex& index) {
  for (const FileSteps& f : index.files)
    for (std::size_t i = 1; i < f.steps.size(); ++i)
      if (f.steps[i].step < f.steps[i - 1].step) return false;
  return true;
}

std::vector<StepRange> split_steps(const StepIndex& index, int parts) {
  const std::vector<std::int64_t> steps = index.steps();
  std::vector<StepRange> out;
  const std::size_t n = steps.size(), k = static_cast<std::size_t>(std::max(parts, 1));
  if (n == 0 || !cuts_cleanly(index)) {
    // No step spans, or no clean cut: the first part reads the whole run,
    // as one process.
    out.assign(k, StepRange{1, 0});
    out[0] = {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
    return out;
  }
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

std::string clock_samples_share(const OpenedRun& run, int share, int shares) {
  const auto& paths = run.files();
  Writer w;
  std::vector<std::string> files;
  for (std::size_t i = static_cast<std::size_t>(std::max(share, 0)); i < paths.size();
       i += static_cast<std::size_t>(std::max(shares, 1))) {
    Writer one;
    one.list(read_file_clock_samples(paths[i]), [&](const SpanRow& s) {
      one.put<std::int32_t>(s.rank);
      one.put<std::uint64_t>(s.process);
      one.put(s.name);
      one.put_attributes(s.attributes, false);
    });
    files.push_back(one.take());
  }
  w.list(files, [&](const std::string& f) { w.put(f); });
  return w.take();
}

std::string join_clock_samples(const std::vector<std::string>& shares) {
  // Each share: per file, its samples as a list; file i is share i mod k's
  // (i / k)-th. The result: every sample, in file order, as one list.
  const std::size_t k = shares.size();
  std::vector<std::vector<std::string>> files(k);
  std::size_t total = 0;
  for (std::size_t i = 0; i < k; ++i) {
    Reader r(shares[i]);
    for (std::size_t n = r.count(); n > 0; --n) files[i].push_back(r.text());
    if (!r.done()) throw std::runtime_error("a clock samples share with bytes after its end");
    total += files[i].size();
  }
  std::uint64_t count = 0;
  std::string rows;
  for (std::size_t i = 0; i < total; ++i) {
    if (i / k >= files[i % k].size())
      throw std::runtime_error("the clock samples' shares do not fit");
    const std::string& list = files[i % k][i / k];
    Reader r(list);
    const std::size_t n = r.count();
    count += n;
    rows.append(list, sizeof(std::uint64_t), std::string::npos);  // its rows, after the count
  }
  Writer w;
  w.put<std::uint64_t>(count);
  return w.take() + rows;
}

std::string clock_samples(const OpenedRun& run) {
  return join_clock_samples({clock_samples_share(run, 0, 1)});
}

ClockAlignment clock_from_samples(std::string_view bytes) {
  Reader r(bytes);
  ClockAlignment clock;
  for (std::size_t n = r.count(); n > 0; --n) {
    SpanRow s;
    s.rank = r.get<std::int32_t>();
    s.process = r.get<std::uint64_t>();
    s.name = r.text();
    r.get_attributes(s.attributes, false);
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

// Whether `range` is the run's last (it reads every file to its end).
bool is_last(const std::vector<std::int64_t>& steps, StepRange range) {
  return !range.empty() && (steps.empty() || range.last >= steps.back());
}

// The stream of one range's steps: each file read from the line before the
// range, the steps before it handed over unseen, reading stopped after its
// last step; the lines it owns (whose spans outside the windows it returns
// and counts) end at the line where the next range's reading begins.
StreamOptions part_stream(const StepIndex& index, StepRange range, StreamOptions so) {
  const std::vector<std::int64_t> steps = index.steps();
  const bool first_range = steps.empty() || range.first <= steps.front();
  const bool last_range = is_last(steps, range);
  std::map<std::string, StreamOptions::Start> ends;
  if (!first_range) {
    so.first_step = range.first;
    so.starts = starts_for(index, range.first);
  }
  if (!last_range) {
    so.stop_after_step = range.last;
    ends = starts_for(index, range.last + 1);
  }
  for (const auto& f : index.files) {
    StreamOptions::Owned owned;
    if (auto start = so.starts.find(f.name); start != so.starts.end())
      owned.after = start->second.line;
    if (!last_range) {
      auto end = ends.find(f.name);
      owned.through = end != ends.end() ? end->second.line : 0;
    }
    so.owned[f.name] = owned;
  }
  return so;
}

// ---- what every part sends beside its command's rows ----------------------

void put_span(Writer& w, const SpanRow& s) {
  w.put<std::int32_t>(s.rank);
  w.put<std::uint64_t>(s.process);
  for (const HexId* id : {&s.trace_id, &s.span_id, &s.parent_span_id}) w.put(id->view());
  w.put(s.name);
  w.put<std::int64_t>(s.start_ns);
  w.put<std::int64_t>(s.end_ns);
  w.put<std::int32_t>(s.kind);
  w.put<std::int32_t>(s.status_code);
  w.put(s.status_message);
  w.put_attributes(s.attributes, true);
  w.list(s.links, [&](const std::pair<HexId, HexId>& l) {
    w.put(l.first.view());
    w.put(l.second.view());
  });
}

SpanRow get_span(Reader& r) {
  SpanRow s;
  s.rank = r.get<std::int32_t>();
  s.process = r.get<std::uint64_t>();
  for (HexId* id : {&s.trace_id, &s.span_id, &s.parent_span_id}) *id = r.id();
  s.name = r.text();
  s.start_ns = r.get<std::int64_t>();
  s.end_ns = r.get<std::int64_t>();
  s.kind = r.get<std::int32_t>();
  s.status_code = r.get<std::int32_t>();
  s.status_message = r.text();
  r.get_attributes(s.attributes, true);
  for (std::size_t n = r.count(); n > 0; --n) {
    const HexId trace = r.id();
    s.links.emplace_back(trace, r.id());
  }
  return s;
}

void put_file(Writer& w, const RankFile& f) {
  w.put(f.path.string());
  for (int v : {f.rank, f.world_size, f.replica, f.tensor_rank}) w.put<std::int32_t>(v);
  for (const std::string* t : {&f.run_id, &f.service_name, &f.trace_scope, &f.export_filter})
    w.put(*t);
  w.put<std::uint64_t>(f.process);
  w.put<std::uint64_t>(f.lines);
  w.put_map(f.resource.map());
  w.put_map(f.resource_types.map());
}

RankFile get_file(Reader& r) {
  RankFile f;
  f.path = r.text();
  for (int* v : {&f.rank, &f.world_size, &f.replica, &f.tensor_rank}) *v = r.get<std::int32_t>();
  for (std::string* t : {&f.run_id, &f.service_name, &f.trace_scope, &f.export_filter})
    *t = r.text();
  f.process = r.get<std::uint64_t>();
  f.lines = r.get<std::uint64_t>();
  r.get_map(f.resource.own());
  r.get_map(f.resource_types.own());
  return f;
}

// One range's stream: its windows to `on_window`, then, as bytes, what it
// counted (causality moves, unaligned ranks, spans left out) and, per file,
// its warnings and the spans of its lines outside the windows (the last
// part, which reads every file to its end, adds the files' metadata).
std::string read_part(const OpenedRun& run, const StepIndex& index, StepRange range,
                      const ClockAlignment* clock,
                      const std::function<void(StepWindow&)>& on_window,
                      const ReadProgress& progress = {}) {
  ClockReport report = clock != nullptr ? ClockReport::of(*clock) : ClockReport();
  LateSpans late;
  StreamOptions::PartTally tally;
  std::map<std::string, std::int64_t> step_traces;  // the trace of each step handed over
  Run rest;
  const bool last_range = is_last(index.steps(), range);
  if (!range.empty()) {
    StreamOptions so =
        clock != nullptr ? aligned_stream(*clock, &report, &late) : StreamOptions();
    so.late = &late;
    so.part_tally = &tally;
    so.progress = progress;
    rest = stream_steps(run, [&](StepWindow& window) {
      for (const auto& f : window.run.files)
        for (const auto& span : f.spans)
          if (is_step_span(span)) step_traces.emplace(span.trace_id, window.step);
      on_window(window);
    }, part_stream(index, range, so));
  }
  Writer w;
  put_moves(w, report.moves);
  w.put<std::uint64_t>(report.unaligned_ranks.size());
  for (int rank : report.unaligned_ranks) w.put<std::int32_t>(rank);
  put_late(w, late);
  w.put<std::uint8_t>(last_range ? 1 : 0);
  w.list(rest.files, [&](const RankFile& f) {
    const std::string name = f.path.filename().string();
    w.put(name);
    w.put(f.path.string());
    if (last_range) put_file(w, f);
    w.list(f.warnings, [&](const std::string& s) { w.put(s); });
    const std::size_t n_late = std::min(tally.late[name], f.spans.size());
    const std::size_t n_open = f.spans.size() - n_late;
    const std::vector<std::size_t>& lines = tally.open_lines[name];
    if (lines.size() != n_open) throw std::logic_error("a part's spans and their lines differ");
    w.put<std::uint64_t>(n_open);
    for (std::size_t i = 0; i < n_open; ++i) {
      put_span(w, f.spans[i]);
      w.put<std::uint64_t>(lines[i]);
    }
    w.put<std::uint64_t>(n_late);
    for (std::size_t i = n_open; i < f.spans.size(); ++i) put_span(w, f.spans[i]);
  });
  w.put(inferred_of(rest.files));
  w.put<std::uint64_t>(step_traces.size());
  for (const auto& [trace, step] : step_traces) {
    w.put(trace);
    w.put<std::int64_t>(step);
  }
  w.list(tally.claimed, [&](const std::string& id) { w.put(id); });
  return w.take();
}

// Every part's stream bytes, in range order, as one process's stream would
// have ended: its counts and the files it returns.
class StreamMerge {
 public:
  StreamMerge(const std::filesystem::path& dir, const ClockAlignment& clock, bool raw_clock)
      : dir_(dir), report_(ClockReport::of(clock)) {
    report_.raw_asked = raw_clock;
  }

  // A part's stream bytes, in range order.
  void add(Reader& r) {
    const std::size_t index = parts_.size();
    Part& part = parts_.emplace_back();
    report_.moves.add(get_moves(r));
    for (std::size_t n = r.count(); n > 0; --n)
      report_.unaligned_ranks.insert(r.get<std::int32_t>());
    merge_late(r, part.late);
    const bool last = r.get<std::uint8_t>() != 0;
    for (std::size_t n = r.count(); n > 0; --n) {
      PartFile& f = part.files.emplace_back();
      f.name = r.text();
      f.path = r.text();
      if (last) f.meta = get_file(r);
      for (std::size_t k = r.count(); k > 0; --k) f.warnings.push_back(r.text());
      for (std::size_t k = r.count(); k > 0; --k) {
        SpanRow s = get_span(r);
        f.open.push_back({std::move(s), static_cast<std::size_t>(r.get<std::uint64_t>())});
      }
      for (std::size_t k = r.count(); k > 0; --k) f.late.push_back(get_span(r));
    }
    const std::string inferred = r.text();
    if (inferred_.empty()) inferred_ = inferred;
    if (last) {
      order_.clear();
      for (const PartFile& f : part.files) order_.push_back(f.name);
    }
    for (std::size_t n = r.count(); n > 0; --n) {
      std::string trace = r.text();
      const std::int64_t step = r.get<std::int64_t>();
      handed_.try_emplace(std::move(trace), Handed{index, step});
    }
    for (std::size_t n = r.count(); n > 0; --n) claimed_.insert(r.text());
  }

  // The files as the one stream returns them (after every part's add).
  Run rest() {
    finish();
    Run run;
    run.dir = dir_;
    for (const std::string& name : order_) {
      File& f = files_[name];
      RankFile file = std::move(f.meta);
      file.warnings = std::move(f.warnings);
      if (!f.late.empty()) file.warnings.push_back(late_warning(file.path, f.late.size()));
      for (auto& trace : f.open)
        for (auto& s : trace) file.spans.push_back(std::move(s));
      for (auto& s : f.late) file.spans.push_back(std::move(s));
      run.files.push_back(std::move(file));
    }
    return run;
  }
  ClockReport& report() { return report_; }
  LateSpans& late() {
    finish();
    return late_;
  }
  const std::string& inferred() const { return inferred_; }

 private:
  struct OpenRow {
    SpanRow span;
    std::size_t line;
  };
  struct PartFile {
    std::string name, path;
    std::optional<RankFile> meta;
    std::vector<std::string> warnings;
    std::vector<OpenRow> open;
    std::vector<SpanRow> late;
  };
  struct Part {
    LateSpans late;
    std::vector<PartFile> files;
  };
  struct Handed {  // a step trace, by the first part that handed its window over
    std::size_t part;
    std::int64_t step;
  };
  struct File {
    RankFile meta;
    std::vector<std::string> warnings;
    std::map<std::string, std::size_t> trace_at;
    std::vector<std::vector<SpanRow>> open;
    std::vector<SpanRow> late;
  };

  // Each part's spans outside its windows, as one stream would have placed
  // them: a span of a step an earlier part handed over came late; one that
  // another part handed over in a window (read there on the line where that
  // part begins) is that window's; the others are of no step, each trace's
  // together in the order first read.
  void finish() {
    if (finished_) return;
    finished_ = true;
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      Part& part = parts_[p];
      late_.duplicates += part.late.duplicates;
      late_.late += part.late.late;
      late_.forgot = late_.forgot || part.late.forgot;
      for (auto [from, to] : {std::pair{&part.late.duplicate_list, &late_.duplicate_list},
                              std::pair{&part.late.late_list, &late_.late_list}})
        for (auto& s : *from)
          if (to->size() < LateSpans::kKept) to->push_back(std::move(s));
      for (PartFile& pf : part.files) {
        File& f = files_[pf.name];
        if (pf.meta) f.meta = std::move(*pf.meta);
        // A run-wide warning each part found once.
        for (auto& w : pf.warnings)
          if (std::find(f.warnings.begin(), f.warnings.end(), w) == f.warnings.end())
            f.warnings.push_back(std::move(w));
        for (OpenRow& row : pf.open) {
          SpanRow& s = row.span;
          const auto handed = handed_.find(s.trace_id.str());
          if (claimed_.count(s.span_id.str())) continue;
          if (handed != handed_.end() && handed->second.part < p) {
            late_.late += 1;
            if (late_.late_list.size() < LateSpans::kKept)
              late_.late_list.push_back(
                  {s.rank, pf.path, row.line, handed->second.step, s.name, s.span_id.str()});
            f.late.push_back(std::move(s));
            continue;
          }
          auto [at, fresh] = f.trace_at.try_emplace(s.trace_id.str(), f.open.size());
          if (fresh) f.open.emplace_back();
          f.open[at->second].push_back(std::move(s));
        }
        for (auto& s : pf.late) f.late.push_back(std::move(s));
      }
    }
    parts_.clear();
  }

  std::filesystem::path dir_;
  ClockReport report_;
  LateSpans late_;
  std::string inferred_;
  std::vector<Part> parts_;
  std::unordered_map<std::string, Handed> handed_;
  std::unordered_set<std::string> claimed_;  // span ids some part's windows hold
  bool finished_ = false;
  std::map<std::string, File> files_;
  std::vector<std::string> order_;
};

// A part: its magic, its command's rows, its stream's bytes.
std::string make_part(std::uint32_t magic, const std::string& rows, const std::string& stream) {
  Writer w;
  w.put<std::uint32_t>(magic);
  w.put(rows);
  w.put(stream);
  return w.take();
}

// Each part's rows to `rows` and its stream's bytes to `merge`, in order.
void take_parts(const std::vector<std::string>& parts, std::uint32_t magic, StreamMerge& merge,
                const std::function<void(Reader&)>& rows) {
  for (const std::string& part : parts) {
    Reader r(part);
    if (r.get<std::uint32_t>() != magic)
      throw std::runtime_error("not a lens part of this command");
    const std::string row_bytes = r.text();
    Reader rr(row_bytes);
    rows(rr);
    if (!rr.done()) throw std::runtime_error("a lens part's rows with bytes after their end");
    const std::string stream_bytes = r.text();
    Reader sr(stream_bytes);
    merge.add(sr);
    if (!sr.done() || !r.done()) throw std::runtime_error("a lens part with bytes after its end");
  }
}

constexpr std::uint32_t kSummaryMagic = 0x6c6e7332;  // "lns2"
constexpr std::uint32_t kCheckMagic = 0x6c6e6332;    // "lnc2"

}  // namespace

// ---- analyze ---------------------------------------------------------------

std::string analyze_part(const OpenedRun& run, const StepIndex& index,
                         StepRange range, const ClockAlignment& clock, bool keep_critical_path,
                         const ReadProgress& progress) {
  const std::vector<std::int64_t> steps = index.steps();
  StepBaselines baselines;
  // The stages' baselines: their first steps' costs, as the one process saw
  // them before this range.
  if (!range.empty() && !steps.empty() && range.first > steps.front()) {
    ClockReport unused = ClockReport::of(clock);
    StreamOptions so = aligned_stream(clock, &unused, nullptr);
    so.stop_after_step = range.first - 1;
    std::size_t seen = 0;
    try {
      stream_steps(run, [&](StepWindow& window) {
        for_each_record(build_view(window.run), window.run, baselines, false,
                        [&](const StepRecord&) { ++seen; });
        bool all = seen >= kBaselineSteps;
        for (const auto& [key, first] : baselines) all = all && first.size() >= kBaselineSteps;
        if (all) throw BaselinesComplete{};
      }, so);
    } catch (const BaselinesComplete&) {
    }
  }
  Writer rows;
  std::uint64_t count = 0;
  const std::string stream = read_part(
      run, index, range, &clock,
      [&](StepWindow& window) {
        for_each_record(build_view(window.run), window.run, baselines, keep_critical_path,
                        [&](const StepRecord& r) {
                          put_record(rows, r);
                          ++count;
                        });
      },
      progress);
  Writer counted;
  counted.put<std::uint64_t>(count);
  return make_part(kPartMagic, counted.take() + rows.take(), stream);
}

namespace {

// Whether the spans hold a span id twice.
bool repeats_a_span(const Run& rest) {
  std::vector<std::string_view> ids;
  for (const auto& f : rest.files)
    for (const auto& s : f.spans)
      if (!s.span_id.empty()) ids.push_back(s.span_id);
  std::sort(ids.begin(), ids.end(), id_less);
  return std::adjacent_find(ids.begin(), ids.end()) != ids.end();
}

}  // namespace

Analysis merge_parts(const std::vector<std::string>& parts, const ClockAlignment& clock,
                     bool raw_clock, bool keep_critical_path,
                     std::vector<std::string>* warnings, bool* rest_repeats) {
  AnalysisBuilder builder(keep_critical_path);
  StreamMerge merge({}, clock, raw_clock);
  take_parts(parts, kPartMagic, merge, [&](Reader& r) {
    for (std::size_t n = r.count(); n > 0; --n) builder.add_record(get_record(r));
  });
  const Run rest = merge.rest();
  if (rest_repeats) *rest_repeats = repeats_a_span(rest);
  if (warnings)
    for (const auto& f : rest.files)
      warnings->insert(warnings->end(), f.warnings.begin(), f.warnings.end());
  Analysis a = builder.finish();
  a.inferred = merge.inferred();
  a.clock = std::move(merge.report());
  a.left_out = std::move(merge.late());
  return a;
}

// ---- summary ---------------------------------------------------------------

std::string summary_part(const OpenedRun& run, const StepIndex& index,
                         StepRange range, const ClockAlignment& clock,
                         const ReadProgress& progress) {
  SummaryRows all;
  const std::string stream = read_part(
      run, index, range, &clock,
      [&](StepWindow& window) { all.append(SummaryBuilder::rows_of(build_view(window.run))); },
      progress);
  Writer w;
  for (int v : {all.pipeline_stages, all.microbatches, all.virtual_stages})
    w.put<std::int32_t>(v);
  w.put<std::uint8_t>(all.tensor_collectives ? 1 : 0);
  w.list(all.rows, [&](const StageStep& s) {
    w.put<std::int64_t>(s.step);
    w.put<std::int32_t>(s.rank);
    w.put<std::int32_t>(s.stage);
    for (double v : {s.step_ms, s.forward_ms, s.backward_ms, s.p2p_ms, s.optimizer_ms, s.idle_ms,
                     s.collective_ms, s.bubble})
      w.put<double>(v);
  });
  return make_part(kSummaryMagic, w.take(), stream);
}

Summary merge_summary_parts(const std::vector<std::string>& parts, const ClockAlignment& clock,
                            bool raw_clock, std::vector<std::string>* warnings,
                            bool* rest_repeats) {
  SummaryBuilder builder;
  StreamMerge merge({}, clock, raw_clock);
  take_parts(parts, kSummaryMagic, merge, [&](Reader& r) {
    SummaryRows rows;
    for (int* v : {&rows.pipeline_stages, &rows.microbatches, &rows.virtual_stages})
      *v = r.get<std::int32_t>();
    rows.tensor_collectives = r.get<std::uint8_t>() != 0;
    for (std::size_t n = r.count(); n > 0; --n) {
      StageStep s;
      s.step = r.get<std::int64_t>();
      s.rank = r.get<std::int32_t>();
      s.stage = r.get<std::int32_t>();
      for (double* v : {&s.step_ms, &s.forward_ms, &s.backward_ms, &s.p2p_ms, &s.optimizer_ms,
                        &s.idle_ms, &s.collective_ms, &s.bubble})
        *v = r.get<double>();
      rows.rows.push_back(s);
    }
    builder.add(rows);
  });
  const Run rest = merge.rest();
  if (rest_repeats) *rest_repeats = repeats_a_span(rest);
  if (warnings)
    for (const auto& f : rest.files)
      warnings->insert(warnings->end(), f.warnings.begin(), f.warnings.end());
  Summary s = builder.finish(build_view(rest));
  s.clock = std::move(merge.report());
  s.left_out = std::move(merge.late());
  return s;
}

// ---- check -----------------------------------------------------------------

// A part's checker as bytes (check.h: RunChecker::absorb takes it).
struct CheckerBytes {
  static void put(Writer& w, const RunChecker& c) {
    w.list(c.found_, [&](const Violation& v) { put_violation(w, v); });
    w.list(c.pending_, [&](const RunChecker::PendingLink& p) {
      w.put<std::int64_t>(p.step);
      w.put<std::int32_t>(p.rank);
      for (const std::string* t : {&p.name, &p.span_id, &p.trace, &p.span}) w.put(*t);
    });
    w.list(c.linked_, [&](const RunChecker::LinkedCount& l) {
      w.put<std::int64_t>(l.step);
      w.put<std::int32_t>(l.rank);
      w.put<std::int32_t>(l.stage);
      w.put<std::uint64_t>(l.linked);
      w.put<std::uint8_t>(l.has_p2p ? 1 : 0);
    });
    w.list(c.stages_, [&](const RunChecker::StageSeen& s) {
      w.put<std::int64_t>(s.step);
      w.put<std::int32_t>(s.rank);
      w.put<std::int32_t>(s.stage);
      w.put(s.span);
    });
    w.put<std::uint64_t>(c.linked_counts_.size());
    for (const auto& [rank, counts] : c.linked_counts_) {
      w.put<std::int32_t>(rank);
      w.put<std::uint64_t>(counts.size());
      for (std::size_t n : counts) w.put<std::uint64_t>(n);
    }
    for (int v : {c.pipeline_stages_, c.declared_stages_, c.microbatches_, c.virtual_stages_})
      w.put<std::int32_t>(v);
    for (std::size_t v : {c.steps_, c.stopped_spans_, c.interrupted_steps_})
      w.put<std::uint64_t>(v);
    w.put(c.stopped_by_);
    for (bool b : {c.inferred_, c.unordered_seen_, c.ordered_seen_}) w.put<std::uint8_t>(b ? 1 : 0);
    w.put<std::uint64_t>(c.job_of_rank_.size());
    for (const auto& [rank, job] : c.job_of_rank_) {
      w.put<std::int32_t>(rank);
      w.put(job.first);
      w.put(job.second);
    }
    w.put<std::uint64_t>(c.step_link_targets_.size());
    for (const auto& [rank, targets] : c.step_link_targets_) {
      w.put<std::int32_t>(rank);
      w.put<std::uint64_t>(targets.size());
      for (const auto& [target, n] : targets) {
        w.put(target);
        w.put<std::uint64_t>(n);
      }
    }
    w.put<std::uint64_t>(c.steps_of_rank_.size());
    for (const auto& [rank, n] : c.steps_of_rank_) {
      w.put<std::int32_t>(rank);
      w.put<std::uint64_t>(n);
    }
    w.list(c.trace_uses_, [&](const RunChecker::TraceUse& u) {
      w.put<std::uint64_t>(u.found);
      w.put<std::int64_t>(u.step);
      w.list(u.traces, [&](const std::string& t) { w.put(t); });
    });
  }

  static RunChecker get(Reader& r, const StartOrder& order) {
    RunChecker c(order);
    for (std::size_t n = r.count(); n > 0; --n) c.found_.push_back(get_violation(r));
    for (std::size_t n = r.count(); n > 0; --n) {
      RunChecker::PendingLink p;
      p.step = r.get<std::int64_t>();
      p.rank = r.get<std::int32_t>();
      for (std::string* t : {&p.name, &p.span_id, &p.trace, &p.span}) *t = r.text();
      c.pending_.push_back(std::move(p));
    }
    for (std::size_t n = r.count(); n > 0; --n) {
      RunChecker::LinkedCount l;
      l.step = r.get<std::int64_t>();
      l.rank = r.get<std::int32_t>();
      l.stage = r.get<std::int32_t>();
      l.linked = r.get<std::uint64_t>();
      l.has_p2p = r.get<std::uint8_t>() != 0;
      c.linked_.push_back(l);
    }
    for (std::size_t n = r.count(); n > 0; --n) {
      RunChecker::StageSeen s;
      s.step = r.get<std::int64_t>();
      s.rank = r.get<std::int32_t>();
      s.stage = r.get<std::int32_t>();
      s.span = r.text();
      c.stages_.push_back(std::move(s));
    }
    for (std::size_t n = r.count(); n > 0; --n) {
      auto& counts = c.linked_counts_[r.get<std::int32_t>()];
      for (std::size_t k = r.count(); k > 0; --k) counts.insert(r.get<std::uint64_t>());
    }
    for (int* v : {&c.pipeline_stages_, &c.declared_stages_, &c.microbatches_, &c.virtual_stages_})
      *v = r.get<std::int32_t>();
    for (std::size_t* v : {&c.steps_, &c.stopped_spans_, &c.interrupted_steps_})
      *v = r.get<std::uint64_t>();
    c.stopped_by_ = r.text();
    for (bool* b : {&c.inferred_, &c.unordered_seen_, &c.ordered_seen_})
      *b = r.get<std::uint8_t>() != 0;
    for (std::size_t n = r.count(); n > 0; --n) {
      const int rank = r.get<std::int32_t>();
      std::string trace = r.text();
      c.job_of_rank_[rank] = {std::move(trace), r.text()};
    }
    for (std::size_t n = r.count(); n > 0; --n) {
      auto& targets = c.step_link_targets_[r.get<std::int32_t>()];
      for (std::size_t k = r.count(); k > 0; --k) {
        std::string target = r.text();
        targets[std::move(target)] = r.get<std::uint64_t>();
      }
    }
    for (std::size_t n = r.count(); n > 0; --n) {
      const int rank = r.get<std::int32_t>();
      c.steps_of_rank_[rank] = r.get<std::uint64_t>();
    }
    for (std::size_t n = r.count(); n > 0; --n) {
      RunChecker::TraceUse u;
      u.found = r.get<std::uint64_t>();
      u.step = r.get<std::int64_t>();
      for (std::size_t k = r.count(); k > 0; --k) u.traces.push_back(r.text());
      if (u.found > c.found_.size()) throw std::runtime_error("a lens check part is malformed");
      c.trace_uses_.push_back(std::move(u));
    }
    return c;
  }

  static void put_violation(Writer& w, const Violation& v) {
    w.put<std::int64_t>(v.step);
    w.put<std::int32_t>(v.rank);
    w.put(v.what);
    w.put(v.span);
  }
  static Violation get_violation(Reader& r) {
    Violation v;
    v.step = r.get<std::int64_t>();
    v.rank = r.get<std::int32_t>();
    v.what = r.text();
    v.span = r.text();
    return v;
  }
};

std::string check_part(const OpenedRun& run, const StepIndex& index,
                       StepRange range, const StartOrder& order, const ReadProgress& progress) {
  RunChecker checker(order);
  checker.check_as_part();
  std::uint64_t spans = 0;
  const std::string stream = read_part(
      run, index, range, nullptr,
      [&](StepWindow& window) {
        spans += window.run.span_count();
        checker.add(window.run, build_view(window.run));
      },
      progress);
  Writer w;
  w.put<std::uint64_t>(spans);
  CheckerBytes::put(w, checker);
  return make_part(kCheckMagic, w.take(), stream);
}

CheckResult merge_check_parts(const std::vector<std::string>& parts, const OpenedRun& run,
                              const StartOrder& order, bool* rest_repeats) {
  RunChecker checker(order);
  std::size_t spans = 0;
  StreamMerge merge(run.input(), ClockAlignment(), false);
  take_parts(parts, kCheckMagic, merge, [&](Reader& r) {
    spans += r.get<std::uint64_t>();
    checker.absorb(CheckerBytes::get(r, order));
  });
  const Run rest = merge.rest();
  if (rest_repeats) *rest_repeats = repeats_a_span(rest);
  return finish_check(run, checker, rest, spans, std::move(merge.late()));
}

}  // namespace lens::analysis
