#include "upload.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace lens::tools {

using json = nlohmann::json;

namespace {

bool lower_hex(const json& v, std::size_t n) {
  if (!v.is_string()) return false;
  const auto& s = v.get_ref<const std::string&>();
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Checks the shape lens and collectors rely on; returns the span count.
std::size_t validate(const json& req) {
  std::size_t spans = 0;
  if (!req.is_object() || !req.contains("resourceSpans") || !req["resourceSpans"].is_array())
    throw std::runtime_error("no resourceSpans array");
  for (const auto& rs : req["resourceSpans"]) {
    if (!rs.contains("scopeSpans") || !rs["scopeSpans"].is_array())
      throw std::runtime_error("a resourceSpans entry has no scopeSpans array");
    for (const auto& ss : rs["scopeSpans"]) {
      if (!ss.contains("spans") || !ss["spans"].is_array())
        throw std::runtime_error("a scopeSpans entry has no spans array");
      for (const auto& s : ss["spans"]) {
        if (!lower_hex(s.value("traceId", json()), 32) || !lower_hex(s.value("spanId", json()), 16))
          throw std::runtime_error("a span's traceId/spanId is not lowercase hex of the right length");
        if (!s.contains("name") || !s["name"].is_string())
          throw std::runtime_error("a span has no name");
        ++spans;
      }
    }
  }
  return spans;
}

struct Batch {
  json resource_spans = json::array();
  std::size_t spans = 0;
};

}  // namespace

UploadReport upload(const std::vector<std::filesystem::path>& paths, const OtlpHttpOptions& options,
                    std::size_t max_spans_per_batch,
                    const std::function<void(std::size_t, std::size_t)>& progress) {
  UploadReport report;
  std::vector<std::filesystem::path> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().string().ends_with(".otlp.jsonl")) files.push_back(e.path());
    } else if (std::filesystem::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      throw std::runtime_error(p.string() + ": no such file or directory");
    }
  }
  std::sort(files.begin(), files.end());
  report.files = files.size();

  // Validate and batch everything first, so progress knows the total.
  std::vector<Batch> batches(1);
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw std::runtime_error(f.string() + ": cannot open");
    std::string line;
    std::size_t number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (line.empty()) continue;
      ++report.lines;
      try {
        json req = json::parse(line);
        const std::size_t spans = validate(req);
        if (batches.back().spans > 0 && batches.back().spans + spans > max_spans_per_batch)
          batches.emplace_back();
        for (auto& rs : req["resourceSpans"]) batches.back().resource_spans.push_back(std::move(rs));
        batches.back().spans += spans;
      } catch (const std::exception& e) {
        report.problems.push_back(f.string() + ":" + std::to_string(number) +
                                  ": skipped, not an OTLP/JSON request: " + e.what());
      }
    }
  }
  if (batches.back().spans == 0) batches.pop_back();
  report.batches = batches.size();

  OtlpHttpOptions o = options;
  o.json = true;  // the lines are OTLP/JSON already
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const std::string body = json({{"resourceSpans", batches[i].resource_spans}}).dump();
    const OtlpSendResult r = send_otlp_request(o, body);
    if (r.delivered) {
      report.spans_sent += batches[i].spans;
      report.spans_rejected += static_cast<std::size_t>(std::max<std::int64_t>(0, r.rejected));
    } else {
      report.spans_failed += batches[i].spans;
      report.problems.push_back("batch " + std::to_string(i + 1) + " (" +
                                std::to_string(batches[i].spans) + " spans) failed: " + r.error);
    }
    if (progress) progress(i + 1, batches.size());
  }
  return report;
}

}  // namespace lens::tools
