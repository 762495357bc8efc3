#include "fork_safety.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "live_span.h"
#include "spin_lock.h"
#include "telemetry_core.h"

namespace lens::detail {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<ForkParticipant> participants;
};

// Never destroyed: processors may unregister during static destruction.
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

// The span path takes open_spans_lock, then the record pool's or a queue's;
// nothing takes open_spans_lock while holding one of those.
void prepare() {
  Registry& r = registry();
  r.mu.lock();
  open_spans_lock().lock();
  record_pool_lock().lock();
  for (const auto& p : r.participants) p.queue_lock->lock();
}

void release() {
  Registry& r = registry();
  for (auto it = r.participants.rbegin(); it != r.participants.rend(); ++it)
    it->queue_lock->unlock();
  record_pool_lock().unlock();
  open_spans_lock().unlock();
  r.mu.unlock();
}

void in_child() {
  // Only this thread exists here, and it holds every lock.
  for (const auto& p : registry().participants) p.on_child(p.self);
  release();
}

}  // namespace

void install_fork_handlers() {
  static const bool installed = [] {
    pthread_atfork(&prepare, &release, &in_child);
    return true;
  }();
  static_cast<void>(installed);
}

void register_fork_participant(const ForkParticipant& p) {
  install_fork_handlers();
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().participants.push_back(p);
}

void unregister_fork_participant(void* self) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto& v = registry().participants;
  v.erase(
      std::remove_if(v.begin(), v.end(), [&](const ForkParticipant& p) { return p.self == self; }),
      v.end());
}

}  // namespace lens::detail
