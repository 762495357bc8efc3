#include "viewer_export.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "clock_alignment.h"
#include "line_reader.h"
#include "pipeline_view.h"
#include "lens/semconv.h"

namespace lens::tools {

using namespace lens::analysis;  // the readers this command is a front of

using json = nlohmann::json;

namespace {

// Writes the elements of one JSON array, comma separated.
class ArrayWriter {
 public:
  explicit ArrayWriter(std::ostream& out) : out_(out) {}
  void add(const json& element) {
    if (!first_) out_ << ',';
    first_ = false;
    out_ << element.dump() << '\n';
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

void collect_warnings(const Run& rest, ExportCounts& counts) {
  for (const auto& f : rest.files)
    counts.warnings.insert(counts.warnings.end(), f.warnings.begin(), f.warnings.end());
}

// Where a link's arrow starts: the target span's rank, lane row and start.
struct FlowStart {
  int rank = -1;
  int row = 0;
  std::int64_t start_ns = 0;
  bool found = false;
};
FlowStart flow_start(const SpanRow& s) { return {s.rank, lane_row(kind_of(s)), s.start_ns, true}; }

// The earliest startTimeUnixNano in the run's files, found by a scan of the
// text (no parsing: the export's own pass validates every line), or 0.
// The earliest span start of the run, on rank 0's clock when `clock` is
// given (a file's earliest span is still its earliest once aligned: offsets
// change by ppm).
std::int64_t earliest_start_ns(const OpenedRun& run, const ClockAlignment* clock) {
  constexpr std::string_view kKey = "\"startTimeUnixNano\":";
  std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
  for (const auto& path : run.files()) {
    std::int64_t in_file = std::numeric_limits<std::int64_t>::max();
    std::ifstream in(path, std::ios::binary);
    LineReader lines(in);
    std::string line;
    for (;;) {
      const LineReader::Status status = lines.next(line);
      if (status == LineReader::Status::kEnd || status == LineReader::Status::kTooLong) break;
      for (auto at = line.find(kKey); at != std::string::npos; at = line.find(kKey, at + 1)) {
        std::size_t i = at + kKey.size();
        while (i < line.size() && (line[i] == '"' || line[i] == ' ')) ++i;
        std::int64_t v = 0;
        auto [ptr, ec] = std::from_chars(line.data() + i, line.data() + line.size(), v);
        if (ec == std::errc() && ptr != line.data() + i && v > 0) in_file = std::min(in_file, v);
      }
    }
    if (in_file == std::numeric_limits<std::int64_t>::max()) continue;
    if (clock != nullptr) {
      RankFileReader reader(path);  // its first line says the file's rank
      if (reader.next_line())
        in_file += clock->offset_at(reader.file().rank, reader.file().process, in_file);
    }
    earliest = std::min(earliest, in_file);
  }
  return earliest == std::numeric_limits<std::int64_t>::max() ? 0 : earliest;
}

const char* span_kind_tag(int kind) {
  switch (kind) {
    case 2:
      return "server";
    case 3:
      return "client";
    case 4:
      return "producer";
    case 5:
      return "consumer";
    default:
      return nullptr;  // internal or unspecified: Jaeger writes no tag either
  }
}

}  // namespace

ExportCounts export_perfetto(const OpenedRun& run, std::ostream& out,
                             const StreamOptions& options) {
  ExportCounts counts;
  // Microseconds from the run's first span: absolute ones (~1.7e15) would
  // lose their sub-microsecond digits in a double and print in exponent form.
  const std::int64_t origin_ns = earliest_start_ns(run, options.clock);
  const auto us = [origin_ns](std::int64_t ns) {
    return static_cast<double>(ns - origin_ns) / 1e3;
  };
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"lens.time_origin_unix_ns\":\"" << origin_ns
      << "\",\"lens.clock\":\""
      << (options.clock ? "aligned to rank " + std::to_string(options.clock->reference_rank())
                        : std::string("raw"))
      << "\"},\"traceEvents\":[\n";
  ArrayWriter events(out);
  std::int64_t flow_id = 0;
  const auto add_flow = [&](const FlowStart& from, const SpanRow& s) {
    ++flow_id;
    ++counts.links;
    events.add({{"ph", "s"},
                {"name", "link"},
                {"cat", "link"},
                {"id", flow_id},
                {"pid", from.rank},
                {"tid", from.row},
                {"ts", us(from.start_ns)}});
    events.add({{"ph", "f"},
                {"bp", "e"},
                {"name", "link"},
                {"cat", "link"},
                {"id", flow_id},
                {"pid", s.rank},
                {"tid", lane_row(kind_of(s))},
                {"ts", us(s.start_ns)}});
  };
  // Links whose target is not in the linking span's step: drawn at the end.
  struct Pending {
    SpanRow linking;  // without attributes
    HexId target;
  };
  std::vector<Pending> pending;
  const auto add_spans = [&](const Run& part) {
    std::unordered_map<std::string_view, const SpanRow*> by_id;  // the rows' own ids
    for (const auto& f : part.files)
      for (const auto& s : f.spans) by_id[s.span_id] = &s;
    for (const auto& f : part.files) {
      for (const auto& s : f.spans) {
        const SpanKind k = kind_of(s);
        json args = json::object();
        for (const Attributes::Entry a : s.attributes) args[std::string(a.key)] = a.text;
        args["trace_id"] = s.trace_id;
        args["span_id"] = s.span_id;
        events.add({{"ph", "X"},
                    {"name", s.name},
                    {"cat", kind_name(k)},
                    {"pid", s.rank},
                    {"tid", lane_row(k)},
                    {"ts", us(s.start_ns)},
                    {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1e3},
                    {"args", args}});
        ++counts.spans;
        for (const auto& [trace, span] : s.links) {
          auto it = by_id.find(span);
          if (it != by_id.end()) {
            add_flow(flow_start(*it->second), s);
          } else {
            SpanRow linking = s;
            linking.attributes.clear();
            pending.push_back({std::move(linking), span});
          }
        }
      }
    }
  };
  Run rest = stream_steps(
      run, [&](StepWindow& w) { add_spans(w.run); }, options);
  add_spans(rest);
  const char* row_names[kLaneRows] = {"step", "compute", "p2p and collectives", "linked"};
  // A process per rank, named with its stage (and with tensor parallelism
  // its replica and TP rank), in stage order: a stage's ranks together.
  bool tensor_parallel = false;
  for (const auto& f : rest.files) tensor_parallel |= f.tensor_rank > 0;
  for (const auto& f : rest.files) {
    std::string name = "rank " + std::to_string(f.rank);
    std::int64_t stage = -1;
    if (const auto it = f.resource.find(semconv::kPipelineRank); it != f.resource.end()) {
      stage = std::strtoll(it->second.c_str(), nullptr, 10);
      name += " · stage " + it->second;
    }
    if (tensor_parallel)
      name += " · dp " + std::to_string(std::max(0, f.replica)) + " tp " +
              std::to_string(std::max(0, f.tensor_rank));
    events.add({{"ph", "M"},
                {"name", "process_name"},
                {"pid", f.rank},
                {"tid", 0},
                {"args", {{"name", name}}}});
    events.add({{"ph", "M"},
                {"name", "process_sort_index"},
                {"pid", f.rank},
                {"tid", 0},
                {"args", {{"sort_index", (std::max<std::int64_t>(stage, 0) << 24) + f.rank}}}});
    for (int row = 0; row < kLaneRows; ++row)
      events.add({{"ph", "M"},
                  {"name", "thread_name"},
                  {"pid", f.rank},
                  {"tid", row},
                  {"args", {{"name", row_names[row]}}}});
  }
  if (!pending.empty()) {
    // A second pass finds the targets; a link out of the run has no start to
    // draw from and is left out.
    std::unordered_map<HexId, FlowStart> targets;
    for (const auto& p : pending) targets.emplace(p.target, FlowStart{});
    scan_spans(run, [&](const RankFile&, const std::vector<SpanRow>& spans) {
      for (const auto& s : spans)
        if (auto it = targets.find(s.span_id); it != targets.end()) {
          SpanRow target = s;
          if (options.clock) options.clock->align(target);
          it->second = flow_start(target);
        }
    });
    for (const auto& p : pending)
      if (const FlowStart& from = targets[p.target]; from.found) add_flow(from, p.linking);
  }
  out << "]}\n";
  collect_warnings(rest, counts);
  return counts;
}

namespace {

// A Jaeger tag with the attribute's type: numbers as numbers (full
// precision), booleans as booleans, the rest as strings.
json jaeger_tag(const std::string& key, const std::string& text, char type) {
  try {
    if (type == 'i') return {{"key", key}, {"type", "int64"}, {"value", std::stoll(text)}};
    if (type == 'd') return {{"key", key}, {"type", "float64"}, {"value", std::stod(text)}};
  } catch (const std::exception&) {
    // Not a number after all: kept as the text it is.
  }
  if (type == 'b') return {{"key", key}, {"type", "bool"}, {"value", text == "true"}};
  return {{"key", key}, {"type", "string"}, {"value", text}};
}

char type_of(const std::map<std::string, char>& types, const std::string& key) {
  const auto it = types.find(key);
  return it == types.end() ? 's' : it->second;
}

// One Jaeger trace entry per trace id for a part of the run.
std::map<std::string, json> jaeger_traces(const Run& part, ExportCounts& counts,
                                          const JaegerOptions& options) {
  std::map<std::string, json> traces;  // trace id -> {traceID, spans, processes}
  bool tensor_parallel = false;
  for (const auto& f : part.files) tensor_parallel |= f.tensor_rank > 0;
  for (const auto& f : part.files) {
    const std::string process = "p" + std::to_string(f.rank);
    // A process per rank, told apart by its service name ("megatron-lm r1
    // s1": rank and stage; "... t1" with its TP rank under tensor
    // parallelism) unless the plain name is asked for, with every resource
    // attribute as a tag.
    std::string service = f.service_name.empty() ? "unknown" : f.service_name;
    if (!options.plain_service_name) {
      service += " r" + std::to_string(f.rank);
      if (const auto stage = f.resource.find(semconv::kPipelineRank);
          stage != f.resource.end())
        service += " s" + stage->second;
      if (tensor_parallel) service += " t" + std::to_string(std::max(0, f.tensor_rank));
    }
    json process_tags = json::array();
    for (const auto& [k, v] : f.resource)
      process_tags.push_back(jaeger_tag(k, v, type_of(f.resource_types.map(), k)));
    if (!f.resource.count(semconv::kRank))
      process_tags.push_back({{"key", semconv::kRank}, {"type", "int64"}, {"value", f.rank}});
    const json process_json = {{"serviceName", service}, {"tags", process_tags}};
    for (const auto& s : f.spans) {
      json& trace = traces[s.trace_id.str()];
      if (trace.is_null())
        trace = {{"traceID", s.trace_id}, {"spans", json::array()}, {"processes", json::object()}};
      trace["processes"][process] = process_json;
      json refs = json::array();
      if (!s.parent_span_id.empty())
        refs.push_back(
            {{"refType", "CHILD_OF"}, {"traceID", s.trace_id}, {"spanID", s.parent_span_id}});
      for (const auto& [lt, ls] : s.links) {
        refs.push_back({{"refType", "FOLLOWS_FROM"}, {"traceID", lt}, {"spanID", ls}});
        ++counts.links;
      }
      json tags = json::array();
      for (const Attributes::Entry a : s.attributes)
        tags.push_back(jaeger_tag(std::string(a.key), std::string(a.text), a.type));
      // Kind and status as Jaeger's own OTLP translator writes them, so a
      // failed span keeps its error mark.
      if (const char* kind = span_kind_tag(s.kind))
        tags.push_back({{"key", "span.kind"}, {"type", "string"}, {"value", kind}});
      if (s.status_code == 2) {
        tags.push_back({{"key", "otel.status_code"}, {"type", "string"}, {"value", "ERROR"}});
        tags.push_back({{"key", "error"}, {"type", "bool"}, {"value", true}});
        if (!s.status_message.empty())
          tags.push_back({{"key", "otel.status_description"},
                          {"type", "string"},
                          {"value", s.status_message}});
      } else if (s.status_code == 1) {
        tags.push_back({{"key", "otel.status_code"}, {"type", "string"}, {"value", "OK"}});
      }
      // Start and end in whole microseconds, the duration between them, so
      // that start + duration is the end as rounded (not rounded twice).
      const std::int64_t start_us = s.start_ns / 1000;
      trace["spans"].push_back({{"traceID", s.trace_id},
                                {"spanID", s.span_id},
                                {"operationName", s.name},
                                {"references", refs},
                                {"startTime", start_us},
                                {"duration", s.end_ns / 1000 - start_us},
                                {"tags", tags},
                                {"logs", json::array()},
                                {"processID", process},
                                {"warnings", nullptr},
                                {"flags", 1}});
      ++counts.spans;
    }
  }
  return traces;
}

// Adds `extra`'s spans and processes to `entry` (both one trace's).
void merge_trace(json& entry, json& extra) {
  for (auto& span : extra["spans"]) entry["spans"].push_back(std::move(span));
  for (auto& [id, process] : extra["processes"].items()) entry["processes"][id] = process;
}

}  // namespace

ExportCounts export_jaeger(const OpenedRun& run, std::ostream& out,
                           const StreamOptions& options, const JaegerOptions& jaeger) {
  // Jaeger's UI keeps one entry per traceID, so each trace must be written
  // whole. Steps are written as they are read, to a temporary file (a line
  // per trace, after its id); a trace that also has spans among those in no
  // step (one that ended after its step span) is merged with them when the
  // temporary file is copied out. Memory stays at one step.
  ExportCounts counts;
  std::string tmp_path = (std::filesystem::temp_directory_path() / "lens-jaeger-XXXXXX").string();
  const int fd = ::mkstemp(tmp_path.data());
  if (fd < 0) throw std::runtime_error("cannot create a temporary file in " + tmp_path);
  ::close(fd);
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove_tmp{tmp_path};
  {
    std::ofstream tmp(tmp_path, std::ios::binary | std::ios::trunc);
    Run rest = stream_steps(
        run,
        [&](StepWindow& w) {
          for (auto& [id, entry] : jaeger_traces(w.run, counts, jaeger))
            tmp << id << ' ' << entry.dump() << '\n';
        },
        options);
    collect_warnings(rest, counts);
    std::map<std::string, json> leftovers = jaeger_traces(rest, counts, jaeger);
    tmp.close();
    if (!tmp) throw std::runtime_error("cannot write the temporary file " + tmp_path);

    out << "{\"data\":[\n";
    ArrayWriter data(out);
    std::ifstream in(tmp_path, std::ios::binary);
    for (std::string line; std::getline(in, line);) {
      const auto space = line.find(' ');
      const std::string id = line.substr(0, space);
      json entry = json::parse(line.substr(space + 1));
      if (auto it = leftovers.find(id); it != leftovers.end()) {
        merge_trace(entry, it->second);
        leftovers.erase(it);
      }
      data.add(entry);
      ++counts.traces;
    }
    for (auto& [id, entry] : leftovers) {
      data.add(entry);
      ++counts.traces;
    }
    out << "]}\n";
  }
  return counts;
}

}  // namespace lens::tools
