// What the OTLP protobuf and JSON encoders share. Internal header.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lens/span_record.h"

namespace lens::detail {

// OTLP Span.flags / Link.flags: the W3C trace flags in bits 0-7; bit 8 says
// whether bit 9 is known; bit 9 says the parent (or linked) context is remote.
inline std::uint32_t otlp_flags(std::uint8_t trace_flags, bool remote) {
  return trace_flags | 0x100u | (remote ? 0x200u : 0u);
}

// The batch's instrumentation scopes in order of first appearance: one
// ScopeSpans each.
inline std::vector<const InstrumentationScope*> scopes_in_order(
    std::span<const SpanRecord* const> spans) {
  std::vector<const InstrumentationScope*> scopes;
  for (const SpanRecord* s : spans) {
    bool seen = false;
    for (auto* sc : scopes) seen = seen || sc == s->scope;
    if (!seen) scopes.push_back(s->scope);
  }
  return scopes;
}

}  // namespace lens::detail
