// The failure record: when a rank fails, every span it has open gets an event
// saying why, and the caller gets one line per open span to log, so both the
// trace and the log say what the rank was in.
#include <mutex>

#include "open_span_access.h"
#include "span_clock.h"
#include "telemetry_core.h"

namespace lens::detail {

std::vector<std::string> TelemetryCore::mark_open_spans(std::string_view event,
                                                        std::string_view detail) {
  std::vector<std::string> lines;
  const std::int64_t now = steady_now_ns();
  std::lock_guard<SpinLock> lock(open_spans_lock());
  std::string last_ended = "(none)";
  if (last_ended_length > 0) {
    last_ended.assign(last_ended_name, last_ended_length);
    last_ended +=
        " (ended " + std::to_string((now - last_ended_steady_ns) / 1000000) + " ms before)";
  }
  // Their owners may be changing them on other threads: each is frozen
  // before it is read or given its event.
  const FrozenOpenSpans frozen(open_head, kForeignAccessPatience);
  for (const auto& [s, readable] : frozen.spans()) {
    if (!readable) {
      lines.push_back("(a span its thread was changing, not read)");
      continue;
    }
    std::string line = s->name;
    for (const auto& a : s->used_attributes()) {
      if (!a.key.starts_with("dl.")) continue;
      if (const auto* i = std::get_if<std::int64_t>(&a.value))
        line += " " + a.key + "=" + std::to_string(*i);
    }
    const double open_ms = static_cast<double>(now - s->start_steady_ns) / 1e6;
    line += " (open " + std::to_string(static_cast<std::int64_t>(open_ms)) + " ms)";
    lines.push_back(std::move(line));
    if (s->events.size() < limits.event_count) {
      SpanEvent& e = s->events.emplace_back();
      e.name.assign(event);
      e.time_unix_ns =
          s->start_time_unix_ns + skewed_elapsed(now - s->start_steady_ns, s->clock_drift);
      e.attributes = {{"lens.detail", std::string(detail)}, {"lens.last_ended", last_ended}};
    } else {
      ++s->dropped_events_count;
    }
  }
  lines.push_back("last span ended: " + last_ended);
  return lines;
}

}  // namespace lens::detail
