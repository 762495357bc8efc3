// `lens export`: a run's spans in the formats existing viewers load.
//
// - Perfetto / chrome://tracing: Chrome trace-event JSON, a process per rank
//   (a thread per lane row), complete events in microseconds, and a flow
//   (s/f pair) per link from the source's step span to the linked span.
// - Jaeger UI "JSON file" upload: {"data":[{traceID, spans, processes}]}, one
//   entry per trace, each span with its process and references: the parent
//   first (CHILD_OF), then its links (FOLLOWS_FROM), the order Jaeger's own
//   OTLP translator uses, so the UI nests and links spans the same way.
#pragma once

#include <string>

#include "run_reader.h"

namespace lens::tools {

std::string export_perfetto(const Run& run);
std::string export_jaeger(const Run& run);

}  // namespace lens::tools
