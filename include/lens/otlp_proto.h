/// \file
/// OTLP protobuf encoding of spans: one ExportTraceServiceRequest per call,
/// written straight into a byte buffer with no intermediate message objects.
///
/// Nested messages get a 4-byte length slot that is filled in when the message
/// ends, written as a (valid, non-minimal) varint; this caps one request at
/// 256 MiB, far above any batch: a larger one is reported, not corrupted.
/// Strings that are not valid UTF-8 (which OTLP requires) are written with
/// U+FFFD in place of each invalid byte, as the JSON encoder does. Field numbers follow
/// opentelemetry/proto/trace/v1/trace.proto and its collector service.
///
/// Thread safety: pure function.
#pragma once

#include <span>
#include <string>

#include "lens/resource.h"
#include "lens/span_record.h"

namespace lens {

/// Appends the request's bytes to out. Spans are grouped by instrumentation
/// scope in order of first appearance. Returns false when the request does
/// not fit in 256 MiB (what was appended is then not a valid request).
bool append_otlp_proto(std::string& out, const Resource& resource,
                       std::span<const SpanRecord* const> spans);

}  // namespace lens
