// LiveSpan: a span record while it is open, plus the bookkeeping lens needs
// around it. Internal header.
//
// Records are recycled through a process-wide pool (record_pool.cc) so that a
// span in steady state allocates nothing: vectors keep their capacity.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "lens/span_record.h"
#include "lens/step_figures.h"

namespace lens::detail {

class TelemetryCore;
class DeviceEvents;

// A span timed on a device (device_timing.h): its stream and events, and
// who gives the events back. All null for a span timed on the host.
struct DeviceMarks {
  DeviceEvents* events = nullptr;
  void* stream = nullptr;
  void* start = nullptr;
  void* end = nullptr;
};

struct LiveSpan : SpanRecord {
  // A record's name holds at least this many bytes (its buffer is never
  // shrunk: names are assigned, never moved in), so that the end of a span
  // copies the failure record's "last ended" name as a fixed-size block.
  static constexpr std::size_t kNameCapacity = 48;
  LiveSpan() { name.reserve(kNameCapacity); }

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
  DeviceMarks device;
  // The step figure its duration goes to when it ends (step_figures.h);
  // kNone when step figures were off at its start.
  StepFigure figure = StepFigure::kNone;
  // attributes[0, attributes_used) are the span's; the slots past them are
  // attributes of an earlier use of this record, kept in place so that a
  // new attribute reuses their strings' heap buffers without moving them
  // (settle_attributes() puts them aside before anyone reads the record).
  std::uint32_t attributes_used = 0;
  // Slots put aside by settle_attributes, for the attributes of a later use.
  Attributes spare_attributes;
  // links[0, links_used) are the span's; the slots past them are links of
  // an earlier use of this record, reused in place by a new link (a call
  // site's spans mostly reuse the records it released, with as many
  // links), and dropped by settle_links() before anyone reads the record.
  std::uint32_t links_used = 0;
  // The handshake that lets another thread read the open record while its
  // owner may be changing it (open_span_access.h).
  std::atomic<bool> busy{false};    // the owner is changing the record
  std::atomic<bool> frozen{false};  // another thread holds the record

  // An attribute slot for a new key: a kept slot reused in place, else a
  // spare one, else a new one. Its key and value are the caller's to set.
  Attribute& new_attribute() {
    if (attributes_used < attributes.size()) return attributes[attributes_used++];
    ++attributes_used;
    if (spare_attributes.empty()) return attributes.emplace_back();
    Attribute& a = attributes.emplace_back(std::move(spare_attributes.back()));
    spare_attributes.pop_back();
    return a;
  }
  // The span's own attributes (the first attributes_used).
  std::span<Attribute> used_attributes() { return {attributes.data(), attributes_used}; }
  // Makes `attributes` hold exactly the span's own attributes, the kept
  // slots past them set aside: done when the span ends, before the record
  // is handed on or copied. (The test compares pointers: most records have
  // nothing to set aside, and a size would be a division.)
  // Inline, the loop out of line.
  void settle_attributes() {
    if (attributes.data() + attributes_used != attributes.data() + attributes.size()) [[unlikely]]
      set_aside_kept_slots();
  }
  // Makes `links` hold exactly the span's own links (the test compares
  // pointers, as settle_attributes does).
  void settle_links() {
    if (links.data() + links_used != links.data() + links.size()) [[unlikely]]
      drop_kept_links();
  }
  [[gnu::noinline]] void drop_kept_links() { links.resize(links_used); }
  [[gnu::noinline]] void set_aside_kept_slots() {
    while (attributes.data() + attributes_used != attributes.data() + attributes.size()) {
      spare_attributes.push_back(std::move(attributes.back()));
      attributes.pop_back();
    }
  }
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

// A thread's cache of pooled records (record_pool.cc keeps the global pool
// and refills it): trivially destructible and constant-initialised, so that
// a thread reaches it without a guard, and the common start takes a record
// inline, without a call or a lock.
struct RecordCache {
  static constexpr std::size_t kBatch = 64;
  LiveSpan* spans[kBatch] = {};
  std::size_t count = 0;
};
extern constinit thread_local RecordCache t_record_cache;

// Refills this thread's cache from the global pool and takes a cleared
// record from it, or a new one when the pool is empty.
LiveSpan* acquire_record_after_refill();

// Clears a pooled record for reuse, keeping container capacity. Done on the
// thread that will fill it, rather than on the export thread that returned
// it: the exporter then only reads records, and the cache lines it shares
// with this thread are never left modified on its core.
[[gnu::always_inline]] inline void clear_for_reuse(LiveSpan& s) {
  // Each field a span's start does not always set; what a span rarely uses
  // (tracestate, events, a status message) cleared only when it holds
  // something.
  if (!s.context.tracestate.empty()) s.context.tracestate.clear();
  s.context.remote = false;
  s.parent_span_id = SpanId();
  s.parent_remote = false;
  // name is kept: the start sets it, and keeps it when it is the same.
  s.attributes_used = 0;  // the slots stay, to be reused in place
  s.dropped_attributes_count = 0;
  if (!s.events.empty()) s.events.clear();
  s.dropped_events_count = 0;
  s.links_used = 0;  // the slots stay, to be reused in place
  s.dropped_links_count = 0;
  s.status_code = StatusCode::kUnset;
  if (!s.status_message.empty()) s.status_message.clear();
  s.core = nullptr;
  s.prev = s.next = nullptr;
  s.device = {};
  s.figure = StepFigure::kNone;
}

// Takes a cleared record from this thread's cache or the global pool.
[[gnu::always_inline]] inline LiveSpan* acquire_record() {
  RecordCache& cache = t_record_cache;
  if (cache.count == 0) [[unlikely]]
    return acquire_record_after_refill();
  LiveSpan* span = cache.spans[--cache.count];
  clear_for_reuse(*span);
  return span;
}
// Returns records to the pool (freed if the pool is full).
void release_record(LiveSpan* span);
void release_records(LiveSpan* const* spans, std::size_t count);

}  // namespace lens::detail
