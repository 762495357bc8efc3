/// \file
/// OTLP/JSON encoding of spans: one ExportTraceServiceRequest per call.
///
/// Follows the OTLP/JSON mapping of the OpenTelemetry protocol: lowerCamelCase
/// field names, trace and span ids as lowercase hex strings, 64-bit integers
/// (times, intValue) as decimal strings, enums (kind, status code) as
/// integers. Strings that are not valid UTF-8 have each bad byte replaced by
/// U+FFFD so the output is always valid JSON. NaN and infinities become the
/// strings "NaN", "Infinity", "-Infinity" as proto3 JSON prescribes.
///
/// Thread safety: pure function.
#pragma once

#include <span>
#include <string>

#include "lens/resource.h"
#include "lens/span_record.h"

namespace lens {

/// Appends {"resourceSpans":[...]} (no newline) to out. Spans are grouped by
/// instrumentation scope in order of first appearance.
void append_otlp_json(std::string& out, const Resource& resource,
                      std::span<const SpanRecord* const> spans);

/// Appends s as a JSON string literal (with quotes).
void append_json_string(std::string& out, std::string_view s);
/// Appends "attributes":[...] as OTLP/JSON writes them (for other OTLP
/// payloads: metrics).
void append_otlp_json_attributes(std::string& out, const Attributes& attributes);
/// Appends a double as OTLP/JSON writes it (NaN and infinities as strings).
void append_otlp_json_double(std::string& out, double value);

}  // namespace lens
