#include "upload.h"

#include "opened_run.h"
#include "run_import.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "json_depth.h"
#include "line_reader.h"

namespace lens::tools {

using namespace lens::analysis;  // the readers this command is a front of

using json = nlohmann::json;

namespace {

// A hex id of n digits in either case; made lowercase in place, the form
// OTLP/JSON receivers expect.
bool hex_id(json& v, std::size_t n) {
  if (!v.is_string()) return false;
  auto& s = v.get_ref<std::string&>();
  if (s.size() != n) return false;
  for (char& c : s) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// An array member that proto3 JSON may leave out when empty; nullptr then.
json* array_member(json& object, const char* key, const char* where) {
  if (!object.is_object()) throw std::runtime_error(std::string(where) + " is not an object");
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  if (!it->is_array())
    throw std::runtime_error(std::string(where) + "'s " + key + " is not an array");
  return &*it;
}

// Checks the shape lens and collectors rely on (ids made lowercase on the
// way); returns the span count. Empty arrays and an empty name may be left
// out, as proto3 JSON does.
std::size_t validate(json& req) {
  std::size_t spans = 0;
  json* resource_spans = array_member(req, "resourceSpans", "the request");
  if (resource_spans == nullptr) return 0;
  for (auto& rs : *resource_spans) {
    json* scope_spans = array_member(rs, "scopeSpans", "a resourceSpans entry");
    if (scope_spans == nullptr) continue;
    for (auto& ss : *scope_spans) {
      json* list = array_member(ss, "spans", "a scopeSpans entry");
      if (list == nullptr) continue;
      for (auto& s : *list) {
        if (!s.is_object() || !s.contains("traceId") || !s.contains("spanId") ||
            !hex_id(s["traceId"], 32) || !hex_id(s["spanId"], 16))
          throw std::runtime_error("a span's traceId/spanId is not hex of the right length");
        if (s.contains("parentSpanId") &&
            !(s["parentSpanId"] == "" || hex_id(s["parentSpanId"], 16)))
          throw std::runtime_error("a span's parentSpanId is not hex of the right length");
        if (s.contains("name") && !s["name"].is_string())
          throw std::runtime_error("a span's name is not a string");
        if (json* links = array_member(s, "links", "a span"))
          for (auto& l : *links)
            if (!l.is_object() || !l.contains("traceId") || !l.contains("spanId") ||
                !hex_id(l["traceId"], 32) || !hex_id(l["spanId"], 16))
              throw std::runtime_error("a link's traceId/spanId is not hex of the right length");
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
  // Traces in another layout (a collector's files, protobuf, zstd, Jaeger,
  // Tempo, the SDK's console output): their import's rank files, kept
  // until the upload is done.
  std::vector<analysis::OpenedRun> opened;
  const auto imported = [&](const std::filesystem::path& p) {
    const analysis::OpenedRun& run = opened.emplace_back(p);
    report.warnings.insert(report.warnings.end(), run.import_warnings().begin(),
                           run.import_warnings().end());
    files.insert(files.end(), run.files().begin(), run.files().end());
  };
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      const std::size_t before = files.size();
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().string().ends_with(".otlp.jsonl"))
          files.push_back(e.path());
      if (files.size() == before) imported(p);
    } else if (std::filesystem::is_regular_file(p, ec)) {
      if (p.string().ends_with(".otlp.jsonl"))
        files.push_back(p);
      else
        imported(p);
    } else {
      throw std::runtime_error(p.string() + ": no such file or directory");
    }
  }
  // A file named twice (a run directory and a file in it, or a path and its
  // parent) is sent once.
  for (auto& f : files) {
    std::error_code ec;
    auto canonical = std::filesystem::weakly_canonical(f, ec);
    if (!ec) f = canonical;
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  report.files = files.size();

  // Reads every valid line in order: on_line(request, spans). Malformed lines
  // go to the report, once each.
  std::set<std::pair<std::size_t, std::size_t>> reported;  // (file, line)
  const auto each_valid_line = [&](const std::function<void(json&, std::size_t)>& on_line) {
    for (std::size_t fi = 0; fi < files.size(); ++fi) {
      std::ifstream in(files[fi], std::ios::binary);
      if (!in) throw std::runtime_error(files[fi].string() + ": cannot open");
      LineReader lines(in);
      std::string line;
      std::size_t number = 0;
      for (;;) {
        const LineReader::Status status = lines.next(line);
        if (status == LineReader::Status::kEnd) break;
        ++number;
        if (status == LineReader::Status::kTooLong) {
          if (reported.insert({fi, number}).second)
            report.problems.push_back(files[fi].string() + ":" + std::to_string(number) +
                                      ": the line is longer than " +
                                      std::to_string(kMaxLineBytes >> 20) +
                                      " MiB (the reader's limit); the rest of the file is skipped");
          break;
        }
        if (line.empty()) continue;
        json req;
        std::size_t spans = 0;
        try {
          // Refused before parsing: printing a deeper value would recurse
          // once per level.
          if (!json_depth_within(line))
            throw std::runtime_error("nested deeper than " + std::to_string(kMaxJsonDepth) +
                                     " levels (the reader's limit)");
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
    const std::string body = json({{"resourceSpans", std::move(batch.resource_spans)}})
                                 .dump(-1, ' ', false, json::error_handler_t::replace);
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
    if (spans == 0) return;
    for (auto& rs : req["resourceSpans"]) batch.resource_spans.push_back(std::move(rs));
    batch.spans += spans;
  });
  send();
  report.batches = std::max(batches, sent);
  return report;
}

}  // namespace lens::tools
