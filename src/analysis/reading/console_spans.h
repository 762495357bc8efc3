// The OpenTelemetry Python SDK's console exporter format: one span a JSON
// object, as ReadableSpan.to_json writes it ("context" with "trace_id" and
// "span_id" as "0x..." hex, "parent_id", ISO-8601 UTC "start_time" and
// "end_time", "kind" as "SpanKind.X", "status" with "status_code",
// attributes, events and links as plain JSON, the span's whole resource on
// every span), each on a line of its own (a formatter without indent) and
// mixed with whatever else the process printed. Read into OTLP/JSON, one
// request a span, for the importer (run_import.h; docs/megatron-traces.md).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace lens::analysis {

// Whether a parsed line is a console-exporter span (an object with "name"
// and a "context" holding "trace_id").
bool is_console_span(const nlohmann::json& line);

// The span as an ExportTraceServiceRequest in OTLP/JSON (one resourceSpans,
// one scopeSpans, one span). std::runtime_error naming the field for a
// span that does not convert (an id that is not 0x-hex of its length, a
// time that is not ISO-8601 UTC).
nlohmann::json request_of_console_span(const nlohmann::json& span);

// "2026-12-04T14:42:53.205703Z" as nanoseconds since the Unix epoch (up to
// nine fraction digits; "Z" or "+00:00"); nullopt for anything else.
std::optional<std::int64_t> iso8601_unix_ns(std::string_view text);

}  // namespace lens::analysis
