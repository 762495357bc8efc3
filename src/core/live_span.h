// LiveSpan: a span record while it is open, plus the bookkeeping lens needs
// around it. Internal header.
//
// Records are recycled through a process-wide pool (record_pool.cc) so that a
// span in steady state allocates nothing: vectors keep their capacity.
#pragma once

#include <cstdint>

#include "lens/span_record.h"

namespace lens::detail {

class TelemetryCore;

struct LiveSpan : SpanRecord {
  // The telemetry this span reports to; null once that telemetry has shut
  // down and ended the span itself (the handle then only frees the record).
  // Guarded by open_spans_lock().
  TelemetryCore* core = nullptr;
  // Intrusive list of the core's open spans, guarded by open_spans_lock().
  LiveSpan* prev = nullptr;
  LiveSpan* next = nullptr;
  // Monotonic clock at start: end and event times are start + elapsed.
  std::int64_t start_steady_ns = 0;
  // The test aid's drift of the span's clock (span_clock.h), 0 unless set.
  double clock_drift = 0;
  // Attributes of earlier uses of this record, kept so their strings' heap
  // buffers are reused instead of freed and allocated again.
  Attributes spare_attributes;

  // An attribute slot for a new key, reusing a spare one when there is one.
  Attribute& new_attribute() {
    if (spare_attributes.empty()) return attributes.emplace_back();
    Attribute& a = attributes.emplace_back(std::move(spare_attributes.back()));
    spare_attributes.pop_back();
    return a;
  }

  // Clears the record for reuse, keeping container capacity.
  void reset();
};

// Keeps the first `limit` attributes and counts the rest as dropped.
inline void limit_attributes(Attributes& attributes, std::uint32_t limit, std::uint32_t& dropped) {
  if (attributes.size() > limit) {
    dropped += static_cast<std::uint32_t>(attributes.size() - limit);
    attributes.resize(limit);
  }
}

class SpinLock;
// The global pool's lock (fork_safety.cc holds it across fork()).
SpinLock& record_pool_lock();

// Takes a cleared record from this thread's cache or the global pool.
LiveSpan* acquire_record();
// Returns records to the pool (freed if the pool is full).
void release_record(LiveSpan* span);
void release_records(LiveSpan* const* spans, std::size_t count);

}  // namespace lens::detail
