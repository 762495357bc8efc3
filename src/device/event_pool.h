// EventPool: CUDA events reused from span to span, so a device-timed span
// creates none on the training thread once the pool is warm. Bounded: at
// most `capacity` events exist; when every one is in use acquire() gives
// none, and the caller times on the host instead (counted by the caller).
//
// Thread safety: acquire() and release() from any thread (a mutex); the
// pool outlives the events it hands out.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "cuda_runtime.h"

namespace lens::device {

class EventPool {
 public:
  EventPool(const CudaRuntime& runtime, std::size_t capacity);
  ~EventPool();  // destroys every event it made
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A free event, made on first need; nullptr when `capacity` are in use
  // or the runtime cannot make one.
  Event acquire();
  // Two events at once (a span's start and end), or neither.
  bool acquire_pair(Event* first, Event* second);
  void release(Event event);
  void release_all(const std::vector<Event>& events);

  std::size_t created() const;
  std::size_t in_use() const;

 private:
  Event take();  // under mu_

  const CudaRuntime& runtime_;
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Event> free_;
  std::size_t created_ = 0;
};

}  // namespace lens::device
