// DeviceClock: anchors, drift and host times of device events
// (device_clock.h).
#include "device_clock.h"

#include <algorithm>
#include <cmath>

namespace lens::device {

DeviceClock::DeviceClock(const CudaRuntime& runtime, std::function<std::int64_t()> host_now)
    : runtime_(runtime), host_now_(std::move(host_now)) {}

DeviceClock::~DeviceClock() {
  for (const Anchor& a : anchors_) runtime_.destroy_event(a.event);
}

bool DeviceClock::anchor(Stream stream) {
  Event drain = nullptr, event = nullptr;
  if (runtime_.create_event(&drain) != kSuccess) return false;
  if (runtime_.create_event(&event) != kSuccess) {
    runtime_.destroy_event(drain);
    return false;
  }
  bool ok = runtime_.record(drain, stream) == kSuccess && runtime_.synchronize(drain) == kSuccess;
  runtime_.destroy_event(drain);
  const std::int64_t h0 = host_now_();
  ok = ok && runtime_.record(event, stream) == kSuccess && runtime_.synchronize(event) == kSuccess;
  const std::int64_t h1 = host_now_();
  if (!ok) {
    runtime_.destroy_event(event);
    return false;
  }
  const Anchor a{event, h0 + (h1 - h0) / 2};
  std::lock_guard<std::mutex> lock(mu_);
  uncertainty_ns_ = std::max(uncertainty_ns_, (h1 - h0 + 1) / 2);
  ++taken_;
  if (anchors_.size() == 2) {  // the latest gives way; the first stays
    runtime_.destroy_event(anchors_.back().event);
    anchors_.pop_back();
  }
  anchors_.push_back(a);
  if (anchors_.size() == 2) {
    const Anchor& first = anchors_.front();
    const double host = static_cast<double>(a.host_ns - first.host_ns);
    float device_ms = 0;
    if (host >= 1e9 && runtime_.elapsed_ms(&device_ms, first.event, a.event) == kSuccess)
      drift_ = static_cast<double>(device_ms) * 1e6 / host - 1;
  }
  return true;
}

std::optional<std::int64_t> DeviceClock::host_time(Event event) const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_time_locked(event);
}

std::optional<std::pair<std::int64_t, std::int64_t>> DeviceClock::host_times(Event start,
                                                                             Event end) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = host_time_locked(start);
  const auto b = a ? host_time_locked(end) : std::nullopt;
  if (!b) return std::nullopt;
  return std::make_pair(*a, *b);
}

std::optional<std::int64_t> DeviceClock::host_time_locked(Event event) const {
  if (anchors_.empty()) return std::nullopt;
  const Anchor& a = anchors_.back();
  float ms = 0;
  if (runtime_.elapsed_ms(&ms, a.event, event) != kSuccess) return std::nullopt;
  return a.host_ns + std::llround(static_cast<double>(ms) * 1e6 / (1 + drift_));
}

double DeviceClock::drift() const {
  std::lock_guard<std::mutex> lock(mu_);
  return drift_;
}

std::int64_t DeviceClock::uncertainty_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uncertainty_ns_;
}

std::size_t DeviceClock::anchors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return taken_;
}

}  // namespace lens::device
