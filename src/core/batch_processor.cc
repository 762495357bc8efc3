#include "batch_processor.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "fork_safety.h"
#include "live_span.h"
#include "span_clock.h"
#include "spin_lock.h"
#include "step_hold.h"

namespace lens {

// How long a shutdown past its deadline waits for the exporter to abandon
// its request and spool what is left.
constexpr std::chrono::milliseconds kSpoolGrace{1000};

// Two locks: `queue` (a spin lock) guards every field below it and is the
// only lock the span hot path takes; `wait_mu` exists for the condition
// variables. Whoever changes a field that a waiter's predicate reads takes
// wait_mu before notifying, so no wake-up is lost; producers do so only when
// the queue reaches a full batch.
struct BatchProcessor::State {
  std::shared_ptr<SpanExporter> exporter;
  std::shared_ptr<const void> keep_alive;
  Resource resource;
  BatchProcessorOptions options;

  std::mutex wait_mu;
  std::condition_variable work_cv;  // wakes the export thread
  std::condition_variable done_cv;  // wakes flush/shutdown waiters

  mutable detail::SpinLock queue;
  std::vector<detail::LiveSpan*> ring;
  std::size_t head = 0;  // next to take
  std::size_t size = 0;
  bool accepting = true;
  bool forked_child = false;  // a fork's child: no export thread here
  bool stop = false;
  bool thread_done = false;
  bool past_deadline = false;      // shutdown ran out of time: failures are drops at shutdown
  std::uint64_t flush_target = 0;  // flush until `taken` reaches this
  std::uint64_t taken = 0;         // records taken out of the queue
  std::uint64_t handled = 0;       // records whose export call returned
  ProcessorStats stats;
  // Tail selection (null when off): parked spans count as handled; a
  // settlement wakes the thread to export or release them.
  std::unique_ptr<detail::StepHold> hold;
  bool settled = false;
  std::uint64_t settles = 0;       // settlements asked for
  std::uint64_t settles_done = 0;  // of those, exported or released (a flush waits for them)

  template <typename F>
  auto locked(F&& f) const {
    std::lock_guard<detail::SpinLock> lock(queue);
    return f();
  }
  void wake(std::condition_variable& cv) {
    { std::lock_guard<std::mutex> lock(wait_mu); }
    cv.notify_all();
  }
  bool work_ready() const {
    return stop || settled || size >= options.max_export_batch_size || flush_target > taken ||
           (size > 0 && options.schedule_delay.count() == 0);
  }
  // Hands `spans` to the exporter, a batch at a time, counts the outcome
  // and releases the records.
  void export_all(std::vector<detail::LiveSpan*>& spans, std::vector<const SpanRecord*>& view);
  void run();
};

void BatchProcessor::State::export_all(std::vector<detail::LiveSpan*>& spans,
                                       std::vector<const SpanRecord*>& view) {
  for (std::size_t from = 0; from < spans.size(); from += options.max_export_batch_size) {
    const std::size_t n = std::min<std::size_t>(options.max_export_batch_size, spans.size() - from);
    detail::refresh_clock_offset();
    view.assign(spans.begin() + static_cast<std::ptrdiff_t>(from),
                spans.begin() + static_cast<std::ptrdiff_t>(from + n));
    ExportResult result = ExportResult::kFailure;
    try {
      result = exporter->export_spans(resource, view);
    } catch (...) {
      // Exporters must not throw; if one does, the batch counts as failed.
    }
    detail::release_records(spans.data() + from, n);
    locked([&] {
      switch (result) {
        case ExportResult::kSuccess:
          stats.exported += n;
          break;
        case ExportResult::kSpooled:
          stats.spooled += n;
          break;
        case ExportResult::kFailure:
          (past_deadline ? stats.dropped_at_shutdown : stats.export_failed) += n;
          break;
      }
      return 0;
    });
  }
  spans.clear();
}

void BatchProcessor::State::run() {
  std::vector<detail::LiveSpan*> batch;
  std::vector<detail::LiveSpan*> out;      // to export: the batch, less what the hold keeps
  std::vector<detail::LiveSpan*> release;  // not selected, or no room in the hold
  std::vector<const SpanRecord*> view;
  batch.reserve(options.max_export_batch_size);
  view.reserve(options.max_export_batch_size);
  auto next_export = std::chrono::steady_clock::now() + options.schedule_delay;

  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wait_mu);
      const auto ready = [&] { return locked([&] { return work_ready(); }); };
      if (options.schedule_delay.count() == 0)
        work_cv.wait(lock, ready);  // no timer: sleep until there is work
      else
        work_cv.wait_until(lock, next_export, ready);
    }
    const auto now = std::chrono::steady_clock::now();
    const bool timer = now >= next_export;
    batch.clear();
    bool finished = false;
    bool settle = false;
    std::uint64_t settles_seen = 0;
    {
      std::lock_guard<detail::SpinLock> lock(queue);
      if (size == 0) {
        finished = stop;
      } else if (timer || work_ready()) {
        const std::size_t n = std::min<std::size_t>(size, options.max_export_batch_size);
        for (std::size_t i = 0; i < n; ++i) {
          batch.push_back(ring[head]);
          if (++head == ring.size()) head = 0;
        }
        size -= n;
        taken += n;
      }
      settle = std::exchange(settled, false);
      settles_seen = settles;
      if (timer || size < options.max_export_batch_size) next_export = now + options.schedule_delay;
    }
    const std::size_t taken_now = batch.size();
    if (!hold) {
      out.swap(batch);
    } else {
      const detail::StepHold::Sorted sorted = hold->sort(batch, out, release);
      std::uint64_t not_selected = sorted.not_selected;
      if (settle || finished) not_selected += hold->collect_settled(out, release);
      if (finished) hold->release_undecided(out);
      detail::release_records(release.data(), release.size());
      release.clear();
      locked([&] {
        stats.not_selected += not_selected;
        stats.dropped_hold_full += sorted.no_room;
        return 0;
      });
    }
    if (!out.empty()) export_all(out, view);
    if (taken_now > 0 || settle) {
      locked([&] {
        settles_done = std::max(settles_done, settles_seen);
        return handled += taken_now;
      });
      wake(done_cv);
    }
    if (finished) break;
  }
  locked([&] { return thread_done = true; });
  wake(done_cv);
}

BatchProcessor::BatchProcessor(std::shared_ptr<SpanExporter> exporter, Resource resource,
                               BatchProcessorOptions options,
                               std::shared_ptr<const void> keep_alive)
    : options_(options), state_(std::make_shared<State>()) {
  state_->keep_alive = std::move(keep_alive);
  if (options_.max_queue_size == 0) options_.max_queue_size = 1;
  if (options_.max_export_batch_size == 0 ||
      options_.max_export_batch_size > options_.max_queue_size)
    options_.max_export_batch_size = options_.max_queue_size;
  state_->exporter = std::move(exporter);
  state_->resource = std::move(resource);
  state_->options = options_;
  state_->ring.assign(options_.max_queue_size, nullptr);
  if (options_.hold.max_steps > 0) state_->hold = std::make_unique<detail::StepHold>(options_.hold);
  // The thread owns a reference to the state, so it may outlive us if an
  // exporter hangs past the shutdown timeout.
  std::thread([state = state_] { state->run(); }).detach();
  detail::register_fork_participant({&state_->queue,
                                     [](void* self) {
                                       // Held: the queue lock (fork_safety.h).
                                       auto* s = static_cast<State*>(self);
                                       s->forked_child = true;
                                       s->accepting = false;
                                       s->stats.dropped_in_forked_child += s->size;
                                       s->size = 0;
                                     },
                                     state_.get()});
}

BatchProcessor::~BatchProcessor() {
  shutdown(options_.export_timeout);
  detail::unregister_fork_participant(state_.get());
}

void BatchProcessor::PendingWake::wake() const { state_->wake(state_->work_cv); }

bool BatchProcessor::enqueue(detail::LiveSpan* span) noexcept {
  PendingWake wake;
  const bool accepted = enqueue(span, wake);
  wake.run();
  return accepted;
}

bool BatchProcessor::enqueue(detail::LiveSpan* span, PendingWake& pending) noexcept {
  State& s = *state_;
  bool accepted = false;
  bool wake = false;
  {
    std::lock_guard<detail::SpinLock> lock(s.queue);
    if (s.accepting && s.size < s.ring.size()) {
      std::size_t at = s.head + s.size;  // no division on the hot path
      if (at >= s.ring.size()) at -= s.ring.size();
      s.ring[at] = span;
      const std::size_t size = ++s.size;
      ++s.stats.queued;
      if (size > s.stats.queue_high_water) s.stats.queue_high_water = size;
      accepted = true;
      // A full batch; or, with no schedule delay, the first span of an empty
      // queue (the thread then sleeps until there is work).
      wake = size == s.options.max_export_batch_size ||
             (size == 1 && s.options.schedule_delay.count() == 0);
    } else if (s.forked_child) {
      ++s.stats.dropped_in_forked_child;
    } else {
      ++s.stats.dropped_queue_full;
    }
  }
  if (wake) pending = PendingWake(state_);
  if (!accepted) detail::release_record(span);
  return accepted;
}

bool BatchProcessor::force_flush(std::chrono::milliseconds timeout) {
  State& s = *state_;
  if (in_forked_child()) return false;  // no export thread here
  std::uint64_t settles = 0;            // and the settlements asked for so far
  const std::uint64_t target = s.locked([&] {
    const std::uint64_t t = s.taken + s.size;
    s.flush_target = std::max(s.flush_target, t);
    settles = s.settles;
    return t;
  });
  s.wake(s.work_cv);
  bool done;
  {
    std::unique_lock<std::mutex> lock(s.wait_mu);
    done = s.done_cv.wait_for(lock, timeout, [&] {
      return s.locked(
          [&] { return (s.handled >= target && s.settles_done >= settles) || s.thread_done; });
    });
  }
  return done && s.exporter->force_flush(timeout);
}

bool BatchProcessor::shutdown(std::chrono::milliseconds timeout) {
  State& s = *state_;
  // In a fork's child nothing waits for the export thread, which is the
  // parent's: the child's shutdown is immediate (and its exporter, which
  // shares the parent's descriptors, is left as it is).
  if (in_forked_child()) return true;
  const bool already = s.locked([&] {
    const bool was = s.stop;
    s.accepting = false;
    s.stop = true;
    return was;
  });
  if (already) return s.locked([&] { return s.thread_done; });
  s.exporter->draining();
  s.wake(s.work_cv);
  auto thread_done = [&](std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(s.wait_mu);
    return s.done_cv.wait_for(lock, wait, [&] { return s.locked([&] { return s.thread_done; }); });
  };
  bool done = thread_done(timeout);
  if (!done) {
    // Out of time: the exporter abandons the request it waits on and sends
    // nothing more; it spools what is left if it has a spool (the thread
    // hands it the rest of the queue, at disk speed), else those spans are
    // dropped at shutdown. It is given a moment for that.
    s.locked([&] { return s.past_deadline = true; });
    s.exporter->interrupt();
    done = thread_done(kSpoolGrace);
  }
  if (!done) {
    // The exporter is stuck. What is still queued will not go out in time:
    // it is taken out of the queue and counted as dropped, so that the
    // thread, if the exporter ever returns, does not export it after all.
    std::vector<detail::LiveSpan*> left;
    s.locked([&] {
      for (; s.size > 0; --s.size) {
        left.push_back(s.ring[s.head]);
        s.head = (s.head + 1) % s.ring.size();
      }
      s.stats.dropped_at_shutdown += left.size();
      return 0;
    });
    detail::release_records(left.data(), left.size());
    return false;
  }
  s.exporter->shutdown(timeout);
  return true;
}

bool BatchProcessor::in_forked_child() const {
  return state_->locked([&] { return state_->forked_child; });
}

ProcessorStats BatchProcessor::stats() const {
  return state_->locked([&] { return state_->stats; });
}

void BatchProcessor::hold_step(std::uint64_t step, const TraceId& trace) {
  if (state_->hold) state_->hold->hold(step, trace);
}

void BatchProcessor::settle_steps(const std::vector<std::uint64_t>& keep,
                                  const std::vector<std::uint64_t>& drop) {
  State& s = *state_;
  if (!s.hold) return;
  s.hold->settle(keep, drop);
  s.locked([&] {
    ++s.settles;
    return s.settled = true;
  });
  s.wake(s.work_cv);
}

std::optional<StepHoldStats> BatchProcessor::hold_stats() const {
  if (!state_->hold) return std::nullopt;
  return state_->hold->stats();
}

}  // namespace lens
