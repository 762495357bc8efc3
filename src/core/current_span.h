// The current span of each thread: what CurrentSpanScope sets and what a span
// started without an explicit parent nests under. Internal header.
//
// Thread safety: thread-local; each thread sees only its own.
#pragma once

#include "lens/span_context.h"

namespace lens::detail {

struct CurrentContext {
  bool has = false;
  SpanContext context;
};

// This thread's current span context.
CurrentContext& current_context();

}  // namespace lens::detail
