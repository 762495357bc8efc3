// The partial-success part of an OTLP/HTTP response: how many spans the
// receiver rejected. Internal header of the otlp part.
//
// The body is untrusted (any server can answer): both readers are bounds
// checked and read anything unexpected as "no rejection".
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace lens::detail {

// ExportTraceServiceResponse { partial_success = 1 { rejected_spans = 1 } }
// in the protobuf wire format.
std::int64_t rejected_spans_from_proto(std::string_view body);
// {"partialSuccess":{"rejectedSpans":"3",...}} in OTLP/JSON.
std::int64_t rejected_spans_from_json(std::string_view body);

}  // namespace lens::detail
