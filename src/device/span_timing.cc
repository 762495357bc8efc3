// SpanTiming: device-timed spans for one telemetry (span_timing.h).
#include "span_timing.h"

#include <pthread.h>

#include "live_span.h"
#include "span_clock.h"
#include "lens/semconv.h"

namespace lens::device {
namespace {

// Enough events for the default pending set twice over (two per span).
constexpr std::size_t kProcessEvents = 16384;

// The process's events: one pool for every telemetry, never destroyed, so
// a span's handle may give its events back after its telemetry is gone.
class ProcessEvents final : public detail::DeviceEvents {
 public:
  static ProcessEvents& get() {
    static ProcessEvents* events = [] {
      ::pthread_atfork(nullptr, nullptr, [] { forked_child().store(true); });
      return new ProcessEvents(CudaRuntime::process());
    }();
    return *events;
  }
  // True in the child of a fork (and its children): the parent's events,
  // pool and device are not to be touched there.
  static std::atomic<bool>& forked_child() {
    static std::atomic<bool> forked{false};
    return forked;
  }

  void record_end(detail::LiveSpan* s) noexcept override {
    if (s->device.end == nullptr || forked_child().load()) return;
    if (runtime.record(s->device.end, s->device.stream) != kSuccess) {
      pool.release(s->device.end);  // no end on the device: timed on the host
      s->device.end = nullptr;
    }
  }
  void release(detail::LiveSpan* s) noexcept override {
    if (!forked_child().load()) {
      pool.release(s->device.start);
      pool.release(s->device.end);
    }
    s->device = {};
  }

  const CudaRuntime& runtime;
  EventPool pool;

 private:
  explicit ProcessEvents(const CudaRuntime& r) : runtime(r), pool(r, kProcessEvents) {}
};

void mark(detail::LiveSpan* s, std::string_view key, AttributeValue value) {
  // Past the attribute limit too: they say what the span's times are. A
  // slot of the record's earlier use keeps its key's buffer.
  Attribute& a = s->new_attribute();
  a.key.assign(key);
  a.value = std::move(value);
}

}  // namespace

SpanTiming::SpanTiming(detail::TelemetryCore& core, SpanTimingOptions options)
    : core_(core), options_(options) {}

SpanTiming::~SpanTiming() {
  if (ProcessEvents::forked_child().load()) {
    // A fork's child: the resolver's thread, and whatever it was waiting
    // on, are the parent's. Its objects are left as they are (destroying a
    // condition variable the parent's thread waited on would wait forever).
    static_cast<void>(resolver_.release());
    static_cast<void>(clock_.release());
    return;
  }
  shutdown(std::chrono::milliseconds(0));
}

bool SpanTiming::ready() {
  const int state = state_.load(std::memory_order_acquire);
  if (state != 0) return state == 1;
  std::lock_guard<std::mutex> lock(start_mu_);
  if (state_.load() != 0) return state_.load() == 1;
  ProcessEvents& events = ProcessEvents::get();
  runtime_ = &events.runtime;
  int device = 0;
  if (!runtime_->available() || ProcessEvents::forked_child().load()) {
    state_.store(2, std::memory_order_release);
    return false;
  }
  if (const int status = runtime_->get_device(&device); status != kSuccess) {
    // A runtime without a device (a machine with the CUDA libraries and
    // no GPU): said in the account.
    no_device_ = "; no device: " + runtime_->describe(status);
    state_.store(2, std::memory_order_release);
    return false;
  }
  clock_ = std::make_unique<DeviceClock>(*runtime_, detail::steady_now_ns);
  resolver_ = std::make_unique<Resolver>(*runtime_, *clock_, events.pool, options_.max_pending,
                                         options_.poll_every,
                                         Resolver::Anchoring{device, options_.anchor_every});
  state_.store(1, std::memory_order_release);
  return true;
}

bool SpanTiming::begin(detail::LiveSpan* s, void* stream) noexcept {
  if (!ready() || ProcessEvents::forked_child().load()) {
    host_timed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ProcessEvents& events = ProcessEvents::get();
  Event start = nullptr, end = nullptr;
  if (!events.pool.acquire_pair(&start, &end) || runtime_->record(start, stream) != kSuccess) {
    events.pool.release(start);
    events.pool.release(end);
    host_timed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  s->device = {&events, stream, start, end};
  timed_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool SpanTiming::submit(detail::LiveSpan* s) noexcept {
  // (A span begun in the parent may end in a fork's child: the resolver
  // there is the parent's, not to be used.)
  if (s->device.end == nullptr || state_.load(std::memory_order_acquire) != 1 ||
      ProcessEvents::forked_child().load())
    return false;
  const Event start = s->device.start, end = s->device.end;
  // The resolver owns the events from here (it gives them back, also when
  // it refuses them).
  s->device = {};
  return resolver_->submit(start, end,
                           [this, s](std::optional<Resolver::Times> times) { deliver(s, times); });
}

void SpanTiming::deliver(detail::LiveSpan* s, std::optional<Resolver::Times> times) {
  if (times) {
    mark(s, semconv::kHostStart, s->start_time_unix_ns);
    mark(s, semconv::kHostEnd, s->end_time_unix_ns);
    mark(s, "lens.device.uncertainty_ns", clock_->uncertainty_ns());
    s->start_time_unix_ns = core_.clock_skew.unix_ns(times->start_ns);
    s->end_time_unix_ns = core_.clock_skew.unix_ns(times->end_ns);
  } else {
    mark(s, semconv::kTruncated, true);
    mark(s, "lens.device.unresolved", true);
    core_.spans_truncated.fetch_add(1, std::memory_order_relaxed);
  }
  core_.processor->enqueue(s);
}

void SpanTiming::shutdown(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(start_mu_);
  state_.store(2, std::memory_order_release);
  if (resolver_) resolver_->shutdown(timeout);
}

std::optional<DeviceStats> SpanTiming::stats() const {
  // Every span that asked is counted one way or the other.
  DeviceStats d;
  d.timed = timed_.load(std::memory_order_relaxed);
  d.host_timed = host_timed_.load(std::memory_order_relaxed);
  if (d.timed + d.host_timed == 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(start_mu_);
  d.runtime = runtime_->origin() + no_device_;  // set by the first span that asked
  if (resolver_ && !ProcessEvents::forked_child().load()) {  // the parent's, in a child
    const Resolver::Stats r = resolver_->stats();
    d.resolved = r.resolved;
    d.refused = r.refused;
    d.unresolved = r.unresolved;
    d.pending_high_water = r.pending_high_water;
    d.anchor_failures = r.anchor_failures;
    d.resolver_cpu_ns = r.cpu_ns;
    d.anchors = clock_->anchors();
    d.drift = clock_->drift();
    d.uncertainty_ns = clock_->uncertainty_ns();
  }
  return d;
}

}  // namespace lens::device
