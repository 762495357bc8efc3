// UTF-8 validation for what the OTLP encoders write: OTLP strings must be
// valid UTF-8 (strict receivers reject the whole request otherwise), so both
// encoders put U+FFFD in place of each byte that does not belong to a valid
// sequence. Internal header of the otlp part.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lens::detail {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid
// (overlong forms, surrogates and code points past U+10FFFF included).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// True when s[from..] is valid UTF-8.
bool valid_utf8_from(std::string_view s, std::size_t from);

// True when all of s is valid UTF-8. Inline for the all-ASCII strings the
// encoders mostly see (names, keys): a loop over the bytes, no call.
inline bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) >= 0x80) return valid_utf8_from(s, i);
  return true;
}

// s with U+FFFD in place of each byte that is not part of a valid sequence.
std::string with_invalid_utf8_replaced(std::string_view s);

}  // namespace lens::detail
