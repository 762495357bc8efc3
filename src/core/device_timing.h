// What a span timed on a device asks of the device part
// (docs/device-time.md). Internal header of the core part: the core
// declares the calls, the device part (which depends on the core) makes
// them, and telemetry connects the two.
//
// A span started with StartOptions::device_stream, sampled, on a core with
// device timing: DeviceTiming::begin records an event on the stream and
// notes it in the record (LiveSpan::device). At its end the end event is
// recorded on the same stream (DeviceEvents::record_end, on the span's
// thread, before the core is asked: the span's handle may outlive its
// telemetry, and the process-wide DeviceEvents outlives every span), then,
// under the open-span lock, DeviceTiming::submit takes the record instead
// of the processor: it reaches the processor once the device's times are
// known. A span that is not submitted (its telemetry ended it first, or the
// device part refused it) gives its events back (DeviceEvents::release) and
// keeps its host times.
//
// Thread safety: DeviceEvents from any thread; DeviceTiming::begin on the
// span's thread while its core lives, submit under open_spans_lock().
#pragma once

namespace lens::detail {

struct LiveSpan;

// The process's device events: never destroyed.
class DeviceEvents {
 public:
  // Records the span's end event on its stream (nothing when it has none).
  virtual void record_end(LiveSpan* s) noexcept = 0;
  // Gives the span's events back and forgets them.
  virtual void release(LiveSpan* s) noexcept = 0;

 protected:
  ~DeviceEvents() = default;
};

// One core's device timing (telemetry owns it beside the core).
class DeviceTiming {
 public:
  virtual ~DeviceTiming() = default;
  // At the start of a sampled span asking for `stream`: records its start
  // there. False: the span is timed on the host (counted by the device part).
  virtual bool begin(LiveSpan* s, void* stream) noexcept = 0;
  // The span has ended (host end time set, unlinked): takes the record, or
  // false when it will not (the span's events are then given back and the
  // caller queues it as it is).
  virtual bool submit(LiveSpan* s) noexcept = 0;
};

}  // namespace lens::detail
