// The partial-success part of an OTLP/HTTP response: how many spans the
// receiver rejected, and why. Internal header of the otlp part.
//
// The body is untrusted (any server can answer): both readers are bounds
// checked and read anything unexpected as "no rejection".
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lens::detail {

struct PartialSuccess {
  std::int64_t rejected_spans = 0;
  std::string error_message;  // at most 512 bytes, printable ASCII only
};

// ExportTraceServiceResponse { partial_success = 1 { rejected_spans = 1,
// error_message = 2 } } in the protobuf wire format.
PartialSuccess partial_success_from_proto(std::string_view body);
// {"partialSuccess":{"rejectedSpans":"3","errorMessage":"..."}} in OTLP/JSON.
PartialSuccess partial_success_from_json(std::string_view body);

}  // namespace lens::detail
