#include "lens/ids.h"

#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "hex.h"
#include "span_ids.h"
#include "splitmix.h"

namespace lens {

std::optional<TraceId> TraceId::from_hex(std::string_view hex) {
  std::array<std::uint8_t, kSize> b{};
  if (!detail::decode_lower_hex(hex, b.data(), b.size())) return std::nullopt;
  return TraceId(b);
}

void TraceId::write_hex(char* out) const { detail::encode_lower_hex(bytes_.data(), kSize, out); }

std::string TraceId::to_hex() const {
  std::string s(2 * kSize, '0');
  write_hex(s.data());
  return s;
}

std::optional<SpanId> SpanId::from_hex(std::string_view hex) {
  std::array<std::uint8_t, kSize> b{};
  if (!detail::decode_lower_hex(hex, b.data(), b.size())) return std::nullopt;
  return SpanId(b);
}

void SpanId::write_hex(char* out) const { detail::encode_lower_hex(bytes_.data(), kSize, out); }

std::string SpanId::to_hex() const {
  std::string s(2 * kSize, '0');
  write_hex(s.data());
  return s;
}

namespace {

void on_fork_child() { detail::g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

void register_fork_handler() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, &on_fork_child);
    return true;
  }();
  (void)registered;
}

}  // namespace

namespace detail {

constinit std::atomic<std::uint64_t> g_fork_generation{1};
constinit thread_local IdState t_ids;

void seed_thread_ids() {
  register_fork_handler();
  std::uint64_t word = 0;
  std::size_t filled = 0;
  auto* out = reinterpret_cast<unsigned char*>(&word);
  while (filled < sizeof word) {
    const ssize_t n = getrandom(out + filled, sizeof word - filled, 0);
    if (n <= 0) break;
    filled += static_cast<std::size_t>(n);
  }
  if (filled < sizeof word) {
    // getrandom is unavailable: mix what the process can observe, which
    // still differs between processes and threads.
    std::uint64_t x = static_cast<std::uint64_t>(
        std::chrono::high_resolution_clock::now().time_since_epoch().count());
    x ^= static_cast<std::uint64_t>(getpid()) << 32;
    x ^= reinterpret_cast<std::uintptr_t>(&t_ids);
    word ^= splitmix64(x);
  }
  t_ids.state = word;
  t_ids.generation = g_fork_generation.load(std::memory_order_relaxed);
}

}  // namespace detail

namespace IdGenerator {

std::uint64_t next_u64() { return detail::thread_ids().next(); }

TraceId new_trace_id() { return detail::thread_ids().trace_id(); }

SpanId new_span_id() { return detail::thread_ids().span_id(); }

}  // namespace IdGenerator
}  // namespace lens
