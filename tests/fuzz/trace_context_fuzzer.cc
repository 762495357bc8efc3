// libFuzzer target: W3C traceparent and tracestate parsing. The first byte
// splits the input into a traceparent and a tracestate. Properties: a parsed
// traceparent formats to a header that parses to the same context; the
// sanitised tracestate is a fixed point of sanitising, with at most 32
// members, every one valid.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "lens/trace_context.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t split = data[0] % size;
  std::string_view all(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string_view traceparent = all.substr(0, std::min(split, all.size()));
  std::string_view tracestate = all.substr(std::min(split, all.size()));

  if (auto ctx = lens::parse_traceparent(traceparent)) {
    if (!ctx->valid()) std::abort();
    auto again = lens::parse_traceparent(lens::format_traceparent(*ctx));
    if (!again || again->trace_id != ctx->trace_id || again->span_id != ctx->span_id ||
        again->trace_flags != ctx->trace_flags)
      std::abort();
  }
  const std::string clean = lens::sanitize_tracestate(tracestate);
  if (lens::sanitize_tracestate(clean) != clean) std::abort();
  std::size_t members = clean.empty() ? 0 : 1;
  for (char c : clean) members += c == ',';
  if (members > 32) std::abort();
  return 0;
}
