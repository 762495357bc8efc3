// Resolver: device-timed work between its launch and its export
// (docs/device-time.md). The training thread submits a pair of events (the
// start and end recorded on a stream) with what to do once their times are
// known; a thread of the resolver's own polls the pending pairs, and when a
// pair's end event has completed puts both on the host clock (DeviceClock)
// and hands the times on, then returns the events to the pool.
//
// Never a stall of the training thread: submit() only takes a mutex and
// appends; the pending set is bounded, and a submit beyond it is refused
// and counted (the caller keeps its host times). Work whose events never
// complete (a hung stream) stays pending until shutdown(), which waits a
// bounded time and then hands the rest on as unresolved, counted.
//
// Anchoring (optional): the resolver's thread keeps the clock anchored
// itself, on a stream of its own that waits for no other, so the training
// thread never waits for an anchor: before it first resolves and again
// every `every`, on the device the training thread uses (set on the
// resolver's thread first). Without it, the caller anchors the clock.
//
// Thread safety: submit() and stats() from any thread; shutdown() once. Not
// for the child of a fork (its thread is the parent's): SpanTiming, its
// owner, neither submits to nor destroys it there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "device_clock.h"
#include "event_pool.h"

namespace lens::device {

class Resolver {
 public:
  // Device start and end on the host clock (ns).
  struct Times {
    std::int64_t start_ns = 0, end_ns = 0;
  };
  // Called on the resolver's thread with the times, or nullopt when they
  // could not be had (the events never completed before shutdown, or the
  // runtime failed).
  using Done = std::function<void(std::optional<Times>)>;

  struct Stats {
    std::uint64_t submitted = 0, resolved = 0;
    std::uint64_t refused = 0;     // the pending set was full
    std::uint64_t unresolved = 0;  // handed on without times
    std::size_t pending_high_water = 0;
    std::int64_t cpu_ns = 0;            // the resolver thread's CPU time
    std::uint64_t anchor_failures = 0;  // anchors it could not take
  };

  struct Anchoring {
    int device = 0;
    std::chrono::milliseconds every{5000};
  };

  Resolver(const CudaRuntime& runtime, DeviceClock& clock, EventPool& pool, std::size_t max_pending,
           std::chrono::microseconds poll_every, std::optional<Anchoring> anchoring = std::nullopt);
  ~Resolver();  // shutdown(0) if not yet shut down
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Takes the two events (returned to the pool once handled). False when
  // the pending set is full or the resolver is shut down: the events go
  // back to the pool and `done` is not called.
  bool submit(Event start, Event end, Done done);

  // Waits up to `timeout` for what is pending to resolve, then hands the
  // rest on unresolved and stops the thread.
  void shutdown(std::chrono::milliseconds timeout);

  Stats stats() const;

 private:
  struct Pending {
    Event start = nullptr, end = nullptr;
    Done done;
  };
  void run();
  // Hands on every pending pair whose end event has completed; true when
  // some were.
  bool resolve_completed();
  // Hands a batch on: with their times when `completed` (the end events
  // have), else unresolved; counts them and returns their events.
  void hand_on(std::vector<Pending>& batch, bool completed);
  // Anchors the clock when due (anchoring only); on the resolver's thread.
  void anchor_if_due();
  void note_cpu();

  const CudaRuntime& runtime_;
  DeviceClock& clock_;
  EventPool& pool_;
  const std::size_t max_pending_;
  const std::chrono::microseconds poll_every_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  std::size_t polling_ = 0;  // pairs taken out of pending_ while the runtime is queried
  Stats stats_;
  bool stopping_ = false;
  bool asleep_ = false;  // waiting for a submit, not polling
  std::chrono::steady_clock::time_point deadline_{};
  const std::optional<Anchoring> anchoring_;
  Stream anchor_stream_ = nullptr;  // the resolver thread's own
  bool anchor_stream_made_ = false;
  std::chrono::steady_clock::time_point next_anchor_{};
  std::thread thread_;
};

}  // namespace lens::device
