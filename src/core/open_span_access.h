// Reading or changing an open span's record from a thread that does not own
// it: shutdown's truncation and the failure record. Internal header.
//
// A span's owner changes its record (attributes, events, links, status,
// name) without taking a lock: that is the span's hot path. A thread that
// must read or change another thread's open record, while the owner may be
// changing it, freezes it first. Both sides write their own flag and then
// read the other's:
//
//   owner:   busy = 1; fence; frozen? -> busy = 0, wait, again; change; busy = 0
//   foreign: frozen = 1; fence; wait while busy; read and change; frozen = 0
//
// so at least one of them sees the other (Dekker's handshake), and a frozen
// record is the foreign thread's alone. The fences are what make that hold,
// and the owner's runs on every change of every span: where the kernel
// offers membarrier(2) it is only a compiler barrier, the foreign side's
// membarrier acting as a full fence on every running thread of the
// process; without it (an old kernel, a seccomp filter) it is a full fence.
//
// The foreign side holds open_spans_lock() throughout (the span can neither
// end nor leave its list meanwhile); an owner never takes that lock inside
// a change, so the wait ends. It is bounded all the same: an owner stopped
// inside a change (a debugger, a thread a fork left behind) leaves its span
// unreadable to the caller, which then skips it, and nothing waits longer.
//
// Thread safety: OwnerChange is used by the thread that owns the span (one
// at a time, as Span is); FrozenOpenSpans by a thread holding
// open_spans_lock().
#pragma once

#include <atomic>
#include <chrono>
#include <vector>

#include "live_span.h"

namespace lens::detail {

// The owner's side of the handshake: the fence between writing `busy` and
// reading `frozen` (a compiler barrier when the foreign side can use
// membarrier, else a full fence).
extern std::atomic<bool> g_foreign_side_fences_all;
inline void owner_fence() {
  if (g_foreign_side_fences_all.load(std::memory_order_relaxed))
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Registers the process for membarrier(2) if the kernel allows it (once;
// every TelemetryCore calls it). Until then owners use full fences.
void enable_asymmetric_fence();

// The owner's side without waiting: true when the owner may change s now
// (it then calls owner_done), false when a foreign thread holds the record
// (the owner then waits, as OwnerChange does).
inline bool owner_try_begin(LiveSpan* s) {
  s->busy.store(true, std::memory_order_relaxed);
  owner_fence();
  if (!s->frozen.load(std::memory_order_acquire)) [[likely]]
    return true;
  s->busy.store(false, std::memory_order_release);
  return false;
}
inline void owner_done(LiveSpan* s) { s->busy.store(false, std::memory_order_release); }

// Marks the owner's change of a record: from construction (which waits
// while a foreign thread holds the record) to destruction.
class OwnerChange {
 public:
  explicit OwnerChange(LiveSpan* s) : s_(s) {
    while (!owner_try_begin(s)) wait_while_frozen(s);
  }
  ~OwnerChange() { owner_done(s_); }
  OwnerChange(const OwnerChange&) = delete;
  OwnerChange& operator=(const OwnerChange&) = delete;

 private:
  // Static, so that the span's pointer stays in a register around it.
  static void wait_while_frozen(const LiveSpan* s);
  LiveSpan* s_;
};

// Freezes every span on a core's open list (the caller holds
// open_spans_lock() for the object's whole life) and thaws them when
// destroyed, including those the caller took off the list meanwhile.
class FrozenOpenSpans {
 public:
  // Waits until no owner is changing one of them, or `patience` has passed.
  FrozenOpenSpans(LiveSpan& open_head, std::chrono::milliseconds patience);
  ~FrozenOpenSpans();
  FrozenOpenSpans(const FrozenOpenSpans&) = delete;
  FrozenOpenSpans& operator=(const FrozenOpenSpans&) = delete;

  struct Entry {
    LiveSpan* span;
    // False when its owner was still changing it as patience ran out: the
    // caller must neither read nor change that span.
    bool readable;
  };
  // The spans, oldest first, as the list held them at construction.
  const std::vector<Entry>& spans() const { return spans_; }

 private:
  std::vector<Entry> spans_;
};

// How long truncation and the failure record wait for owners.
inline constexpr std::chrono::milliseconds kForeignAccessPatience{200};

}  // namespace lens::detail
