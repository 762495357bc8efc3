// Traces one span with an installed lens and prints what it recorded.
#include <cstdio>

#include "lens/memory_exporter.h"
#include "lens/telemetry.h"
#include "lens/version.h"

int main() {
  auto exporter = std::make_shared<lens::InMemoryExporter>();
  lens::TelemetryOptions options;
  options.enabled = true;
  options.exporter_instance = exporter;
  auto telemetry = lens::Telemetry::create(options);
  telemetry->tracer().start_span(lens::SpanGroup::kJob, "consumer.span").end();
  telemetry->flush(std::chrono::seconds(5));
  const auto spans = exporter->spans();
  if (spans.size() != 1 || spans[0].name != "consumer.span") return 1;
  std::printf("lens %s: traced %s in trace %s\n", lens::kVersion, spans[0].name.c_str(),
              spans[0].context.trace_id.to_hex().c_str());
  return 0;
}
