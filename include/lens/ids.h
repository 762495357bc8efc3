/// \file
/// Trace and span identifiers.
///
/// TraceId (16 bytes) and SpanId (8 bytes) are plain values. An all-zero id is
/// invalid, as the W3C Trace Context recommendation says. New ids come from
/// IdGenerator, a per-thread generator seeded from the operating system: it is
/// independent of any seeding the application does (srand, std::mt19937, ...)
/// and is reseeded in a forked child, so ranks and forked workers never repeat
/// each other's ids.
///
/// Thread safety: TraceId and SpanId are values. The IdGenerator functions are
/// safe to call from any thread (each thread has its own state).
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lens {

class TraceId {
 public:
  static constexpr std::size_t kSize = 16;

  constexpr TraceId() = default;
  explicit constexpr TraceId(const std::array<std::uint8_t, kSize>& bytes) : bytes_(bytes) {}
  /// The id of two words, the high one first (big-endian, as it is
  /// written in hex).
  static TraceId from_words(std::uint64_t high, std::uint64_t low) {
    const std::array<std::uint64_t, 2> words = {__builtin_bswap64(high), __builtin_bswap64(low)};
    return TraceId(std::bit_cast<std::array<std::uint8_t, kSize>>(words));
  }

  /// Parses exactly 32 lowercase hex digits; anything else gives nullopt.
  /// An all-zero id parses (it is well-formed) but is not valid().
  static std::optional<TraceId> from_hex(std::string_view hex);

  bool valid() const {
    const auto words = std::bit_cast<std::array<std::uint64_t, 2>>(bytes_);
    return (words[0] | words[1]) != 0;
  }
  const std::array<std::uint8_t, kSize>& bytes() const { return bytes_; }
  std::string to_hex() const;
  /// Writes 32 lowercase hex digits to out (no terminator).
  void write_hex(char* out) const;

  friend bool operator==(const TraceId&, const TraceId&) = default;
  friend auto operator<=>(const TraceId&, const TraceId&) = default;

 private:
  std::array<std::uint8_t, kSize> bytes_{};
};

class SpanId {
 public:
  static constexpr std::size_t kSize = 8;

  constexpr SpanId() = default;
  explicit constexpr SpanId(const std::array<std::uint8_t, kSize>& bytes) : bytes_(bytes) {}
  /// The id of a word (big-endian, as it is written in hex).
  static SpanId from_word(std::uint64_t word) {
    return SpanId(std::bit_cast<std::array<std::uint8_t, kSize>>(__builtin_bswap64(word)));
  }

  /// Parses exactly 16 lowercase hex digits; anything else gives nullopt.
  static std::optional<SpanId> from_hex(std::string_view hex);

  bool valid() const { return std::bit_cast<std::uint64_t>(bytes_) != 0; }
  const std::array<std::uint8_t, kSize>& bytes() const { return bytes_; }
  /// The id as a word (its bytes big-endian).
  std::uint64_t to_word() const { return __builtin_bswap64(std::bit_cast<std::uint64_t>(bytes_)); }
  std::string to_hex() const;
  void write_hex(char* out) const;

  friend bool operator==(const SpanId&, const SpanId&) = default;
  friend auto operator<=>(const SpanId&, const SpanId&) = default;

 private:
  std::array<std::uint8_t, kSize> bytes_{};
};

/// Random ids from a per-thread generator (wyrand) seeded with getrandom(2)
/// and reseeded in a forked child. Never returns an invalid (all-zero) id.
namespace IdGenerator {
TraceId new_trace_id();
SpanId new_span_id();
/// A random 64-bit word from the same generator (used for sampling decisions
/// and run ids).
std::uint64_t next_u64();
}  // namespace IdGenerator

}  // namespace lens
