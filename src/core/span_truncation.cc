// Shutdown truncation: spans still open when their telemetry shuts down are
// ended there and exported marked nemo.span.truncated=true.
#include <mutex>

#include "open_span_access.h"
#include "open_spans.h"
#include "span_clock.h"
#include "telemetry_core.h"
#include "lens/semconv.h"

namespace lens::detail {

std::uint64_t TelemetryCore::truncate_open_spans(std::string_view stopped_by) {
  std::uint64_t count = 0;
  const std::int64_t now = steady_now_ns();
  std::lock_guard<SpinLock> lock(open_spans_lock());
  // Their owners may be changing them on other threads (a termination
  // watch shuts down while training runs): each is frozen before it is read.
  const FrozenOpenSpans frozen(open_head, kForeignAccessPatience);
  for (const auto& [s, readable] : frozen.spans()) {
    unlink_open(s);
    s->core = nullptr;
    ++count;
    // Unreadable: its owner is stuck inside a change; it ends unexported.
    if (!readable || !s->context.sampled()) continue;
    // The handle still owns the original (its owner frees it); a copy goes out.
    LiveSpan* copy = acquire_record();
    static_cast<SpanRecord&>(*copy) = static_cast<const SpanRecord&>(*s);
    copy->attributes.resize(s->attributes_used);  // not the original's kept slots
    copy->links.resize(s->links_used);
    copy->end_time_unix_ns =
        s->start_time_unix_ns + skewed_elapsed(now - s->start_steady_ns, s->clock_drift);
    // The marker goes in even past the attribute limit: it is what tells a
    // reader that the span did not really end here.
    copy->attributes.push_back({semconv::kTruncated, true});
    if (!stopped_by.empty())
      copy->attributes.push_back({semconv::kStoppedBy, std::string(stopped_by)});
    processor->enqueue(copy);
  }
  spans_truncated.fetch_add(count, std::memory_order_relaxed);
  return count;
}

}  // namespace lens::detail
