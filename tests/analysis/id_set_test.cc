// IdSet and HexId, the step stream's and the span row's id holders, checked
// against the standard containers they replace: seeded random inserts and
// erases (colliding keys and the key 0 included), and ids ordered, compared
// and refused as their text is, and ordered by id_less as the text is.
#include "id_set.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "hex_id.h"

namespace lens::analysis {
namespace {

TEST(IdSet, AgreesWithAnUnorderedSetOverRandomInsertsAndErases) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 random(seed);
    IdSet set;
    std::unordered_set<std::uint64_t> reference;
    // Few distinct keys, many of them on the same home slot (multiples of
    // a large power of two), 0 among them.
    const auto key = [&] {
      const std::uint64_t k = random() % 3000;
      return k % 3 == 0 ? (k << 40) : k;
    };
    for (int op = 0; op < 200'000; ++op) {
      const std::uint64_t k = key();
      if (random() % 3 == 0) {
        ASSERT_EQ(set.erase(k), reference.erase(k)) << "seed " << seed << " op " << op;
      } else {
        ASSERT_EQ(set.insert(k), reference.insert(k).second) << "seed " << seed << " op " << op;
      }
      ASSERT_EQ(set.size(), reference.size());
      const std::uint64_t probe = key();
      ASSERT_EQ(set.contains(probe), reference.count(probe) > 0);
    }
    for (std::uint64_t k = 0; k < 3000; ++k) {
      ASSERT_EQ(set.count(k), reference.count(k)) << k;
      ASSERT_EQ(set.count(k << 40), reference.count(k << 40)) << k;
    }
  }
}

TEST(IdSet, EmptyAndTheKeyZero) {
  IdSet set;
  EXPECT_TRUE(set.empty());
  EXPECT_FALSE(set.contains(0));
  EXPECT_EQ(set.erase(7), 0u);
  EXPECT_TRUE(set.insert(0));
  EXPECT_FALSE(set.insert(0));
  EXPECT_TRUE(set.contains(0));
  EXPECT_EQ(set.size(), 1u);
  EXPECT_EQ(set.erase(0), 1u);
  EXPECT_TRUE(set.empty());
}

TEST(HexId, OrdersComparesAndHashesAsItsText) {
  const std::string a = "00f067aa0ba902b7", b = "4bf92f3577b34da6a3ce929d0e0e4736";
  std::map<HexId, int> by_id{{b, 2}, {a, 1}, {"", 0}};
  std::map<std::string, int> by_text{{b, 2}, {a, 1}, {"", 0}};
  auto t = by_text.begin();
  for (const auto& [id, v] : by_id) {
    EXPECT_EQ(id, t->first);
    EXPECT_EQ(v, t->second);
    ++t;
  }
  EXPECT_EQ(HexId(a), a);
  EXPECT_NE(HexId(a), b);
  EXPECT_EQ(HexId(a), a.c_str());
  EXPECT_EQ(std::hash<HexId>()(HexId(b)), std::hash<std::string_view>()(b));
  EXPECT_EQ("span " + HexId(a), "span " + a);
  EXPECT_TRUE(HexId().empty());
  HexId grown("ab");
  grown += "cd";
  EXPECT_EQ(grown, "abcd");
  EXPECT_THROW(HexId(std::string(33, 'a')), std::length_error);
  EXPECT_THROW(HexId(std::string(32, 'a')) += "b", std::length_error);
}

TEST(HexId, HexWordReadsSixteenLowercaseDigitsOnly) {
  EXPECT_EQ(hex_word("00f067aa0ba902b7"), 0x00f067aa0ba902b7ULL);
  EXPECT_EQ(hex_word("ffffffffffffffff"), ~0ULL);
  EXPECT_FALSE(hex_word("00F067AA0BA902B7").has_value());
  EXPECT_FALSE(hex_word("00f067aa0ba902b").has_value());
  EXPECT_FALSE(hex_word("00f067aa0ba902bg").has_value());
  EXPECT_FALSE(hex_word("00f067aa0ba902b7 ").has_value());
}

TEST(HexId, IdLessOrdersAsTheTextDoes) {
  std::mt19937_64 random(5);
  const auto id = [&](std::size_t n) {
    std::string s(n, '0');
    // Few distinct digits, so that equal prefixes and equal ids are common;
    // now and then a byte past 0x7f, which std::string_view orders as unsigned.
    for (char& c : s) c = "0af\xe9"[random() % (random() % 16 == 0 ? 4 : 3)];
    return s;
  };
  for (int i = 0; i < 50'000; ++i) {
    const std::size_t n = std::array<std::size_t, 4>{16, 32, 15, 17}[random() % 4];
    const std::string a = id(n), b = random() % 4 == 0 ? a : id(random() % 8 == 0 ? 16 : n);
    ASSERT_EQ(id_less(a, b), std::string_view(a) < std::string_view(b)) << a << " " << b;
    ASSERT_EQ(id_less(b, a), std::string_view(b) < std::string_view(a)) << a << " " << b;
  }
}

}  // namespace
}  // namespace lens::analysis
