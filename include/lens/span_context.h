/// \file
/// SpanContext: the part of a span that crosses process boundaries.
///
/// A SpanContext is the (trace id, span id, trace flags, tracestate) tuple of
/// the W3C Trace Context recommendation, plus whether it came from another
/// process (remote). It is a plain value; valid() means both ids are non-zero.
///
/// Thread safety: a value type; copies are independent.
#pragma once

#include <cstdint>
#include <string>

#include "lens/ids.h"

namespace lens {

struct TraceFlags {
  static constexpr std::uint8_t kSampled = 0x01;
};

struct SpanContext {
  TraceId trace_id;
  SpanId span_id;
  std::uint8_t trace_flags = 0;
  /// Serialised W3C tracestate ("k1=v1,k2=v2"), already validated.
  std::string tracestate{};
  bool remote = false;

  bool valid() const { return trace_id.valid() && span_id.valid(); }
  bool sampled() const { return (trace_flags & TraceFlags::kSampled) != 0; }

  friend bool operator==(const SpanContext&, const SpanContext&) = default;
};

}  // namespace lens
