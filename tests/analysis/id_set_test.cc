// IdSet, Recent and HexId, the step stream's and the span row's id holders,
// checked against the standard containers they replace: seeded random
// inserts and erases (colliding keys and the key 0 included), the latest
// keys remembered as a map and a queue remember them, and ids ordered,
// compared and refused as their text is, and ordered by id_less as the text
// is.
#include "id_set.h"

#include <gtest/gtest.h>

#include <array>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "hex_id.h"
#include "recent.h"

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

// What Recent replaced: a map of the keys and a queue of their order.
template <typename Key, typename Value>
struct RecentReference {
  std::size_t limit;
  std::unordered_map<Key, Value> values;
  std::deque<Key> order;
  bool remember(const Key& key, Value value, bool& forgot) {
    if (!values.emplace(key, value).second) return false;
    order.push_back(key);
    if (order.size() > limit) {
      values.erase(order.front());
      order.pop_front();
      forgot = true;
    }
    return true;
  }
};

struct Identity {
  std::size_t operator()(std::uint64_t k) const { return k; }
};

TEST(Recent, RemembersTheLatestKeysAsAMapAndAQueueDo) {
  for (const std::size_t limit : {1u, 2u, 7u, 64u, 1000u}) {
    std::mt19937_64 random(limit);
    Recent<std::uint64_t, std::int64_t, Identity> recent(limit);
    RecentReference<std::uint64_t, std::int64_t> reference{limit, {}, {}};
    bool forgot = false, forgot_reference = false;
    // Keys from a range a few times the limit (so that some come back
    // after they were forgotten, some while remembered), many on one home
    // slot (multiples of a large power of two), 0 among them.
    const std::uint64_t range = 3 * limit + 5;
    const auto key = [&] {
      const std::uint64_t k = random() % range;
      return k % 3 == 0 ? (k << 40) : k;
    };
    for (int op = 0; op < 100'000; ++op) {
      const std::uint64_t k = key();
      const auto value = static_cast<std::int64_t>(random() % 1000);
      ASSERT_EQ(recent.remember(k, value, forgot), reference.remember(k, value, forgot_reference))
          << "limit " << limit << " op " << op;
      ASSERT_EQ(forgot, forgot_reference);
      ASSERT_EQ(recent.size(), reference.values.size());
      const std::uint64_t probe = key();
      const std::int64_t* found = recent.find(probe);
      const auto it = reference.values.find(probe);
      ASSERT_EQ(found != nullptr, it != reference.values.end()) << "limit " << limit << " op " << op;
      if (found != nullptr) {
        ASSERT_EQ(*found, it->second);
      }
    }
    for (std::uint64_t k = 0; k < range; ++k)
      for (const std::uint64_t probe : {k, k << 40}) {
        const std::int64_t* found = recent.find(probe);
        ASSERT_EQ(found != nullptr, reference.values.count(probe) > 0) << probe;
      }
  }
}

TEST(Recent, KeepsTheFirstValueAndRefusesABadLimit) {
  Recent<std::uint64_t, int, Identity> recent(3);
  bool forgot = false;
  EXPECT_EQ(recent.find(5), nullptr);
  EXPECT_TRUE(recent.remember(5, 1, forgot));
  EXPECT_FALSE(recent.remember(5, 2, forgot));
  ASSERT_NE(recent.find(5), nullptr);
  EXPECT_EQ(*recent.find(5), 1);
  EXPECT_TRUE(recent.remember(6, 3, forgot));
  EXPECT_TRUE(recent.remember(7, 4, forgot));
  EXPECT_FALSE(forgot);
  EXPECT_TRUE(recent.remember(8, 5, forgot));  // 5 goes
  EXPECT_TRUE(forgot);
  EXPECT_EQ(recent.find(5), nullptr);
  EXPECT_EQ(*recent.find(8), 5);
  EXPECT_EQ(recent.size(), 3u);
  using Ids = Recent<std::uint64_t, int, Identity>;
  EXPECT_THROW(Ids(0), std::invalid_argument);
  EXPECT_THROW(Ids(std::size_t{1} << 31), std::invalid_argument);
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

// EightHex reads a word's bytes as hex digits as a byte-by-byte reading
// does: over every byte value in every place, and 100,000 random words
// made mostly of the bytes around the digits' ranges.
TEST(HexId, EightDigitsAtATimeAreReadAsOneAtATime) {
  const auto lower_value = [](std::string_view eight) -> std::optional<std::uint32_t> {
    std::uint32_t v = 0;
    for (const char c : eight) {
      const unsigned d = kLowerHexValue[static_cast<unsigned char>(c)];
      if (d > 15) return std::nullopt;
      v = v << 4 | d;
    }
    return v;
  };
  const auto lowered = [](std::string_view eight) -> std::optional<std::string> {
    std::string out;
    for (const char c : eight) {
      const unsigned d = kHexValue[static_cast<unsigned char>(c)];
      if (d > 15) return std::nullopt;
      out += kLowerHexDigits[d];
    }
    return out;
  };
  const auto check = [&](const std::string& eight) {
    const EightHex word(eight.data());
    ASSERT_EQ(word.lower_value(), lower_value(eight)) << eight;
    const auto got = word.lowered();
    const auto want = lowered(eight);
    ASSERT_EQ(got.has_value(), want.has_value()) << eight;
    if (got) {
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(&*got), 8), *want) << eight;
    }
  };
  for (int place = 0; place < 8; ++place)
    for (int byte = 0; byte < 256; ++byte) {
      std::string eight = "0123abcd";
      eight[static_cast<std::size_t>(place)] = static_cast<char>(byte);
      check(eight);
    }
  std::mt19937_64 random(20261207);
  const std::string near = "/09:@AFG`afg0123456789abcdefABCDEF\x7f";
  for (int i = 0; i < 100000; ++i) {
    std::string eight(8, '0');
    for (char& c : eight)
      c = random() % 16 == 0 ? static_cast<char>(random() % 256) : near[random() % near.size()];
    check(eight);
  }
  EXPECT_EQ(hex_word("0123456789abcdef"), 0x0123456789abcdefULL);
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
