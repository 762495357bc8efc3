#include "trace_files.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace lens::testing {

using json = nlohmann::json;

std::int64_t ExportedSpan::int_attr(const std::string& key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? -1 : std::stoll(it->second);
}

namespace {

std::string scalar_text(const json& v) {
  if (v.contains("stringValue")) return v["stringValue"].get<std::string>();
  if (v.contains("intValue")) return v["intValue"].get<std::string>();
  if (v.contains("boolValue")) return v["boolValue"].get<bool>() ? "true" : "false";
  if (v.contains("doubleValue")) return v["doubleValue"].dump();
  return v.dump();
}

}  // namespace

std::vector<ExportedSpan> read_run(const std::filesystem::path& dir) {
  std::vector<ExportedSpan> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (!entry.is_regular_file() || !path.ends_with(".otlp.jsonl")) continue;
    std::ifstream in(entry.path());
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      json req;
      try {
        req = json::parse(line);
        for (const auto& rs : req.at("resourceSpans")) {
          std::map<std::string, std::string> resource;
          for (const auto& kv : rs.at("resource").at("attributes"))
            resource[kv.at("key")] = scalar_text(kv.at("value"));
          for (const auto& ss : rs.at("scopeSpans")) {
            for (const auto& s : ss.at("spans")) {
              ExportedSpan e;
              e.file = path;
              e.resource = resource;
              e.trace_id = s.at("traceId");
              e.span_id = s.at("spanId");
              e.parent_span_id = s.value("parentSpanId", "");
              e.name = s.at("name");
              e.start_ns = std::stoll(s.at("startTimeUnixNano").get<std::string>());
              e.end_ns = std::stoll(s.at("endTimeUnixNano").get<std::string>());
              for (const auto& kv : s.at("attributes"))
                e.attributes[kv.at("key")] = scalar_text(kv.at("value"));
              for (const auto& l : s.at("links")) e.links.emplace_back(l.at("traceId"), l.at("spanId"));
              out.push_back(std::move(e));
            }
          }
        }
      } catch (const std::exception& ex) {
        throw std::runtime_error(path + ":" + std::to_string(number) + ": " + ex.what());
      }
    }
  }
  return out;
}

std::vector<std::string> check_correlation(const std::vector<ExportedSpan>& spans,
                                           const CorrelationExpectation& expect) {
  std::vector<std::string> problems;
  auto complain = [&](const std::string& p) {
    if (problems.size() < 50) problems.push_back(p);
  };
  // (step, rank) -> step span
  std::map<std::pair<std::int64_t, std::int64_t>, const ExportedSpan*> step_spans;
  std::map<std::string, const ExportedSpan*> by_id;
  for (const auto& s : spans) by_id[s.span_id] = &s;
  for (const auto& s : spans) {
    if (s.name != "megatron.train_step") continue;
    auto key = std::make_pair(s.int_attr("dl.step"), s.int_attr("dl.rank"));
    if (step_spans.count(key)) complain("two step spans for step " + std::to_string(key.first) +
                                        " on rank " + std::to_string(key.second));
    step_spans[key] = &s;
  }
  for (int step = 0; step < expect.steps; ++step) {
    const ExportedSpan* root = step_spans.count({step, 0}) ? step_spans[{step, 0}] : nullptr;
    if (!root) {
      complain("step " + std::to_string(step) + ": rank 0 has no megatron.train_step span");
      continue;
    }
    for (int rank = 0; rank < expect.ranks; ++rank) {
      auto it = step_spans.find({step, rank});
      const std::string where = "step " + std::to_string(step) + " rank " + std::to_string(rank);
      if (it == step_spans.end()) {
        complain(where + ": no megatron.train_step span");
        continue;
      }
      const ExportedSpan& mine = *it->second;
      if (mine.trace_id != root->trace_id)
        complain(where + ": trace id " + mine.trace_id + " differs from rank 0's " + root->trace_id);
      if (!mine.parent_span_id.empty()) complain(where + ": step span has a parent");
      const int stage = static_cast<int>(mine.int_attr("dl.pipeline_parallel.rank"));
      int linked = 0;
      for (const auto& s : spans) {
        if (s.name != "megatron.pp.recv_forward.linked" || s.parent_span_id != mine.span_id)
          continue;
        ++linked;
        if (s.trace_id != root->trace_id) complain(where + ": linked span in another trace");
        if (s.links.size() != 1) {
          complain(where + ": linked span has " + std::to_string(s.links.size()) + " links");
          continue;
        }
        if (s.links[0].first != root->trace_id || s.links[0].second != root->span_id)
          complain(where + ": link does not point at rank 0's step span");
        if (s.int_attr("dl.pipeline_parallel.rank") != stage)
          complain(where + ": linked span has the wrong dl.pipeline_parallel.rank");
        if (s.int_attr("dl.microbatch_id") < 0) complain(where + ": linked span has no dl.microbatch_id");
      }
      const int expected = expect.linked_per_step(stage);
      if (linked != expected)
        complain(where + " (stage " + std::to_string(stage) + "): " + std::to_string(linked) +
                 " linked spans, expected " + std::to_string(expected));
    }
  }
  // Every link anywhere must resolve to a span of the run.
  for (const auto& s : spans)
    for (const auto& l : s.links)
      if (!by_id.count(l.second)) complain(s.name + " on " + s.file + ": link to a missing span");
  return problems;
}

}  // namespace lens::testing
