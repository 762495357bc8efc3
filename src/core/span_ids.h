// Each thread's id generator, inline for the span start's hot path
// (ids.cc holds its state and seeding; IdGenerator in lens/ids.h is the
// public way to it). Internal header.
//
// The generator is wyrand (Wang Yi's): a Weyl sequence (the state advanced
// by an odd constant, so no state repeats within 2^64 draws) mixed by one
// 64x64->128-bit multiply; it passes BigCrush and PractRand, and costs ~7
// instructions a word (xoshiro256** took ~35 with its state and checks).
// The state is seeded from getrandom(2), so ids do not depend on any
// seeding the application does, and reseeded in a forked child. It is
// trivially destructible and constant-initialised: a thread reaches it
// without a guard, and `generation` 0 (never seeded) differs from every
// fork generation, so a thread's first draw seeds it as a forked child's
// reseeds it.
//
// Thread safety: each thread draws from its own state.
#pragma once

#include <atomic>
#include <cstdint>

#include "lens/span_context.h"

namespace lens::detail {

// A 128-bit product (a GCC and Clang extension, one instruction on x86-64).
__extension__ using Wide = unsigned __int128;

struct IdState {
  std::uint64_t state = 0;
  std::uint64_t generation = 0;

  std::uint64_t next() {
    state += 0xa0761d6478bd642fULL;
    const Wide product = static_cast<Wide>(state) * (state ^ 0xe7037ed1a0b428dbULL);
    return static_cast<std::uint64_t>(product >> 64) ^ static_cast<std::uint64_t>(product);
  }
  std::uint64_t nonzero() {
    std::uint64_t word = next();
    while (word == 0) [[unlikely]] word = next();
    return word;
  }
  // A trace id's low word and a span id are never zero, so neither id is
  // ever invalid.
  TraceId trace_id() {
    const std::uint64_t high = next();
    return TraceId::from_words(high, nonzero());
  }
  SpanId span_id() { return SpanId::from_word(nonzero()); }
};

// Bumped in every forked child (a pthread_atfork handler), so that each
// thread's generator notices the fork on its next draw and reseeds instead
// of repeating the parent's sequence.
extern constinit std::atomic<std::uint64_t> g_fork_generation;
extern constinit thread_local IdState t_ids;

// Seeds this thread's state for this process.
void seed_thread_ids();

inline IdState& thread_ids() {
  if (t_ids.generation != g_fork_generation.load(std::memory_order_relaxed)) [[unlikely]]
    seed_thread_ids();
  return t_ids;
}

// Sets context.span_id to a new id, and context.trace_id too when
// new_trace (a root span): one fork check for both.
inline void new_span_ids(SpanContext& context, bool new_trace) {
  IdState& ids = thread_ids();
  if (new_trace) context.trace_id = ids.trace_id();
  context.span_id = ids.span_id();
}

}  // namespace lens::detail
