// A fresh, valid, sampled context of "another process", for tests that
// link to or parent under a remote span.
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

}  // namespace lens::testing
