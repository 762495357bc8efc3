// SpinLock: a test-and-test-and-set lock for critical sections of a few
// dozen instructions on the span hot path, where a futex-based mutex would
// make the training thread sleep in the kernel whenever the export thread
// holds it. Internal header.
#pragma once

#include <atomic>
#include <thread>

namespace lens::detail {

// One turn of a wait for another thread: a pause instruction for the first
// 64 turns (the other thread is likely running, a few instructions from
// done), then a yield of the processor.
inline void wait_turn(int& spins) noexcept {
  if (++spins > 64) {
    std::this_thread::yield();
  } else {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

class SpinLock {
 public:
  void lock() noexcept {
    // The wait is out of line: the uncontended lock, the hot path's case,
    // is one exchange, and the callers keep their registers.
    if (locked_.exchange(true, std::memory_order_acquire)) [[unlikely]]
      lock_contended();
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline, gnu::cold]] void lock_contended() noexcept {
    int spins = 0;
    do {
      while (locked_.load(std::memory_order_relaxed)) wait_turn(spins);
    } while (locked_.exchange(true, std::memory_order_acquire));
  }

  std::atomic<bool> locked_{false};
};

}  // namespace lens::detail
