// same_bytes: whether two short strings hold the same bytes, compared a
// word at a time without a call. Internal header.
//
// The span hot path compares a pooled record's name and attribute keys with
// the ones a call site passes (they mostly match: a call site's spans reuse
// the records it released); names and keys are a few dozen bytes, where a
// call to memcmp costs more than the comparison.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace lens::detail {

inline std::uint64_t load_word(const char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

inline std::uint32_t load_half_word(const char* p) {
  std::uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

inline bool same_bytes(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  if (n >= 8) {
    // Up to 32 bytes in two or four words (the last ones overlapping the
    // first), longer ones a word at a time.
    std::uint64_t diff =
        (load_word(p) ^ load_word(q)) | (load_word(p + n - 8) ^ load_word(q + n - 8));
    if (n <= 16) return diff == 0;
    if (n <= 32)
      return (diff | (load_word(p + 8) ^ load_word(q + 8)) |
              (load_word(p + n - 16) ^ load_word(q + n - 16))) == 0;
    for (std::size_t i = 8; i + 8 < n && diff == 0; i += 8)
      diff = load_word(p + i) ^ load_word(q + i);
    return diff == 0;
  }
  if (n >= 4)
    return ((load_half_word(p) ^ load_half_word(q)) |
            (load_half_word(p + n - 4) ^ load_half_word(q + n - 4))) == 0;
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != q[i]) return false;
  return true;
}

}  // namespace lens::detail
