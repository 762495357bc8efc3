#include "lens/file_exporter.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "json_lines_file.h"
#include "lens/error.h"
#include "lens/otlp_json.h"
#include "rate_limited_warning.h"

namespace lens {

namespace {

detail::RateLimitedWarning& write_warning() {
  static detail::RateLimitedWarning warning;
  return warning;
}

}  // namespace

OtlpJsonFileExporter::OtlpJsonFileExporter(const std::filesystem::path& path)
    : label_(path.string()) {
  std::error_code ec;
  if (path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) {
      throw ConfigError("trace directory '" + path.parent_path().string() +
                        "' cannot be created: " + ec.message() +
                        "; set LENS_TRACE_DIR to a writable directory");
    }
  }
  fd_ = detail::open_json_lines_file(path);
  if (fd_ < 0) {
    throw ConfigError("trace file '" + label_ + "' cannot be opened for writing: " +
                      std::strerror(errno) + "; set LENS_TRACE_DIR to a writable directory");
  }
}

OtlpJsonFileExporter::OtlpJsonFileExporter(int fd, std::string label, bool owns_fd)
    : fd_(fd), owns_fd_(owns_fd), label_(std::move(label)) {}

std::unique_ptr<OtlpJsonFileExporter> OtlpJsonFileExporter::for_descriptor(int fd,
                                                                           std::string label) {
  return std::unique_ptr<OtlpJsonFileExporter>(
      new OtlpJsonFileExporter(fd, std::move(label), false));
}

OtlpJsonFileExporter::~OtlpJsonFileExporter() {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

ExportResult OtlpJsonFileExporter::export_spans(const Resource& resource,
                                                std::span<const SpanRecord* const> spans) {
  if (fd_ < 0 || spans.empty()) return fd_ < 0 ? ExportResult::kFailure : ExportResult::kSuccess;
  line_.clear();
  append_otlp_json(line_, resource, spans);
  line_.push_back('\n');
  if (const int error = detail::append_json_line(fd_, line_); error != 0) {
    const std::uint64_t failed = failed_writes_.fetch_add(1) + 1;
    write_warning().warn("trace file '" + label_ + "': a batch of " + std::to_string(spans.size()) +
                         " spans could not be written (" + std::strerror(error) + "); " +
                         std::to_string(failed) + " batches lost so far, training goes on");
    return ExportResult::kFailure;
  }
  written_lines_.fetch_add(1);
  return ExportResult::kSuccess;
}

bool OtlpJsonFileExporter::force_flush(std::chrono::milliseconds) {
  // Lines go straight to the kernel; nothing is buffered here.
  return true;
}

void OtlpJsonFileExporter::shutdown(std::chrono::milliseconds) {
  if (owns_fd_ && fd_ >= 0) {
    ::fsync(fd_);
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace lens
