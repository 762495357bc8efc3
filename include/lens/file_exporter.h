/// \file
/// OtlpJsonFileExporter: writes OTLP-JSON-lines files.
///
/// Each export call appends ONE line: an ExportTraceServiceRequest in the
/// OTLP/JSON encoding (see otlp_json.h). This is the format the OpenTelemetry
/// Collector's otlpjsonfile receiver reads, so a run's files can be replayed
/// to any backend later. A line is written with as few write(2) calls as the
/// kernel allows, so a reader never sees interleaved batches; a crash can at
/// worst leave the last line incomplete.
///
/// The constructor creates the directory and opens the file, throwing
/// ConfigError if either fails, so an unwritable trace directory is a start-up
/// error. Write failures later (a full disk, a file size limit) fail that
/// export, which the processor counts, with a rate-limited warning on
/// stderr; they never throw. A line that could be written only in part is
/// cut off again (the file is truncated back to where the line began), so
/// the file holds whole lines only and later lines, once there is space
/// again, stay readable. Reopening a file whose last line was torn (a killed
/// rank, a requeued job appending with the same run id) first ends that line,
/// so new lines never continue it.
///
/// Thread safety: export_spans is called by one thread at a time (the
/// processor's); written_lines() and failed_writes() may be read from any
/// thread.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include "lens/exporter.h"

namespace lens {

class OtlpJsonFileExporter : public SpanExporter {
 public:
  /// Appends to `path`, creating its parent directories.
  explicit OtlpJsonFileExporter(const std::filesystem::path& path);
  /// Writes to an already open descriptor (e.g. 1 for the console exporter);
  /// the descriptor is not closed.
  static std::unique_ptr<OtlpJsonFileExporter> for_descriptor(int fd, std::string label);
  ~OtlpJsonFileExporter() override;

  ExportResult export_spans(const Resource& resource,
                            std::span<const SpanRecord* const> spans) override;
  bool force_flush(std::chrono::milliseconds timeout) override;
  void shutdown(std::chrono::milliseconds timeout) override;

  const std::string& path() const { return label_; }
  std::uint64_t written_lines() const { return written_lines_.load(); }
  std::uint64_t failed_writes() const { return failed_writes_.load(); }

 private:
  OtlpJsonFileExporter(int fd, std::string label, bool owns_fd);

  int fd_ = -1;
  bool owns_fd_ = true;
  std::string label_;
  std::string line_;  ///< reused buffer
  std::atomic<std::uint64_t> written_lines_{0};
  std::atomic<std::uint64_t> failed_writes_{0};
};

}  // namespace lens
