// lens upload DIR|FILE... [--endpoint URL]: send OTLP files to an OTLP/HTTP
// endpoint.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "lens/config.h"
#include "lens/error.h"
#include "run_import.h"
#include "upload.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct UploadCommandOptions {
  std::vector<std::string> paths;
  std::string endpoint;
  std::size_t batch_spans = 2048;
  int max_attempts = 6;
};

int run_upload(const UploadCommandOptions& c) {
  lens::OtlpHttpOptions options;
  try {
    options = lens::resolve_config({}, lens::process_environment()).otlp;
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "lens: %s\n", e.what());
    return kBadInput;
  }
  if (!c.endpoint.empty()) {
    if (!(c.endpoint.starts_with("http://") || c.endpoint.starts_with("https://"))) {
      std::fprintf(stderr,
                   "lens: --endpoint '%s' is not valid; accepted: an http:// or https:// URL\n",
                   lens::redacted_url(c.endpoint).c_str());
      return kBadInput;
    }
    options.endpoint = c.endpoint;
  }
  options.max_attempts = c.max_attempts;
  std::vector<std::filesystem::path> paths(c.paths.begin(), c.paths.end());
  const bool tty = isatty(STDERR_FILENO);
  UploadReport report;
  try {
    report = upload(paths, options, c.batch_spans, [&](std::size_t done, std::size_t total) {
      if (!tty) return;
      const int width = 30;
      const int filled = static_cast<int>(width * done / std::max<std::size_t>(total, 1));
      std::fprintf(stderr, "\r[%s%s] %zu/%zu batches", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), done, total);
      if (done == total) std::fprintf(stderr, "\n");
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lens: %s\n", name_imports(e.what()).c_str());
    return kBadInput;
  }
  print_warnings(report.warnings);
  for (const auto& p : report.problems) std::fprintf(stderr, "lens: %s\n", name_imports(p).c_str());
  std::printf(
      "uploaded to %s: %zu spans sent (%zu rejected by the receiver), %zu failed; "
      "%zu files, %zu lines, %zu batches\n",
      lens::redacted_url(options.endpoint).c_str(), report.spans_sent, report.spans_rejected,
      report.spans_failed, report.files, report.lines, report.batches);
  return report.problems.empty() ? kOk : kViolations;
}

}  // namespace

Command add_upload(CLI::App& lens) {
  auto o = std::make_shared<UploadCommandOptions>();
  auto* up = lens.add_subcommand(
      "upload", "send OTLP files (lens's, a collector's, Jaeger's, ...) to an OTLP/HTTP endpoint");
  up->add_option("PATHS", o->paths, "run directories, spool directories or files")->required();
  up->add_option("--endpoint", o->endpoint,
                 "traces URL (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else "
                 "OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, else http://localhost:4318/v1/traces)");
  up->add_option("--batch-spans", o->batch_spans, "spans per request")
      ->check(CLI::Range(1, 1 << 20));
  up->add_option("--max-attempts", o->max_attempts, "attempts per batch (retryable failures only)")
      ->check(CLI::Range(1, 100));
  return {up, [o] { return run_upload(*o); }};
}

}  // namespace lens::tools::cli
