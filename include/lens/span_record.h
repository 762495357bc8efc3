/// \file
/// SpanRecord: everything a finished span carries to the exporters.
///
/// Exporters receive const SpanRecord pointers for the duration of one export
/// call; they copy what they need to keep. Times are nanoseconds since the Unix
/// epoch, taken from the system clock at process level and advanced with the
/// monotonic clock within a span, so durations never go backwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lens/attribute.h"
#include "lens/span_context.h"
#include "lens/span_groups.h"

namespace lens {

/// Values as in OTLP's Span.SpanKind.
enum class SpanKind : std::uint8_t {
  kInternal = 1,
  kServer = 2,
  kClient = 3,
  kProducer = 4,
  kConsumer = 5,
};

/// Values as in OTLP's Status.StatusCode.
enum class StatusCode : std::uint8_t { kUnset = 0, kOk = 1, kError = 2 };

/// The instrumentation scope (OTel "tracer name") a span was created through.
struct InstrumentationScope {
  std::string name;
  std::string version;
};

struct SpanEvent {
  std::string name;
  std::int64_t time_unix_ns = 0;
  Attributes attributes;
  std::uint32_t dropped_attributes_count = 0;

  friend bool operator==(const SpanEvent&, const SpanEvent&) = default;
};

struct SpanLink {
  SpanContext context;
  Attributes attributes;
  std::uint32_t dropped_attributes_count = 0;

  friend bool operator==(const SpanLink&, const SpanLink&) = default;
};

struct SpanRecord {
  SpanContext context;
  SpanId parent_span_id;  ///< invalid (zero) for a root span
  bool parent_remote = false;
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  SpanGroup group = SpanGroup::kJob;
  std::int64_t start_time_unix_ns = 0;
  std::int64_t end_time_unix_ns = 0;
  Attributes attributes;
  std::uint32_t dropped_attributes_count = 0;
  std::vector<SpanEvent> events;
  std::uint32_t dropped_events_count = 0;
  std::vector<SpanLink> links;
  std::uint32_t dropped_links_count = 0;
  StatusCode status_code = StatusCode::kUnset;
  std::string status_message;
  const InstrumentationScope* scope = nullptr;  ///< owned by the Telemetry

  bool has_parent() const { return parent_span_id.valid(); }
};

/// Limits on what one span keeps; past them, items are dropped and counted in
/// the record's dropped_*_count fields. Defaults are OpenTelemetry's.
struct SpanLimits {
  std::uint32_t attribute_count = 128;
  std::uint32_t event_count = 128;
  std::uint32_t link_count = 128;
  std::uint32_t attribute_per_event_count = 128;
  std::uint32_t attribute_per_link_count = 128;
};

}  // namespace lens
