/// \file
/// W3C Trace Context: `traceparent` and `tracestate` parsing and formatting.
///
/// Parsing follows W3C Trace Context Level 2
/// (https://www.w3.org/TR/trace-context-2/) at the strictness of the W3C
/// conformance test suite:
/// - traceparent: "version-traceid-parentid-flags", lowercase hex only;
///   version "ff" is invalid; version 00 must be exactly 55 characters; a
///   future version is parsed by the version-00 rules on its first 55
///   characters and must be followed by '-' if longer; all-zero trace or
///   span ids are invalid.
/// - tracestate: keys follow Level 2's grammar,
///   `key = ( lcalpha / DIGIT ) 0*255 ( keychar )` with keychar lcalpha,
///   DIGIT, "_", "-", "*", "/" or "@" (so `foo@` and a 256-character key
///   holding `@` are valid; 257 characters are not); values are 1-256
///   printable characters without ',' or '=' and not ending in a space. One
///   invalid list member, or more than 32 distinct keys (after the header's
///   fields are combined with ','), invalidates the whole tracestate: it is
///   discarded, not trimmed member by member. A repeated key is not invalid:
///   its first member is kept and the later ones are dropped (the W3C
///   suite's test_tracestate_duplicated_keys accepts either that or keeping
///   both). Empty list members and optional whitespace around members are
///   allowed.
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

/// Returns a tracestate header's members re-serialised as "k=v,k=v" (no
/// optional whitespace, no empty members), or "" when the value is invalid
/// as a whole (see above). Pass a header repeated over several fields
/// combined with ','.
std::string sanitize_tracestate(std::string_view header);

/// True if key (resp. value) is a valid tracestate key (resp. value).
bool valid_tracestate_key(std::string_view key);
bool valid_tracestate_value(std::string_view value);

/// Parses both headers; tracestate is only read when traceparent is valid.
std::optional<SpanContext> parse_trace_context(std::string_view traceparent,
                                               std::string_view tracestate);

}  // namespace lens
