#include "viewer_export.h"

#include <map>
#include <nlohmann/json.hpp>

#include "pipeline_view.h"

namespace lens::tools {

using json = nlohmann::json;

std::string export_perfetto(const Run& run) {
  json events = json::array();
  std::map<std::string, const SpanRow*> by_id;
  for (const auto& f : run.files)
    for (const auto& s : f.spans) by_id[s.span_id] = &s;
  const char* row_names[kLaneRows] = {"step", "compute", "p2p", "linked"};
  for (const auto& f : run.files) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", f.rank}, {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(f.rank)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", f.rank}, {"tid", 0},
                      {"args", {{"sort_index", f.rank}}}});
    for (int row = 0; row < kLaneRows; ++row)
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", f.rank}, {"tid", row},
                        {"args", {{"name", row_names[row]}}}});
  }
  std::int64_t flow_id = 0;
  for (const auto& f : run.files) {
    for (const auto& s : f.spans) {
      const SpanKind k = kind_of(s);
      json args = s.attributes;
      args["trace_id"] = s.trace_id;
      args["span_id"] = s.span_id;
      events.push_back({{"ph", "X"}, {"name", s.name}, {"cat", kind_name(k)}, {"pid", s.rank},
                        {"tid", lane_row(k)}, {"ts", s.start_ns / 1000.0},
                        {"dur", (s.end_ns - s.start_ns) / 1000.0}, {"args", args}});
      for (const auto& [trace, span] : s.links) {
        auto it = by_id.find(span);
        if (it == by_id.end()) continue;  // a link out of the run has no start to draw from
        const SpanRow& target = *it->second;
        ++flow_id;
        events.push_back({{"ph", "s"}, {"name", "link"}, {"cat", "link"}, {"id", flow_id},
                          {"pid", target.rank}, {"tid", lane_row(kind_of(target))},
                          {"ts", target.start_ns / 1000.0}});
        events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "link"}, {"cat", "link"},
                          {"id", flow_id}, {"pid", s.rank}, {"tid", lane_row(k)},
                          {"ts", s.start_ns / 1000.0}});
      }
    }
  }
  return json({{"traceEvents", events}, {"displayTimeUnit", "ms"}}).dump() + "\n";
}

std::string export_jaeger(const Run& run) {
  std::map<std::string, json> traces;  // trace id -> {spans, processes}
  for (const auto& f : run.files) {
    const std::string process = "p" + std::to_string(f.rank);
    json process_json = {{"serviceName", f.service_name.empty() ? "unknown" : f.service_name},
                         {"tags", json::array({{{"key", "dl.rank"}, {"type", "int64"}, {"value", f.rank}},
                                               {{"key", "nemo.run.id"}, {"type", "string"}, {"value", f.run_id}}})}};
    for (const auto& s : f.spans) {
      json& trace = traces[s.trace_id];
      if (trace.is_null()) trace = {{"traceID", s.trace_id}, {"spans", json::array()}, {"processes", json::object()}};
      trace["processes"][process] = process_json;
      json refs = json::array();
      if (!s.parent_span_id.empty())
        refs.push_back({{"refType", "CHILD_OF"}, {"traceID", s.trace_id}, {"spanID", s.parent_span_id}});
      for (const auto& [lt, ls] : s.links)
        refs.push_back({{"refType", "FOLLOWS_FROM"}, {"traceID", lt}, {"spanID", ls}});
      json tags = json::array();
      for (const auto& [k, v] : s.attributes) tags.push_back({{"key", k}, {"type", "string"}, {"value", v}});
      trace["spans"].push_back({{"traceID", s.trace_id}, {"spanID", s.span_id},
                                {"operationName", s.name}, {"references", refs},
                                {"startTime", s.start_ns / 1000}, {"duration", (s.end_ns - s.start_ns) / 1000},
                                {"tags", tags}, {"logs", json::array()}, {"processID", process},
                                {"warnings", nullptr}, {"flags", 1}});
    }
  }
  json data = json::array();
  for (auto& [id, t] : traces) data.push_back(std::move(t));
  return json({{"data", data}}).dump() + "\n";
}

}  // namespace lens::tools
