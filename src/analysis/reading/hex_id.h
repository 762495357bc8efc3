// A trace or span id as a span row holds it: its text (lowercase hex as
// the reader validates it, 32 digits for a trace, 16 for a span; empty for
// none) kept inside the row, not on the heap. A run has millions of rows,
// each with three ids and its links' two: as std::string each of those
// was an allocation (past the 15 characters a string keeps inline).
//
// It compares, orders and hashes as its text does, so maps keyed by ids
// keep their order; it reads as a std::string_view (valid while the HexId
// lives and is not assigned).
//
// Thread safety: a plain value.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lens::analysis {

class HexId {
 public:
  static constexpr std::size_t kCapacity = 32;  // a trace id's hex digits

  HexId() = default;
  // std::length_error for text longer than kCapacity.
  HexId(std::string_view text) { assign(text); }  // NOLINT: ids are assigned from text
  HexId(const char* text) : HexId(std::string_view(text)) {}
  HexId(const std::string& text) : HexId(std::string_view(text)) {}
  HexId& operator=(std::string_view text) {
    assign(text);
    return *this;
  }
  HexId& operator=(const char* text) { return *this = std::string_view(text); }
  HexId& operator=(const std::string& text) { return *this = std::string_view(text); }

  void assign(std::string_view text) {
    if (text.size() > kCapacity)
      throw std::length_error("an id of " + std::to_string(text.size()) +
                              " characters (at most 32)");
    std::memcpy(text_, text.data(), text.size());
    size_ = static_cast<std::uint8_t>(text.size());
  }
  // Appends text (std::length_error past kCapacity).
  HexId& operator+=(std::string_view text) {
    std::string joined(view());
    assign(joined.append(text));
    return *this;
  }
  void clear() { size_ = 0; }

  std::string_view view() const { return {text_, size_}; }
  operator std::string_view() const { return view(); }  // NOLINT: read as text
  std::string str() const { return std::string(view()); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  friend bool operator==(const HexId& a, const HexId& b) { return a.view() == b.view(); }
  friend std::strong_ordering operator<=>(const HexId& a, const HexId& b) {
    return a.view() <=> b.view();
  }
  friend bool operator==(const HexId& a, std::string_view b) { return a.view() == b; }
  friend std::strong_ordering operator<=>(const HexId& a, std::string_view b) {
    return a.view() <=> b;
  }
  friend bool operator==(const HexId& a, const std::string& b) { return a.view() == b; }
  friend std::strong_ordering operator<=>(const HexId& a, const std::string& b) {
    return a.view() <=> std::string_view(b);
  }
  friend bool operator==(const HexId& a, const char* b) { return a.view() == b; }
  friend std::strong_ordering operator<=>(const HexId& a, const char* b) {
    return a.view() <=> std::string_view(b);
  }
  friend std::ostream& operator<<(std::ostream& os, const HexId& id) { return os << id.view(); }

 private:
  char text_[kCapacity] = {};
  std::uint8_t size_ = 0;
};

inline constexpr char kLowerHexDigits[] = "0123456789abcdef";

// Each byte's value as a hex digit: kHexValue for either case, kLowerHexValue
// for lowercase only (as ids are held); 0xff for any other byte.
inline constexpr std::array<std::uint8_t, 256> kHexValue = [] {
  std::array<std::uint8_t, 256> t{};
  t.fill(0xff);
  for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) {
    t[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(c - 'a' + 10);
    t[static_cast<std::size_t>(c - 'a' + 'A')] = static_cast<std::uint8_t>(c - 'a' + 10);
  }
  return t;
}();
inline constexpr std::array<std::uint8_t, 256> kLowerHexValue = [] {
  std::array<std::uint8_t, 256> t = kHexValue;
  for (int c = 'A'; c <= 'F'; ++c) t[static_cast<std::size_t>(c)] = 0xff;
  return t;
}();

// Eight bytes tested a word at a time as decimal digits and hex letters
// (the first byte in the low byte, as loaded from memory on this
// little-endian machine): the ids' reading and strict_int's.
struct EightHex {
  static constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  static constexpr std::uint64_t kHigh = 0x8080808080808080ULL;

  explicit EightHex(const char* p) { std::memcpy(&word, p, sizeof word); }

  // Each byte's high bit: set when the byte is at least `low` (the bytes are
  // below 0x80, tested first, so that no sum carries into the next byte).
  std::uint64_t at_least(unsigned low) const { return (word + kOnes * (0x80 - low)) & kHigh; }
  std::uint64_t in(unsigned low, unsigned high) const {
    return at_least(low) & ~at_least(high + 1);
  }
  bool ascii() const { return (word & kHigh) == 0; }
  std::uint64_t digits() const { return in('0', '9'); }
  std::uint64_t lower_letters() const { return in('a', 'f'); }
  std::uint64_t upper_letters() const { return in('A', 'F'); }

  // All eight lowercase hex digits: their value (the first the most
  // significant), else nullopt.
  std::optional<std::uint32_t> lower_value() const {
    if (!ascii()) return std::nullopt;
    const std::uint64_t letters = lower_letters();
    if ((digits() | letters) != kHigh) return std::nullopt;
    // Each byte's digit value, then pairs, fours and the eight combined.
    std::uint64_t v = (word & 0x0F0F0F0F0F0F0F0FULL) + (letters >> 7) * 9;
    v = ((v & 0x000F000F000F000FULL) << 4) | ((v >> 8) & 0x000F000F000F000FULL);
    v = ((v & 0x000000FF000000FFULL) << 8) | ((v >> 16) & 0x000000FF000000FFULL);
    return static_cast<std::uint32_t>(((v & 0xFFFF) << 16) | ((v >> 32) & 0xFFFF));
  }

  // All eight hex digits in either case: the same digits in lowercase,
  // else nullopt.
  std::optional<std::uint64_t> lowered() const {
    if (!ascii()) return std::nullopt;
    const std::uint64_t upper = upper_letters();
    if ((digits() | lower_letters() | upper) != kHigh) return std::nullopt;
    return word | (upper >> 2);  // 0x80 >> 2: the case bit
  }

  std::uint64_t word;
};

// The value of 16 lowercase hex digits (a span id, or half a trace id);
// nullopt for any other text.
inline std::optional<std::uint64_t> hex_word(std::string_view hex) {
  if (hex.size() != 16) return std::nullopt;
  const auto high = EightHex(hex.data()).lower_value();
  const auto low = EightHex(hex.data() + 8).lower_value();
  if (!high || !low) return std::nullopt;
  return std::uint64_t{*high} << 32 | *low;
}

// Ids ordered as their text is (byte by byte, as std::string_view orders
// them), ids of 16 and 32 characters compared a word at a time: the step
// views sort and search millions of them.
inline bool id_less(std::string_view a, std::string_view b) {
  if (a.size() == b.size() && (a.size() == 16 || a.size() == 32)) {
    for (std::size_t i = 0; i < a.size(); i += 8) {
      std::uint64_t x, y;
      std::memcpy(&x, a.data() + i, 8);
      std::memcpy(&y, b.data() + i, 8);
      if (x != y) return __builtin_bswap64(x) < __builtin_bswap64(y);
    }
    return false;
  }
  return a < b;
}

// Text joined with an id, as messages are made.
inline std::string operator+(std::string text, const HexId& id) { return text.append(id.view()); }
inline std::string operator+(const HexId& id, std::string_view text) {
  return id.str().append(text);
}

}  // namespace lens::analysis

template <>
struct std::hash<lens::analysis::HexId> {
  std::size_t operator()(const lens::analysis::HexId& id) const noexcept {
    return std::hash<std::string_view>{}(id.view());
  }
};
