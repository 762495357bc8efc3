#include "lens/memory_exporter.h"

namespace lens {

ExportResult InMemoryExporter::export_spans(const Resource& resource,
                                            std::span<const SpanRecord* const> spans) {
  std::lock_guard<std::mutex> lock(mu_);
  ++export_calls_;
  if (fail_) return ExportResult::kFailure;
  resource_ = resource;
  for (const SpanRecord* s : spans) spans_.push_back(*s);
  return ExportResult::kSuccess;
}

std::vector<SpanRecord> InMemoryExporter::spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_;
}

Resource InMemoryExporter::resource() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_;
}

std::size_t InMemoryExporter::export_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return export_calls_;
}

void InMemoryExporter::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  spans_.clear();
}

void InMemoryExporter::set_fail(bool fail) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_ = fail;
}

}  // namespace lens
