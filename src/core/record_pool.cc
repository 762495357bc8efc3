// A process-wide pool of span records. Each thread keeps a small cache so the
// common start/end path takes no lock; the cache refills from, and spills
// to, the global free list in batches.
#include <algorithm>
#include <mutex>
#include <vector>

#include "live_span.h"
#include "spin_lock.h"

namespace lens::detail {
namespace {

constexpr std::size_t kThreadCacheBatch = 64;
constexpr std::size_t kGlobalPoolLimit = 16384;

struct GlobalPool {
  SpinLock mu;
  std::vector<LiveSpan*> free;
};

// Never destroyed: threads may return records during static destruction.
GlobalPool& global_pool() {
  static auto* pool = new GlobalPool;
  return *pool;
}

void release_to_global(LiveSpan* const* spans, std::size_t count) {
  auto& pool = global_pool();
  std::size_t kept = 0;
  {
    std::lock_guard<SpinLock> lock(pool.mu);
    while (kept < count && pool.free.size() < kGlobalPoolLimit) pool.free.push_back(spans[kept++]);
  }
  for (std::size_t i = kept; i < count; ++i) delete spans[i];
}

// A thread's cache: trivially destructible and constant-initialised, so
// that a thread reaches it without a guard.
struct ThreadCache {
  LiveSpan* spans[kThreadCacheBatch] = {};
  std::size_t count = 0;
};
constinit thread_local ThreadCache t_cache;

// Hands a thread's cached records back to the global pool when the thread
// exits; made by the thread's first refill (which registers its exit).
struct CacheReturn {
  ~CacheReturn() {
    release_to_global(t_cache.spans, t_cache.count);
    t_cache.count = 0;
  }
};

[[gnu::noinline]] void refill(ThreadCache& cache) {
  thread_local CacheReturn at_exit;
  (void)at_exit;
  auto& pool = global_pool();
  std::lock_guard<SpinLock> lock(pool.mu);
  const std::size_t take = std::min(kThreadCacheBatch, pool.free.size());
  std::copy(pool.free.end() - static_cast<std::ptrdiff_t>(take), pool.free.end(), cache.spans);
  pool.free.resize(pool.free.size() - take);
  cache.count = take;
}

// Clears a pooled record for reuse, keeping container capacity. (Inline in
// acquire_record, its one caller.)
[[gnu::always_inline]] inline void clear_for_reuse(LiveSpan& s) {
  // Each field start_recording does not always set; what a span rarely
  // uses (tracestate, events, links, a status message) cleared only when
  // it holds something.
  if (!s.context.tracestate.empty()) s.context.tracestate.clear();
  s.context.remote = false;
  s.parent_span_id = SpanId();
  s.parent_remote = false;
  // name is kept: start_recording sets it, and keeps it when it is the same.
  s.attributes_used = 0;  // the slots stay, to be reused in place
  s.dropped_attributes_count = 0;
  if (!s.events.empty()) s.events.clear();
  s.dropped_events_count = 0;
  if (!s.links.empty()) s.links.clear();
  s.dropped_links_count = 0;
  s.status_code = StatusCode::kUnset;
  if (!s.status_message.empty()) s.status_message.clear();
  s.core = nullptr;
  s.prev = s.next = nullptr;
  s.device = {};
  s.figure = StepFigure::kNone;
}

}  // namespace

SpinLock& record_pool_lock() { return global_pool().mu; }

LiveSpan* acquire_record() {
  ThreadCache& cache = t_cache;
  if (cache.count == 0) [[unlikely]] {
    refill(cache);
    if (cache.count == 0) return new LiveSpan;
  }
  LiveSpan* span = cache.spans[--cache.count];
  // Cleared here, on the thread that will fill it, rather than on the export
  // thread that returned it: the exporter then only reads records, and the
  // cache lines it shares with this thread are never left modified on its core.
  clear_for_reuse(*span);
  return span;
}

void release_record(LiveSpan* span) { release_records(&span, 1); }

void release_records(LiveSpan* const* spans, std::size_t count) { release_to_global(spans, count); }

}  // namespace lens::detail
