// Resolver: device-timed work resolved off the training thread
// (resolver.h).
#include "resolver.h"

#include <time.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace lens::device {

Resolver::Resolver(const CudaRuntime& runtime, DeviceClock& clock, EventPool& pool,
                   std::size_t max_pending, std::chrono::microseconds poll_every,
                   std::optional<Anchoring> anchoring)
    : runtime_(runtime),
      clock_(clock),
      pool_(pool),
      max_pending_(max_pending),
      poll_every_(poll_every),
      anchoring_(anchoring),
      thread_([this] { run(); }) {}

Resolver::~Resolver() { shutdown(std::chrono::milliseconds(0)); }

bool Resolver::submit(Event start, Event end, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && pending_.size() + polling_ < max_pending_) {
      pending_.push_back({start, end, std::move(done)});
      ++stats_.submitted;
      stats_.pending_high_water = std::max(stats_.pending_high_water, pending_.size() + polling_);
      // Only a resolver asleep for good needs waking: one that polls finds
      // the pair at its next poll (a notify is a system call).
      if (asleep_) wake_.notify_one();
      return true;
    }
    ++stats_.refused;
  }
  pool_.release(start);
  pool_.release(end);
  return false;
}

void Resolver::shutdown(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {  // the first call sets the deadline; later ones only wait
      stopping_ = true;
      deadline_ = std::chrono::steady_clock::now() + timeout;
    }
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

Resolver::Stats Resolver::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Resolver::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stopping_ && (pending_.empty() || std::chrono::steady_clock::now() >= deadline_)) break;
    if (pending_.empty()) {
      // Nothing pending: keep polling for one more interval (spans come in
      // streams), then sleep until a submit wakes it.
      wake_.wait_for(lock, poll_every_, [&] { return stopping_ || !pending_.empty(); });
      if (!stopping_ && pending_.empty()) {
        asleep_ = true;
        wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        asleep_ = false;
      }
      continue;
    }
    lock.unlock();
    anchor_if_due();
    const bool progressed = resolve_completed();
    note_cpu();
    lock.lock();
    if (!progressed) wake_.wait_for(lock, poll_every_);
  }
  std::vector<Pending> rest(std::make_move_iterator(pending_.begin()),
                            std::make_move_iterator(pending_.end()));
  pending_.clear();
  lock.unlock();
  hand_on(rest, false);
  if (anchor_stream_made_) runtime_.destroy_stream(anchor_stream_);
  note_cpu();
}

void Resolver::anchor_if_due() {
  if (!anchoring_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_anchor_) return;  // the first call finds it in the past
  next_anchor_ = now + anchoring_->every;
  bool ok = true;
  if (!anchor_stream_made_) {
    ok = runtime_.set_device(anchoring_->device) == kSuccess &&
         runtime_.create_stream(&anchor_stream_) == kSuccess;
    anchor_stream_made_ = ok;
  }
  ok = ok && clock_.anchor(anchor_stream_);
  if (!ok) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.anchor_failures;
  }
}

void Resolver::note_cpu() {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.cpu_ns = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool Resolver::resolve_completed() {
  // The runtime is queried outside the mutex, so a submit never waits for
  // the polling: the pairs being polled are taken out and counted.
  std::deque<Pending> polling;
  {
    std::lock_guard<std::mutex> lock(mu_);
    polling.swap(pending_);
    polling_ = polling.size();
  }
  std::vector<Pending> ready;
  std::vector<Pending> waiting;
  for (Pending& p : polling)
    (runtime_.query(p.end) == kSuccess ? ready : waiting).push_back(std::move(p));
  {
    // The pairs still waiting keep their place ahead of those submitted
    // meanwhile.
    std::lock_guard<std::mutex> lock(mu_);
    pending_.insert(pending_.begin(), std::make_move_iterator(waiting.begin()),
                    std::make_move_iterator(waiting.end()));
    polling_ = 0;
  }
  hand_on(ready, true);
  return !ready.empty();
}

void Resolver::hand_on(std::vector<Pending>& batch, bool completed) {
  // One lock for the counts, one for the pool, whatever the batch's size.
  std::vector<Event> used;
  used.reserve(2 * batch.size());
  std::uint64_t resolved = 0;
  for (Pending& p : batch) {
    std::optional<Times> times;
    if (completed)
      if (const auto both = clock_.host_times(p.start, p.end))
        times = Times{both->first, both->second};
    resolved += times ? 1 : 0;
    if (p.done) p.done(times);
    used.push_back(p.start);
    used.push_back(p.end);
  }
  pool_.release_all(used);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.resolved += resolved;
  stats_.unresolved += batch.size() - resolved;
}

}  // namespace lens::device
