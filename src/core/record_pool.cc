// A process-wide pool of span records. Each thread keeps a small cache so the
// common start/end path takes no lock; the cache refills from, and spills
// to, the global free list in batches.
#include <algorithm>
#include <mutex>
#include <vector>

#include "live_span.h"
#include "spin_lock.h"

namespace lens::detail {

constinit thread_local RecordCache t_record_cache;

namespace {

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

// Hands a thread's cached records back to the global pool when the thread
// exits; made by the thread's first refill (which registers its exit).
struct CacheReturn {
  ~CacheReturn() {
    release_to_global(t_record_cache.spans, t_record_cache.count);
    t_record_cache.count = 0;
  }
};

void refill(RecordCache& cache) {
  thread_local CacheReturn at_exit;
  (void)at_exit;
  auto& pool = global_pool();
  std::lock_guard<SpinLock> lock(pool.mu);
  const std::size_t take = std::min(RecordCache::kBatch, pool.free.size());
  std::copy(pool.free.end() - static_cast<std::ptrdiff_t>(take), pool.free.end(), cache.spans);
  pool.free.resize(pool.free.size() - take);
  cache.count = take;
}

}  // namespace

SpinLock& record_pool_lock() { return global_pool().mu; }

LiveSpan* acquire_record_after_refill() {
  refill(t_record_cache);
  if (t_record_cache.count == 0) return new LiveSpan;
  return acquire_record();  // from the refilled cache
}

void release_record(LiveSpan* span) { release_records(&span, 1); }

void release_records(LiveSpan* const* spans, std::size_t count) { release_to_global(spans, count); }

}  // namespace lens::detail
