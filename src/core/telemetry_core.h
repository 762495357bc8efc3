// TelemetryCore: the state a Tracer and a Span reach on the hot path.
// Internal header.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batch_processor.h"
#include "device_timing.h"
#include "lens/sampler.h"
#include "lens/span_record.h"
#include "lens/tracer.h"
#include "live_span.h"
#include "open_span_access.h"
#include "span_clock.h"
#include "spin_lock.h"

namespace lens::detail {

// Guards every TelemetryCore's open-span list and each LiveSpan's `core`
// pointer. It is process-wide (not per core) so that a span ending on one
// thread and its Telemetry shutting down on another agree on who ends it,
// even while that Telemetry is being destroyed. Critical sections are a few
// pointer writes plus a queue push.
extern constinit SpinLock g_open_spans_lock;
inline SpinLock& open_spans_lock() { return g_open_spans_lock; }

class TelemetryCore {
 public:
  TelemetryCore() {
    open_head.prev = open_head.next = &open_head;
    enable_asymmetric_fence();
  }

  GroupSwitches switches;
  SpanLimits limits;
  Sampler sampler;
  ClockSkew clock_skew;  // the test aid's; inactive unless a test sets it
  std::unique_ptr<BatchProcessor> processor;
  // Device timing, when telemetry has it (device_timing.h); else null.
  DeviceTiming* device = nullptr;
  LiveSpan open_head;  // sentinel of the circular open-span list
  std::atomic<std::uint64_t> spans_truncated{0};
  // The span that ended last (name, truncated to fit, and when), for the
  // failure record; written under open_spans_lock() by a span's end.
  char last_ended_name[LiveSpan::kNameCapacity] = {};
  std::uint8_t last_ended_length = 0;
  std::int64_t last_ended_steady_ns = 0;

  // Links s into the open list and marks it as this core's. Takes the lock.
  void register_open(LiveSpan* s) {
    std::lock_guard<SpinLock> lock(open_spans_lock());
    s->core = this;
    s->next = &open_head;
    s->prev = open_head.prev;
    open_head.prev->next = s;
    open_head.prev = s;
  }
  // Ends every open span: exports a copy marked nemo.span.truncated=true
  // (and lens.stopped_by=`stopped_by`, the signal that stopped the process,
  // when given) and detaches the original from this core. Returns how many.
  std::uint64_t truncate_open_spans(std::string_view stopped_by = {});
  // Adds an event to every open span and returns one line per open span
  // (oldest first): "name [key=value ...]" with the dl.* attributes, then a
  // line naming the span that ended last. The events carry lens.detail and
  // lens.last_ended.
  std::vector<std::string> mark_open_spans(std::string_view event, std::string_view detail);
};

// Ends a span's recording at `end_steady_ns` on the monotonic clock:
// timestamps it and queues it (or frees it if its telemetry already ended
// it). Span::end_recording ends one now; this is Span::end_at's, a span
// whose end the caller gives, as OpenTelemetry's end(end_time) does.
void finish_span_at(LiveSpan* s, std::int64_t end_steady_ns);

}  // namespace lens::detail
