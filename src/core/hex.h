// Lowercase hex encoding and strict decoding, shared by the id types and the
// W3C trace context parser. Internal header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lens::detail {

inline constexpr char kLowerHexDigits[] = "0123456789abcdef";

inline void encode_lower_hex(const std::uint8_t* bytes, std::size_t n, char* out) {
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kLowerHexDigits[bytes[i] >> 4];
    out[2 * i + 1] = kLowerHexDigits[bytes[i] & 0xf];
  }
}

// Value of a lowercase hex digit, or -1 (uppercase is rejected on purpose:
// W3C Trace Context allows lowercase only).
inline int lower_hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Decodes exactly 2*n lowercase hex digits into n bytes.
inline bool decode_lower_hex(std::string_view hex, std::uint8_t* out, std::size_t n) {
  if (hex.size() != 2 * n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    int hi = lower_hex_value(hex[2 * i]);
    int lo = lower_hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>((hi << 4) | lo);
  }
  return true;
}

}  // namespace lens::detail
