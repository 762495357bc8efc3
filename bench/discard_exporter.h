// An exporter that takes every batch and keeps nothing: what the benchmarks
// export to, so that a span's figure is its own, not an exporter's.
#pragma once

#include "lens/exporter.h"

namespace lens::bench {

class DiscardExporter : public SpanExporter {
 public:
  ExportResult export_spans(const Resource&, std::span<const SpanRecord* const>) override {
    return ExportResult::kSuccess;
  }
};

}  // namespace lens::bench
