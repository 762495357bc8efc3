// The open-span registry: a span joins its core's open list when it starts
// and leaves it when it ends (or when its telemetry ends it first).
#include "open_spans.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "lens/span.h"
#include "span_clock.h"
#include "telemetry_core.h"

namespace lens::detail {

constinit SpinLock g_open_spans_lock;

namespace {

// A span's end. `kDevice`: the span is timed on a device (its events are
// recorded, submitted and given back); the host-timed end, most spans',
// is compiled without those tests.
template <bool kDevice>
[[gnu::always_inline]] inline void finish_as(LiveSpan* s, const std::int64_t end_steady) {
  if (s->figure != StepFigure::kNone) add_step_figure(s->figure, end_steady - s->start_steady_ns);
  // A device-timed span's end is recorded on its stream first: what the
  // device does after this moment is not the span's.
  if constexpr (kDevice) s->device.events->record_end(s);
  bool queued = false;
  BatchProcessor::PendingWake wake;
  {
    std::lock_guard<SpinLock> lock(open_spans_lock());
    TelemetryCore* core = s->core;
    if (core != nullptr) {
      unlink_open(s);
      s->core = nullptr;
      s->end_time_unix_ns =
          s->start_time_unix_ns + skewed_elapsed(end_steady - s->start_steady_ns, s->clock_drift);
      // The whole buffer's width, whatever the name's length (a record's
      // name holds at least that many bytes: LiveSpan's constructor), so
      // that the copy is a few moves rather than a call.
      static_assert(sizeof core->last_ended_name == LiveSpan::kNameCapacity);
      std::memcpy(core->last_ended_name, s->name.data(), sizeof core->last_ended_name);
      core->last_ended_length =
          static_cast<std::uint8_t>(std::min(s->name.size(), sizeof core->last_ended_name));
      core->last_ended_steady_ns = end_steady;
      // Queued under the lock: the core cannot be destroyed meanwhile. The
      // export thread's wake-up (a mutex and a notify) waits until the lock
      // is released; it holds the processor's state, not the core.
      if (s->context.sampled()) {
        s->settle_attributes();
        s->settle_links();
        if constexpr (kDevice) {
          if (core->device != nullptr && core->device->submit(s))
            return;  // the device part queues it once its times are known
          // (A submit that was refused has handed the events on already.)
          if (s->device.events != nullptr) s->device.events->release(s);
        }
        core->processor->enqueue(s, wake);
        queued = true;
      }
    }
  }
  wake.run();
  if (!queued) {
    if constexpr (kDevice)
      if (s->device.events != nullptr) s->device.events->release(s);
    release_record(s);
  }
}

// Both entry points' end: the device-timed one out of line.
[[gnu::noinline]] void finish_device(LiveSpan* s, const std::int64_t end_steady) {
  finish_as<true>(s, end_steady);
}
[[gnu::always_inline]] inline void finish(LiveSpan* s, const std::int64_t end_steady) {
  if (s->device.events != nullptr) [[unlikely]]
    return finish_device(s, end_steady);
  finish_as<false>(s, end_steady);
}

}  // namespace

void finish_span_at(LiveSpan* s, const std::int64_t end_steady) { finish(s, end_steady); }

}  // namespace lens::detail

namespace lens {

// A Span's end (its destructor's, most often): the body inline here, so
// that the end is one call.
void Span::end_recording() { detail::finish(std::exchange(live_, nullptr), detail::steady_now_ns()); }

}  // namespace lens
