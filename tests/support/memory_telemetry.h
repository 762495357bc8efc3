// Telemetry wired to an InMemoryExporter, for tests.
#pragma once

#include <memory>

#include "lens/memory_exporter.h"
#include "lens/telemetry.h"
#include "test_env.h"

namespace lens::testing {

struct MemoryTelemetry {
  std::shared_ptr<InMemoryExporter> exporter = std::make_shared<InMemoryExporter>();
  std::unique_ptr<Telemetry> telemetry;

  explicit MemoryTelemetry(TelemetryOptions options = {},
                           std::map<std::string, std::string> env = {}) {
    options.enabled = true;
    if (!options.span_groups) options.span_groups = "all";
    if (!options.run_id) options.run_id = "test-run";
    options.exporter_instance = exporter;
    telemetry = Telemetry::create(options, fake_env(std::move(env)));
  }

  // Flushes and returns everything exported so far.
  std::vector<SpanRecord> spans() {
    telemetry->flush(std::chrono::seconds(10));
    return exporter->spans();
  }
};

}  // namespace lens::testing
