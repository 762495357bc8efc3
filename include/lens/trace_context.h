/// \file
/// W3C Trace Context: `traceparent` and `tracestate` parsing and formatting.
///
/// Parsing follows https://www.w3.org/TR/trace-context/ exactly:
/// - traceparent: "version-traceid-parentid-flags", lowercase hex only;
///   version "ff" is invalid; version 00 must be exactly 55 characters; a
///   future version is parsed by the version-00 rules on its first 55
///   characters and must be followed by '-' if longer; all-zero trace or
///   span ids are invalid.
/// - tracestate: at most 32 list members; keys and values follow the
///   recommendation's grammar; an invalid member is dropped on its own (the
///   rest of the header survives), as are duplicate keys after the first and
///   members past the 32nd.
///
/// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "lens/span_context.h"

namespace lens {

/// Parses a traceparent header value; surrounding spaces and tabs are
/// ignored. The result is marked remote. nullopt if the header is invalid.
std::optional<SpanContext> parse_traceparent(std::string_view header);

/// Formats "00-<trace>-<span>-<flags>" (always version 00).
std::string format_traceparent(const SpanContext& context);

/// Returns the valid members of a tracestate header, re-serialised as
/// "k=v,k=v" (no spaces), keeping the first 32 valid, distinct keys.
std::string sanitize_tracestate(std::string_view header);

/// True if key (resp. value) is a valid tracestate key (resp. value).
bool valid_tracestate_key(std::string_view key);
bool valid_tracestate_value(std::string_view value);

/// Parses both headers; tracestate is only read when traceparent is valid.
std::optional<SpanContext> parse_trace_context(std::string_view traceparent,
                                               std::string_view tracestate);

}  // namespace lens
