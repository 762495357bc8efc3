#include "upload.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

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
          throw std::runtime_error(
              "a span's traceId/spanId is not lowercase hex of the right length");
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
        if (e.is_regular_file() && e.path().string().ends_with(".otlp.jsonl"))
          files.push_back(e.path());
    } else if (std::filesystem::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      throw std::runtime_error(p.string() + ": no such file or directory");
    }
  }
  std::sort(files.begin(), files.end());
  report.files = files.size();

  // Reads every valid line in order: on_line(request, spans). Malformed lines
  // go to the report, once each.
  std::set<std::pair<std::size_t, std::size_t>> reported;  // (file, line)
  const auto each_valid_line = [&](const std::function<void(json&, std::size_t)>& on_line) {
    for (std::size_t fi = 0; fi < files.size(); ++fi) {
      std::ifstream in(files[fi], std::ios::binary);
      if (!in) throw std::runtime_error(files[fi].string() + ": cannot open");
      std::string line;
      std::size_t number = 0;
      while (std::getline(in, line)) {
        ++number;
        if (line.empty()) continue;
        json req;
        std::size_t spans = 0;
        try {
          req = json::parse(line);
          spans = validate(req);
        } catch (const std::exception& e) {
          if (reported.insert({fi, number}).second)
            report.problems.push_back(files[fi].string() + ":" + std::to_string(number) +
                                      ": skipped, not an OTLP/JSON request: " + e.what());
          continue;
        }
        on_line(req, spans);
      }
    }
  };

  // First pass: validate, and count the batches so that progress knows the
  // total. Nothing is kept, so the files need not fit in memory.
  std::size_t batches = 0, in_batch = 0;
  each_valid_line([&](json&, std::size_t spans) {
    ++report.lines;
    if (in_batch > 0 && in_batch + spans > max_spans_per_batch) {  // as the sending pass does
      ++batches;
      in_batch = 0;
    }
    in_batch += spans;
  });
  if (in_batch > 0) ++batches;
  report.batches = batches;

  // Second pass: the same batches, each sent as soon as it is full.
  OtlpHttpOptions o = options;
  o.json = true;  // the lines are OTLP/JSON already
  Batch batch;
  std::size_t sent = 0;
  const auto send = [&] {
    if (batch.spans == 0) return;
    const std::string body = json({{"resourceSpans", std::move(batch.resource_spans)}}).dump();
    const OtlpSendResult r = send_otlp_request(o, body);
    ++sent;
    if (r.delivered) {
      report.spans_sent += batch.spans;
      report.spans_rejected += static_cast<std::size_t>(std::max<std::int64_t>(0, r.rejected));
    } else {
      report.spans_failed += batch.spans;
      report.problems.push_back("batch " + std::to_string(sent) + " (" +
                                std::to_string(batch.spans) + " spans) failed: " + r.error);
    }
    batch = Batch{};
    if (progress) progress(sent, std::max(sent, batches));
  };
  each_valid_line([&](json& req, std::size_t spans) {
    if (batch.spans > 0 && batch.spans + spans > max_spans_per_batch) send();
    for (auto& rs : req["resourceSpans"]) batch.resource_spans.push_back(std::move(rs));
    batch.spans += spans;
  });
  send();
  report.batches = std::max(batches, sent);
  return report;
}

}  // namespace lens::tools
