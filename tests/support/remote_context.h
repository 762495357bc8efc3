// A fresh, valid, sampled context of "another process", for tests that
// link to or parent under a remote span; and a fixed one.
#pragma once

#include <string>

#include "lens/span_context.h"

namespace lens::testing {

inline SpanContext remote_context(std::string tracestate = {}) {
  SpanContext c;
  c.trace_id = IdGenerator::new_trace_id();
  c.span_id = IdGenerator::new_span_id();
  c.trace_flags = TraceFlags::kSampled;
  c.tracestate = std::move(tracestate);
  c.remote = true;
  return c;
}

// A fixed sampled context (the W3C trace context example's ids), for tests
// that compare what they read with known ids.
inline SpanContext example_sampled_context() {
  SpanContext c;
  c.trace_id = *TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  c.span_id = *SpanId::from_hex("00f067aa0ba902b7");
  c.trace_flags = TraceFlags::kSampled;
  return c;
}

}  // namespace lens::testing
