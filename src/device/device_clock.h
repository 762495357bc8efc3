// DeviceClock: device events put on the rank's host clock
// (docs/device-time.md). A CUDA event has no absolute time, only the time
// elapsed since another event; so the clock keeps anchors: events whose host
// time is known.
//
// An anchor on a stream: first the stream is drained (an event recorded and
// waited for), then the host clock is read (h0), the anchor event recorded
// and waited for, and the host clock read again (h1). The idle device
// reaches the anchor between h0 and h1: its host time is their midpoint,
// its uncertainty half their distance. A later event X is at
//   host(A) + elapsed(A, X) / (1 + drift)
// from the latest anchor A before it (elapsed times are floats in ms, exact
// to about a microsecond over seconds, so anchors are renewed at a sync the
// step already has, or every few seconds). The drift, the device clock's
// rate against the host's, is fitted from the first and the latest anchor
// once they are at least a second apart (0 before).
//
// Thread safety: anchor() on one thread (the one that owns the stream's
// sync points); host_time() from any thread, under the clock's mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cuda_runtime.h"

namespace lens::device {

class DeviceClock {
 public:
  // `host_now` reads the rank's span clock (ns).
  DeviceClock(const CudaRuntime& runtime, std::function<std::int64_t()> host_now);
  ~DeviceClock();
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;

  // Takes an anchor on `stream` (blocks until the stream is idle). False
  // when the runtime fails; the clock keeps its earlier anchors.
  bool anchor(Stream stream);

  // The host time (ns) of a completed event recorded after the first
  // anchor; nullopt before any anchor, or when the runtime cannot say
  // (the event is not complete).
  std::optional<std::int64_t> host_time(Event event) const;
  // Both of a span's events at once (one lock); nullopt unless both have one.
  std::optional<std::pair<std::int64_t, std::int64_t>> host_times(Event start, Event end) const;

  // The device's rate against the host's, minus 1 (0 until two anchors
  // a second apart).
  double drift() const;
  // Half the widest anchor bracket so far (ns): how far off an event's
  // host time may be.
  std::int64_t uncertainty_ns() const;
  std::size_t anchors() const;

 private:
  struct Anchor {
    Event event = nullptr;
    std::int64_t host_ns = 0;  // the bracket's midpoint
  };
  std::optional<std::int64_t> host_time_locked(Event event) const;  // under mu_

  const CudaRuntime& runtime_;
  std::function<std::int64_t()> host_now_;
  mutable std::mutex mu_;
  std::vector<Anchor> anchors_;  // the first and the latest
  double drift_ = 0;
  std::int64_t uncertainty_ns_ = 0;
  std::size_t taken_ = 0;
};

}  // namespace lens::device
