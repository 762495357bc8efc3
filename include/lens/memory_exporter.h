/// \file
/// InMemoryExporter: keeps copies of exported spans, for tests and tools.
///
/// Thread safety: all methods may be called from any thread.
#pragma once

#include <mutex>
#include <vector>

#include "lens/exporter.h"

namespace lens {

class InMemoryExporter : public SpanExporter {
 public:
  ExportResult export_spans(const Resource& resource,
                            std::span<const SpanRecord* const> spans) override;

  /// Copies of every span exported so far, in export order. The records'
  /// scope pointers stay valid while the Telemetry that made them lives.
  std::vector<SpanRecord> spans() const;
  /// The resource of the last export.
  Resource resource() const;
  std::size_t export_calls() const;
  void clear();

  /// Makes later export calls fail (to test failure accounting).
  void set_fail(bool fail);

 private:
  mutable std::mutex mu_;
  std::vector<SpanRecord> spans_;
  Resource resource_;
  std::size_t export_calls_ = 0;
  bool fail_ = false;
};

}  // namespace lens
