// same_bytes, the span hot path's comparison of names and attribute keys:
// every length from empty to past its word-wise cases, a difference at
// every position, and lengths that differ.
#include "same_bytes.h"

#include <gtest/gtest.h>

#include <string>

namespace lens::detail {
namespace {

TEST(SameBytes, EveryLengthAndEveryPositionOfADifference) {
  for (std::size_t n = 0; n <= 70; ++n) {
    std::string a(n, '\0');
    for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<char>('a' + i % 26);
    const std::string b = a;
    EXPECT_TRUE(same_bytes(a, b)) << n;
    for (std::size_t i = 0; i < n; ++i) {
      std::string c = a;
      c[i] = static_cast<char>(c[i] ^ 0x01);
      EXPECT_FALSE(same_bytes(a, c)) << "length " << n << ", difference at " << i;
      EXPECT_FALSE(same_bytes(c, a)) << "length " << n << ", difference at " << i;
    }
    // A prefix or an extension is not the same.
    EXPECT_FALSE(same_bytes(a, a + "x")) << n;
    if (n > 0) {
      EXPECT_FALSE(same_bytes(a, std::string_view(a).substr(0, n - 1))) << n;
    }
  }
}

TEST(SameBytes, ComparesBytesNotTheirPlace) {
  // Views into one buffer at different offsets, and a high-bit byte.
  const std::string text = "dl.microbatch_id|dl.microbatch_id|dl.microbatch_i\xff";
  const std::string_view first(text.data(), 16), second(text.data() + 17, 16),
      third(text.data() + 34, 16);
  EXPECT_TRUE(same_bytes(first, second));
  EXPECT_FALSE(same_bytes(first, third));
}

}  // namespace
}  // namespace lens::detail
