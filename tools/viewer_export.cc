#include "viewer_export.h"

#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "pipeline_view.h"

namespace lens::tools {

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

}  // namespace

ExportCounts export_perfetto(const std::filesystem::path& dir, std::ostream& out,
                             const StreamOptions& options) {
  ExportCounts counts;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
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
                {"ts", from.start_ns / 1000.0}});
    events.add({{"ph", "f"},
                {"bp", "e"},
                {"name", "link"},
                {"cat", "link"},
                {"id", flow_id},
                {"pid", s.rank},
                {"tid", lane_row(kind_of(s))},
                {"ts", s.start_ns / 1000.0}});
  };
  // Links whose target is not in the linking span's step: drawn at the end.
  struct Pending {
    SpanRow linking;  // without attributes
    std::string target;
  };
  std::vector<Pending> pending;
  const auto add_spans = [&](const Run& part) {
    std::unordered_map<std::string, const SpanRow*> by_id;
    for (const auto& f : part.files)
      for (const auto& s : f.spans) by_id[s.span_id] = &s;
    for (const auto& f : part.files) {
      for (const auto& s : f.spans) {
        const SpanKind k = kind_of(s);
        json args = s.attributes;
        args["trace_id"] = s.trace_id;
        args["span_id"] = s.span_id;
        events.add({{"ph", "X"},
                    {"name", s.name},
                    {"cat", kind_name(k)},
                    {"pid", s.rank},
                    {"tid", lane_row(k)},
                    {"ts", s.start_ns / 1000.0},
                    {"dur", (s.end_ns - s.start_ns) / 1000.0},
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
      dir, [&](StepWindow& w) { add_spans(w.run); }, options);
  add_spans(rest);
  const char* row_names[kLaneRows] = {"step", "compute", "p2p", "linked"};
  for (const auto& f : rest.files) {
    events.add({{"ph", "M"},
                {"name", "process_name"},
                {"pid", f.rank},
                {"tid", 0},
                {"args", {{"name", "rank " + std::to_string(f.rank)}}}});
    events.add({{"ph", "M"},
                {"name", "process_sort_index"},
                {"pid", f.rank},
                {"tid", 0},
                {"args", {{"sort_index", f.rank}}}});
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
    std::unordered_map<std::string, FlowStart> targets;
    for (const auto& p : pending) targets.emplace(p.target, FlowStart{});
    scan_spans(dir, [&](const RankFile&, const std::vector<SpanRow>& spans) {
      for (const auto& s : spans)
        if (auto it = targets.find(s.span_id); it != targets.end()) it->second = flow_start(s);
    });
    for (const auto& p : pending)
      if (const FlowStart& from = targets[p.target]; from.found) add_flow(from, p.linking);
  }
  out << "]}\n";
  collect_warnings(rest, counts);
  return counts;
}

ExportCounts export_jaeger(const std::filesystem::path& dir, std::ostream& out,
                           const StreamOptions& options) {
  ExportCounts counts;
  out << "{\"data\":[\n";
  ArrayWriter data(out);
  const auto add_traces = [&](const Run& part) {
    std::map<std::string, json> traces;  // trace id -> {traceID, spans, processes}
    for (const auto& f : part.files) {
      const std::string process = "p" + std::to_string(f.rank);
      const json process_json = {
          {"serviceName", f.service_name.empty() ? "unknown" : f.service_name},
          {"tags",
           json::array({{{"key", "dl.rank"}, {"type", "int64"}, {"value", f.rank}},
                        {{"key", "nemo.run.id"}, {"type", "string"}, {"value", f.run_id}}})}};
      for (const auto& s : f.spans) {
        json& trace = traces[s.trace_id];
        if (trace.is_null())
          trace = {
              {"traceID", s.trace_id}, {"spans", json::array()}, {"processes", json::object()}};
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
        for (const auto& [k, v] : s.attributes)
          tags.push_back({{"key", k}, {"type", "string"}, {"value", v}});
        trace["spans"].push_back({{"traceID", s.trace_id},
                                  {"spanID", s.span_id},
                                  {"operationName", s.name},
                                  {"references", refs},
                                  {"startTime", s.start_ns / 1000},
                                  {"duration", (s.end_ns - s.start_ns) / 1000},
                                  {"tags", tags},
                                  {"logs", json::array()},
                                  {"processID", process},
                                  {"warnings", nullptr},
                                  {"flags", 1}});
        ++counts.spans;
      }
    }
    for (auto& [id, t] : traces) {
      data.add(t);
      ++counts.traces;
    }
  };
  Run rest = stream_steps(
      dir, [&](StepWindow& w) { add_traces(w.run); }, options);
  add_traces(rest);
  out << "]}\n";
  collect_warnings(rest, counts);
  return counts;
}

}  // namespace lens::tools
