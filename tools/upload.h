// `lens upload`: sends OTLP-JSON-lines files (the file exporter's output, or
// an exporter's spool), or traces in any layout the readers import (a
// collector's files, protobuf, zstd, Jaeger, Tempo, the SDK's console
// output: sent as imported, lens ranks only) to an OTLP/HTTP endpoint, in
// batches, with the exporter's retry rules. Each line is validated first; a malformed line is
// reported with its file and line and skipped, and the valid lines still go.
// The files are read twice (validation and counting, then sending), holding
// one batch at a time.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lens/otlp_http_exporter.h"

namespace lens::tools {

struct UploadReport {
  std::size_t files = 0, lines = 0, batches = 0;
  std::size_t spans_sent = 0, spans_rejected = 0, spans_failed = 0;
  std::vector<std::string> problems;  // malformed lines and failed batches, in words
  std::vector<std::string> warnings;  // what an import of another layout said
};

// Sends every *.otlp.jsonl file under the given paths (files or
// directories); a file of another layout, or a directory without such
// files, is imported (run_import.h) and its ranks' spans sent. `progress` gets (batches done, batches in all).
UploadReport upload(const std::vector<std::filesystem::path>& paths, const OtlpHttpOptions& options,
                    std::size_t max_spans_per_batch,
                    const std::function<void(std::size_t, std::size_t)>& progress = {});

}  // namespace lens::tools
