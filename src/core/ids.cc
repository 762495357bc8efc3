#include "lens/ids.h"

#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "hex.h"
#include "splitmix.h"

namespace lens {

TraceId TraceId::from_words(std::uint64_t high, std::uint64_t low) {
  // Big-endian, as the id is written in hex: high word first.
  const std::uint64_t words[2] = {__builtin_bswap64(high), __builtin_bswap64(low)};
  std::array<std::uint8_t, kSize> b;
  std::memcpy(b.data(), words, kSize);
  return TraceId(b);
}

std::optional<TraceId> TraceId::from_hex(std::string_view hex) {
  std::array<std::uint8_t, kSize> b{};
  if (!detail::decode_lower_hex(hex, b.data(), b.size())) return std::nullopt;
  return TraceId(b);
}

bool TraceId::valid() const {
  std::uint64_t words[2];
  std::memcpy(words, bytes_.data(), kSize);
  return (words[0] | words[1]) != 0;
}

void TraceId::write_hex(char* out) const { detail::encode_lower_hex(bytes_.data(), kSize, out); }

std::string TraceId::to_hex() const {
  std::string s(2 * kSize, '0');
  write_hex(s.data());
  return s;
}

SpanId SpanId::from_word(std::uint64_t word) {
  const std::uint64_t big_endian = __builtin_bswap64(word);
  std::array<std::uint8_t, kSize> b;
  std::memcpy(b.data(), &big_endian, kSize);
  return SpanId(b);
}

std::optional<SpanId> SpanId::from_hex(std::string_view hex) {
  std::array<std::uint8_t, kSize> b{};
  if (!detail::decode_lower_hex(hex, b.data(), b.size())) return std::nullopt;
  return SpanId(b);
}

bool SpanId::valid() const { return to_word() != 0; }

std::uint64_t SpanId::to_word() const {
  std::uint64_t big_endian;
  std::memcpy(&big_endian, bytes_.data(), kSize);
  return __builtin_bswap64(big_endian);
}

void SpanId::write_hex(char* out) const { detail::encode_lower_hex(bytes_.data(), kSize, out); }

std::string SpanId::to_hex() const {
  std::string s(2 * kSize, '0');
  write_hex(s.data());
  return s;
}

namespace {

// Bumped in every forked child, so each thread's generator notices the fork
// on its next call and reseeds instead of repeating the parent's sequence.
std::atomic<std::uint64_t> g_fork_generation{1};

void on_fork_child() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

void register_fork_handler() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, &on_fork_child);
    return true;
  }();
  (void)registered;
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

struct Xoshiro256 {
  std::uint64_t s[4] = {0, 0, 0, 0};
  std::uint64_t generation = 0;

  void seed() {
    std::uint64_t seed_words[4] = {0, 0, 0, 0};
    std::size_t filled = 0;
    auto* out = reinterpret_cast<unsigned char*>(seed_words);
    while (filled < sizeof(seed_words)) {
      ssize_t n = getrandom(out + filled, sizeof(seed_words) - filled, 0);
      if (n <= 0) break;
      filled += static_cast<std::size_t>(n);
    }
    if (filled < sizeof(seed_words)) {
      // getrandom is unavailable: mix what the process can observe, which
      // still differs between processes and threads.
      std::uint64_t x = static_cast<std::uint64_t>(
          std::chrono::high_resolution_clock::now().time_since_epoch().count());
      x ^= static_cast<std::uint64_t>(getpid()) << 32;
      x ^= reinterpret_cast<std::uintptr_t>(this);
      for (auto& w : seed_words) w ^= detail::splitmix64(x);
    }
    // Run the seed through splitmix so the state is never all zero.
    std::uint64_t x =
        seed_words[0] ^ rotl(seed_words[1], 17) ^ rotl(seed_words[2], 31) ^ rotl(seed_words[3], 47);
    for (int i = 0; i < 4; ++i) s[i] = seed_words[i] ^ detail::splitmix64(x);
    generation = g_fork_generation.load(std::memory_order_relaxed);
  }

  std::uint64_t next() {
    if (generation != g_fork_generation.load(std::memory_order_relaxed)) seed();
    const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
};

Xoshiro256& thread_generator() {
  thread_local Xoshiro256 gen = [] {
    register_fork_handler();
    Xoshiro256 g;
    g.seed();
    return g;
  }();
  return gen;
}

}  // namespace

namespace IdGenerator {

std::uint64_t next_u64() { return thread_generator().next(); }

TraceId new_trace_id() {
  auto& gen = thread_generator();
  std::uint64_t high = 0, low = 0;
  while (high == 0 && low == 0) {
    high = gen.next();
    low = gen.next();
  }
  return TraceId::from_words(high, low);
}

SpanId new_span_id() {
  auto& gen = thread_generator();
  std::uint64_t word = 0;
  while (word == 0) word = gen.next();
  return SpanId::from_word(word);
}

}  // namespace IdGenerator
}  // namespace lens
