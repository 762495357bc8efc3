#include "lens/batch_processor.h"

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "clock.h"
#include "live_span.h"

namespace lens {

struct BatchProcessor::State {
  std::shared_ptr<SpanExporter> exporter;
  Resource resource;
  BatchProcessorOptions options;

  mutable std::mutex mu;
  std::condition_variable work_cv;  // wakes the export thread
  std::condition_variable done_cv;  // wakes flush/shutdown waiters
  std::vector<detail::LiveSpan*> ring;
  std::size_t head = 0;  // next to take
  std::size_t size = 0;
  bool accepting = true;
  bool stop = false;
  bool thread_done = false;
  std::uint64_t flush_target = 0;  // flush until `taken` reaches this
  std::uint64_t taken = 0;         // records taken out of the queue
  std::uint64_t handled = 0;       // records whose export call returned
  ProcessorStats stats;

  void run();
  bool flush_wanted() const { return flush_target > taken; }
};

void BatchProcessor::State::run() {
  std::vector<detail::LiveSpan*> batch;
  std::vector<const SpanRecord*> view;
  batch.reserve(options.max_export_batch_size);
  view.reserve(options.max_export_batch_size);
  auto next_export = std::chrono::steady_clock::now() + options.schedule_delay;

  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    work_cv.wait_until(lock, next_export, [&] {
      return stop || size >= options.max_export_batch_size || flush_wanted();
    });
    const auto now = std::chrono::steady_clock::now();
    const bool timer = now >= next_export;
    if (size == 0) {
      if (stop) break;
      if (timer) next_export = now + options.schedule_delay;
      continue;
    }
    if (!(stop || timer || flush_wanted() || size >= options.max_export_batch_size)) continue;

    const std::size_t n = std::min<std::size_t>(size, options.max_export_batch_size);
    batch.clear();
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(ring[head]);
      head = (head + 1) % ring.size();
    }
    size -= n;
    taken += n;
    if (size < options.max_export_batch_size) next_export = now + options.schedule_delay;
    lock.unlock();

    detail::refresh_clock_offset();
    view.assign(batch.begin(), batch.end());
    ExportResult result = ExportResult::kFailure;
    try {
      result = exporter->export_spans(resource, view);
    } catch (...) {
      // Exporters must not throw; if one does, the batch counts as failed.
    }
    detail::release_records(batch.data(), batch.size());

    lock.lock();
    handled += n;
    if (result == ExportResult::kSuccess)
      stats.exported += n;
    else
      stats.export_failed += n;
    done_cv.notify_all();
  }
  thread_done = true;
  done_cv.notify_all();
}

BatchProcessor::BatchProcessor(std::shared_ptr<SpanExporter> exporter, Resource resource,
                               BatchProcessorOptions options)
    : options_(options), state_(std::make_shared<State>()) {
  if (options_.max_queue_size == 0) options_.max_queue_size = 1;
  if (options_.max_export_batch_size == 0 ||
      options_.max_export_batch_size > options_.max_queue_size)
    options_.max_export_batch_size = options_.max_queue_size;
  state_->exporter = std::move(exporter);
  state_->resource = std::move(resource);
  state_->options = options_;
  state_->ring.assign(options_.max_queue_size, nullptr);
  // The thread owns a reference to the state, so it may outlive us if an
  // exporter hangs past the shutdown timeout.
  std::thread([state = state_] { state->run(); }).detach();
}

BatchProcessor::~BatchProcessor() { shutdown(options_.export_timeout); }

bool BatchProcessor::enqueue(detail::LiveSpan* span) noexcept {
  State& s = *state_;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.accepting || s.size == s.ring.size()) {
      ++s.stats.dropped_queue_full;
    } else {
      s.ring[(s.head + s.size) % s.ring.size()] = span;
      ++s.size;
      ++s.stats.queued;
      wake = s.size == s.options.max_export_batch_size;
      span = nullptr;
    }
  }
  if (wake) s.work_cv.notify_one();
  if (span != nullptr) {
    detail::release_record(span);
    return false;
  }
  return true;
}

bool BatchProcessor::force_flush(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  const std::uint64_t target = s.taken + s.size;
  s.flush_target = std::max(s.flush_target, target);
  s.work_cv.notify_one();
  bool done = s.done_cv.wait_for(lock, timeout, [&] { return s.handled >= target || s.thread_done; });
  lock.unlock();
  return done && s.exporter->force_flush(timeout);
}

bool BatchProcessor::shutdown(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.stop) return s.thread_done;
  s.accepting = false;
  s.stop = true;
  s.work_cv.notify_one();
  bool done = s.done_cv.wait_for(lock, timeout, [&] { return s.thread_done; });
  if (!done) {
    // The exporter is stuck. What is still queued will not go out in time.
    s.stats.dropped_at_shutdown += s.size;
    return false;
  }
  lock.unlock();
  s.exporter->shutdown(timeout);
  return true;
}

ProcessorStats BatchProcessor::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

}  // namespace lens
