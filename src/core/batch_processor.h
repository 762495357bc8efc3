// Internal header of the core part.
//
/// \file
/// BatchProcessor: moves finished spans off the training thread.
///
/// Ending a span puts its record into a bounded queue (a mutex-protected ring;
/// the caller never waits on export). A background thread takes batches out
/// and hands them to the exporter when a batch is full, when the schedule
/// delay has passed, on force_flush, and at shutdown. When the queue is full
/// the span is dropped and counted. Options default to OpenTelemetry's
/// (OTEL_BSP_*): queue 2048, batch 512, delay 5000 ms, export timeout 30000 ms.
/// A delay of 0 means "export as soon as there is work": the thread sleeps
/// until a span is queued, never spinning.
///
/// Thread safety: enqueue, force_flush, stats and shutdown may be called from
/// any thread. Shutdown tells the exporter it has begun
/// (SpanExporter::draining) and exports what is queued. If its timeout
/// expires while the exporter is still busy, the exporter is interrupted
/// (SpanExporter::interrupt: it abandons its request and sends nothing
/// more, spooling what it is handed if it has a spool) and given one more
/// second, in which the thread hands it the rest of the queue; what fails
/// from then on counts as dropped at shutdown. If it is still busy then,
/// the export thread is left to finish on its own (it keeps the exporter,
/// and whatever `keep_alive` holds, alive); the spans it had not taken are
/// taken out of the queue and counted as dropped at shutdown (never
/// exported later), and the batch it is stuck in is counted when its
/// export call returns, if it does.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lens/batch_options.h"
#include "lens/exporter.h"
#include "lens/ids.h"
#include "lens/resource.h"

namespace lens {

namespace detail {
struct LiveSpan;
}

class BatchProcessor {
  struct State;

 public:
  /// A wake-up of the export thread that enqueue found due, to be run once
  /// the caller has released its own locks (it takes a mutex and notifies).
  /// Empty when none is due.
  class PendingWake {
   public:
    PendingWake() = default;
    explicit PendingWake(std::shared_ptr<State> state) : state_(std::move(state)) {}
    explicit operator bool() const { return state_ != nullptr; }
    void run() const {
      if (state_) [[unlikely]]
        wake();
    }

   private:
    void wake() const;
    std::shared_ptr<State> state_;
  };

  /// keep_alive: what the queued records point into (e.g. their
  /// instrumentation scopes), kept until the export thread ends.
  BatchProcessor(std::shared_ptr<SpanExporter> exporter, Resource resource,
                 BatchProcessorOptions options, std::shared_ptr<const void> keep_alive = {});
  ~BatchProcessor();
  BatchProcessor(const BatchProcessor&) = delete;
  BatchProcessor& operator=(const BatchProcessor&) = delete;

  /// Takes ownership of a finished record. Never blocks on export. Returns
  /// false (and releases the record) if the queue is full or shut down.
  bool enqueue(detail::LiveSpan* span) noexcept;
  /// The same, but a due wake-up of the export thread is left in `wake` for
  /// the caller to run after releasing its locks (a span's end calls this
  /// under the process-wide open-span lock).
  bool enqueue(detail::LiveSpan* span, PendingWake& wake) noexcept;

  /// Waits until every span queued before the call has been exported (or
  /// failed). Returns false on timeout.
  bool force_flush(std::chrono::milliseconds timeout);

  /// Exports what is queued within the timeout, then shuts the exporter down.
  /// Idempotent. Returns false if the timeout expired first.
  bool shutdown(std::chrono::milliseconds timeout);

  ProcessorStats stats() const;

  // Tail selection (StepHoldOptions; no-ops without a hold): the spans of
  // `step`'s trace wait in the hold from now on, until settle_steps keeps
  // them (exported) or not (released, counted not_selected).
  void hold_step(std::uint64_t step, const TraceId& trace);
  void settle_steps(const std::vector<std::uint64_t>& keep, const std::vector<std::uint64_t>& drop);
  std::optional<StepHoldStats> hold_stats() const;
  /// True in the child of a fork() made after this processor started: it
  /// has no export thread there and records nothing (fork_safety.h).
  bool in_forked_child() const;
  const BatchProcessorOptions& options() const { return options_; }

 private:
  BatchProcessorOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace lens
