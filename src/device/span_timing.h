// SpanTiming: device-timed spans for one telemetry (docs/device-time.md),
// the device part's side of core/device_timing.h.
//
// Nothing happens until a span asks for a device: then the process's CUDA
// runtime is looked for (CudaRuntime::process()), once. Without one, every
// such span is timed on the host and counted. With one, the first such span
// notes the device its thread uses and starts the resolver, which anchors
// its own clock on that device (Resolver::Anchoring) and, as each span's
// end event completes, gives the span the device's start and end on the
// span clock, keeps the host's as lens.host.start_unix_ns and
// lens.host.end_unix_ns, adds lens.device.uncertainty_ns, and queues it on
// the telemetry's processor. A span whose events had not completed by
// shutdown keeps its host times and is marked nemo.span.truncated and
// lens.device.unresolved.
//
// Events come from one process-wide pool that is never destroyed, so a
// span's handle may outlive its telemetry. In the child of a fork no span is
// timed on the device (a CUDA context does not survive fork).
//
// Thread safety: begin() on a span's thread, submit() under the open-span
// lock (core/device_timing.h); stats() and shutdown() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "device_clock.h"
#include "device_timing.h"
#include "lens/device_stats.h"
#include "resolver.h"
#include "telemetry_core.h"

namespace lens::device {

struct SpanTimingOptions {
  std::size_t max_pending = 4096;  // spans awaiting their device times
  std::chrono::microseconds poll_every{500};
  std::chrono::milliseconds anchor_every{5000};
};

class SpanTiming final : public detail::DeviceTiming {
 public:
  SpanTiming(detail::TelemetryCore& core, SpanTimingOptions options = {});
  ~SpanTiming() override;
  SpanTiming(const SpanTiming&) = delete;
  SpanTiming& operator=(const SpanTiming&) = delete;

  bool begin(detail::LiveSpan* s, void* stream) noexcept override;
  bool submit(detail::LiveSpan* s) noexcept override;

  // Waits up to `timeout` for the pending spans' devices, then queues the
  // rest unresolved; later spans are timed on the host. Before the
  // processor shuts down.
  void shutdown(std::chrono::milliseconds timeout);

  // fork(): the telemetry's prepare handler holds the start lock across it,
  // so that a child never inherits it held.
  void lock_for_fork() { start_mu_.lock(); }
  void unlock_after_fork() { start_mu_.unlock(); }

  // Nullopt while no span has asked for a device.
  std::optional<DeviceStats> stats() const;

 private:
  // Starts the resolver on the first span with a runtime; false without one.
  bool ready();
  // On the resolver's thread: the span's device times (on the monotonic
  // clock), or none; then the span goes to the processor.
  void deliver(detail::LiveSpan* s, std::optional<Resolver::Times> times);

  detail::TelemetryCore& core_;
  const SpanTimingOptions options_;
  std::atomic<int> state_{0};  // 0: not started, 1: resolving, 2: no runtime or shut down
  std::atomic<std::uint64_t> timed_{0}, host_timed_{0};
  mutable std::mutex start_mu_;
  const CudaRuntime* runtime_ = nullptr;
  std::string no_device_;  // why a runtime that loaded has no device to time on
  std::unique_ptr<DeviceClock> clock_;
  std::unique_ptr<Resolver> resolver_;
};

}  // namespace lens::device
