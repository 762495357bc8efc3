// EventPool: reused CUDA events (event_pool.h).
#include "event_pool.h"

namespace lens::device {

EventPool::EventPool(const CudaRuntime& runtime, std::size_t capacity)
    : runtime_(runtime), capacity_(capacity) {}

EventPool::~EventPool() {
  for (Event e : free_) runtime_.destroy_event(e);
}

Event EventPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  return take();
}

bool EventPool::acquire_pair(Event* first, Event* second) {
  std::lock_guard<std::mutex> lock(mu_);
  *first = take();
  *second = *first != nullptr ? take() : nullptr;
  if (*second != nullptr) return true;
  if (*first != nullptr) free_.push_back(*first);
  *first = nullptr;
  return false;
}

Event EventPool::take() {
  if (!free_.empty()) {
    Event e = free_.back();
    free_.pop_back();
    return e;
  }
  if (created_ >= capacity_) return nullptr;
  Event e = nullptr;
  if (runtime_.create_event(&e) != kSuccess) return nullptr;
  ++created_;
  return e;
}

void EventPool::release(Event event) {
  if (event == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

void EventPool::release_all(const std::vector<Event>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Event e : events)
    if (e != nullptr) free_.push_back(e);
}

std::size_t EventPool::created() const {
  std::lock_guard<std::mutex> lock(mu_);
  return created_;
}

std::size_t EventPool::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return created_ - free_.size();
}

}  // namespace lens::device
