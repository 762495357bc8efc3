// `lens export`: a run's spans in the formats existing viewers load.
//
// - Perfetto / chrome://tracing: Chrome trace-event JSON, a process per rank
//   (a thread per lane row), complete events in microseconds, and a flow
//   (s/f pair) per link from the source's step span to the linked span.
// - Jaeger UI "JSON file" upload: {"data":[{traceID, spans, processes}]}, one
//   entry per trace, each span with its process and references: the parent
//   first (CHILD_OF), then its links (FOLLOWS_FROM), the order Jaeger's own
//   OTLP translator uses, so the UI nests and links spans the same way.
//
// Both read the run a step at a time (step_stream.h) and write as they go,
// so memory follows one step, not the run. A trace appears once per step;
// a span that ended after its step span was written is written with the
// spans in no step, in a second entry of its trace.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "step_stream.h"

namespace lens::tools {

struct ExportCounts {
  std::size_t spans = 0, links = 0, traces = 0;
  std::vector<std::string> warnings;  // the reader's
};

ExportCounts export_perfetto(const std::filesystem::path& dir, std::ostream& out,
                             const StreamOptions& options = {});
ExportCounts export_jaeger(const std::filesystem::path& dir, std::ostream& out,
                           const StreamOptions& options = {});

}  // namespace lens::tools
