// The handshake between a span's owner and a thread reading its open record
// (open_span_access.h): membarrier(2) registration, the foreign side's
// fence and both sides' waits.
#include "open_span_access.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>

#include "spin_lock.h"

namespace lens::detail {

std::atomic<bool> g_foreign_side_fences_all{false};

namespace {

int membarrier(int command) { return static_cast<int>(syscall(SYS_membarrier, command, 0, 0)); }

bool register_membarrier() {
  const int supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

// A full fence on every running thread of the process, or on this one only
// (then the owners use full fences themselves).
void foreign_fence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!g_foreign_side_fences_all.load(std::memory_order_relaxed)) return;
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // A fork's child may not inherit the registration: register again.
  if (errno == EPERM && register_membarrier() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  // No membarrier after all: owners use full fences from now on. One that
  // read the flag before this store may still be in its handshake with
  // only a compiler barrier; its `busy` store leaves the store buffer in
  // nanoseconds, so after a pause the wait below sees it.
  g_foreign_side_fences_all.store(false, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

void enable_asymmetric_fence() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (register_membarrier()) g_foreign_side_fences_all.store(true, std::memory_order_relaxed);
  });
}

void OwnerChange::wait_while_frozen(const LiveSpan* s) {
  int spins = 0;
  while (s->frozen.load(std::memory_order_acquire)) wait_turn(spins);
}

FrozenOpenSpans::FrozenOpenSpans(LiveSpan& open_head, std::chrono::milliseconds patience) {
  for (LiveSpan* s = open_head.next; s != &open_head; s = s->next) {
    s->frozen.store(true, std::memory_order_relaxed);
    spans_.push_back({s, false});
  }
  if (spans_.empty()) return;
  foreign_fence();
  const auto deadline = std::chrono::steady_clock::now() + patience;
  int spins = 0;
  for (auto& e : spans_) {
    while (e.span->busy.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      wait_turn(spins);
    }
    e.readable = !e.span->busy.load(std::memory_order_acquire);
  }
}

FrozenOpenSpans::~FrozenOpenSpans() {
  for (const auto& e : spans_) e.span->frozen.store(false, std::memory_order_release);
}

}  // namespace lens::detail
