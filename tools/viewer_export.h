// `lens export`: a run's spans in the formats existing viewers load.
//
// - Perfetto / chrome://tracing: Chrome trace-event JSON, a process per rank
//   (a thread per lane row), complete events in microseconds from the run's
//   first span (otherData.lens.time_origin_unix_ns says when that was), and
//   a flow (s/f pair) per link from the source's step span to the linked
//   span, each end at the start of the slice it binds to.
// - Jaeger UI "JSON file" upload: {"data":[{traceID, spans, processes}]}, one
//   entry per trace, each span with its process and references: the parent
//   first (CHILD_OF), then its links (FOLLOWS_FROM), the order Jaeger's own
//   OTLP translator uses, so the UI nests and links spans the same way; kind
//   and status as that translator's span.kind, otel.status_code and error
//   tags; start and duration in whole microseconds, rounded once.
//
// Both read the run a step at a time (step_stream.h), so memory follows one
// step, not the run. The Perfetto export writes as it goes (after a quick
// scan for the run's first start); the Jaeger export writes each trace as
// one entry, also when some of its spans ended after its step span.
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

ExportCounts export_perfetto(const analysis::OpenedRun& run, std::ostream& out,
                             const analysis::StreamOptions& options = {});
struct JaegerOptions {
  /// Each rank's process keeps the plain service name instead of
  /// "<service> r<rank> s<stage>".
  bool plain_service_name = false;
};

/// One process per rank with every resource attribute as a typed tag, span
/// tags with their types, links as FOLLOWS_FROM references.
ExportCounts export_jaeger(const analysis::OpenedRun& run, std::ostream& out,
                           const analysis::StreamOptions& options = {},
                           const JaegerOptions& jaeger = {});

}  // namespace lens::tools
