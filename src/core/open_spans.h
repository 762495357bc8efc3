// The open-span registry: every TelemetryCore keeps its open spans on an
// intrusive circular list, so shutdown can end them (span_truncation.cc) and
// a failure can name them (failure_record.cc). Internal header.
//
// Thread safety: the list and each LiveSpan's `core` pointer are guarded by
// open_spans_lock() (declared in telemetry_core.h).
#pragma once

#include "live_span.h"

namespace lens::detail {

// Takes s off its core's open list. The caller holds open_spans_lock().
inline void unlink_open(LiveSpan* s) {
  s->prev->next = s->next;
  s->next->prev = s->prev;
  s->prev = s->next = nullptr;
}

}  // namespace lens::detail
