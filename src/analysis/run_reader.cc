#include "run_reader.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace lens::tools {

using json = nlohmann::json;

std::int64_t SpanRow::int_attr(const std::string& key, std::int64_t fallback) const {
  auto it = attributes.find(key);
  if (it == attributes.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return fallback;
  }
}

RankFile RankFile::without_spans() const {
  RankFile m;
  m.path = path;
  m.rank = rank;
  m.world_size = world_size;
  m.run_id = run_id;
  m.service_name = service_name;
  m.trace_scope = trace_scope;
  m.export_filter = export_filter;
  m.replica = replica;
  m.lines = lines;
  m.warnings = warnings;
  return m;
}

std::size_t Run::span_count() const {
  std::size_t n = 0;
  for (const auto& f : files) n += f.spans.size();
  return n;
}

int Run::declared_world_size() const {
  int w = -1;
  for (const auto& f : files) w = std::max(w, f.world_size);
  return w;
}

namespace {

std::string scalar_text(const json& v) {
  if (!v.is_object()) throw std::runtime_error("attribute value is not an object");
  if (v.contains("stringValue")) return v.at("stringValue").get<std::string>();
  if (v.contains("intValue")) {
    const json& i = v.at("intValue");
    return i.is_string() ? i.get<std::string>() : std::to_string(i.get<std::int64_t>());
  }
  if (v.contains("boolValue")) return v.at("boolValue").get<bool>() ? "true" : "false";
  if (v.contains("doubleValue")) {
    const json& d = v.at("doubleValue");
    return d.is_string() ? d.get<std::string>() : std::to_string(d.get<double>());
  }
  return v.dump();
}

std::int64_t nanos(const json& v) {
  // OTLP/JSON: 64-bit integers are decimal strings; numbers are accepted too.
  if (v.is_string()) return std::stoll(v.get<std::string>());
  return v.get<std::int64_t>();
}

bool lower_hex(const std::string& s, std::size_t n) {
  if (s.size() != n) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

void read_line(RankFile& file, const std::string& line) {
  json req = json::parse(line);
  for (const auto& rs : req.at("resourceSpans")) {
    std::map<std::string, std::string> resource;
    if (rs.contains("resource") && rs.at("resource").contains("attributes"))
      for (const auto& kv : rs.at("resource").at("attributes"))
        resource[kv.at("key").get<std::string>()] = scalar_text(kv.at("value"));
    int rank = -1;
    if (resource.count("dl.rank")) rank = std::stoi(resource["dl.rank"]);
    if (rank >= 0) file.rank = rank;
    if (resource.count("dl.world_size")) file.world_size = std::stoi(resource["dl.world_size"]);
    if (resource.count("nemo.run.id")) file.run_id = resource["nemo.run.id"];
    if (resource.count("service.name")) file.service_name = resource["service.name"];
    if (resource.count("lens.trace_scope")) file.trace_scope = resource["lens.trace_scope"];
    if (resource.count("lens.export_filter")) file.export_filter = resource["lens.export_filter"];
    if (resource.count("dl.data_parallel.rank"))
      file.replica = std::stoi(resource["dl.data_parallel.rank"]);
    for (const auto& ss : rs.at("scopeSpans")) {
      for (const auto& s : ss.at("spans")) {
        SpanRow row;
        row.rank = rank;
        row.trace_id = s.at("traceId").get<std::string>();
        row.span_id = s.at("spanId").get<std::string>();
        if (!lower_hex(row.trace_id, 32) || !lower_hex(row.span_id, 16))
          throw std::runtime_error("traceId/spanId is not lowercase hex of the right length");
        row.parent_span_id = s.value("parentSpanId", "");
        row.name = s.at("name").get<std::string>();
        row.start_ns = nanos(s.at("startTimeUnixNano"));
        row.end_ns = nanos(s.at("endTimeUnixNano"));
        if (s.contains("attributes"))
          for (const auto& kv : s.at("attributes"))
            row.attributes[kv.at("key").get<std::string>()] = scalar_text(kv.at("value"));
        if (s.contains("links"))
          for (const auto& l : s.at("links"))
            row.links.emplace_back(l.at("traceId").get<std::string>(),
                                   l.at("spanId").get<std::string>());
        file.spans.push_back(std::move(row));
      }
    }
  }
}

}  // namespace

RankFileReader::RankFileReader(const std::filesystem::path& path) : in_(path, std::ios::binary) {
  file_.path = path;
  if (!in_) throw ReadError(path.string() + ": cannot open");
}

bool RankFileReader::next_line() {
  std::string line;
  while (!done_) {
    if (!std::getline(in_, line)) {
      done_ = true;
      break;
    }
    ++number_;
    const bool terminated = !in_.eof();
    bytes_ += line.size() + (terminated ? 1 : 0);
    if (line.empty()) continue;
    try {
      read_line(file_, line);
      ++file_.lines;
      return true;
    } catch (const std::exception& e) {
      if (!terminated) {
        file_.warnings.push_back(file_.path.string() + ":" + std::to_string(number_) +
                                 ": skipped an incomplete last line (the process stopped while "
                                 "writing it)");
        done_ = true;
        break;
      }
      throw ReadError(file_.path.string() + ":" + std::to_string(number_) +
                      ": not an OTLP/JSON request: " + e.what());
    }
  }
  return false;
}

std::vector<std::filesystem::path> run_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> paths;
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir, ec)) {
    paths.push_back(dir);
  } else if (std::filesystem::is_directory(dir, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.is_regular_file() && e.path().string().ends_with(".otlp.jsonl"))
        paths.push_back(e.path());
  } else {
    throw ReadError(dir.string() + ": no such file or directory");
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw ReadError(dir.string() + ": no *.otlp.jsonl files");
  return paths;
}

Run read_run(const std::filesystem::path& dir,
             const std::function<void(std::size_t, std::size_t)>& progress) {
  Run run;
  run.dir = dir;
  const auto paths = run_files(dir);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    RankFileReader reader(paths[i]);
    while (reader.next_line()) {
    }
    run.files.push_back(reader.take());
    if (progress) progress(i + 1, paths.size());
  }
  std::sort(run.files.begin(), run.files.end(),
            [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  return run;
}

}  // namespace lens::tools
