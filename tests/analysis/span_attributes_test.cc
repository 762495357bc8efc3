// Attributes, the span row's attribute store: what a std::map of key to
// (text, type) gave (key order, the last value of a key kept), checked
// against such a map over seeded random keys, and a value set from the
// store's own text.
#include "span_attributes.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <utility>

namespace lens::analysis {
namespace {

TEST(SpanAttributes, KeysComeInOrderAndASecondValueReplacesTheFirst) {
  Attributes a;
  a.set("dl.step", "3", 'i');
  a.set("b", "x");
  a.set("dl.microbatch_id", "1", 'i');
  a.set("b", "y", 'b');
  ASSERT_EQ(a.size(), 3u);
  std::string keys;
  for (const Attributes::Entry e : a)
    keys += std::string(e.key) + "=" + std::string(e.text) + e.type + ";";
  EXPECT_EQ(keys, "b=yb;dl.microbatch_id=1i;dl.step=3i;");
  EXPECT_EQ(a.text("dl.step"), "3");
  EXPECT_EQ(a.type("dl.step"), 'i');
  EXPECT_FALSE(a.text("dl.rank").has_value());
  EXPECT_EQ(a.type("dl.rank"), 's');  // as a key without a type was read
  EXPECT_FALSE(a.has("dl.rank"));
  a.erase("b");
  EXPECT_FALSE(a.has("b"));
  EXPECT_EQ(a.size(), 2u);
  a.clear();
  EXPECT_TRUE(a.empty());
}

TEST(SpanAttributes, AnEmptyKeyAndEmptyTextAreValues) {
  Attributes a{{"", ""}, {"k", ""}};
  EXPECT_TRUE(a.has(""));
  EXPECT_EQ(a.text("k"), "");
  EXPECT_EQ(a.size(), 2u);
}

TEST(SpanAttributes, AValueSetFromItsOwnTextSurvivesTheBufferGrowing) {
  Attributes a;
  a.set("long.key.to.copy", std::string(100, 'v'));
  for (int i = 0; i < 50; ++i) {
    const std::string_view own = *a.text("long.key.to.copy");
    a.set("long.key.to.copy", own, 'i');  // appends while `own` views the buffer
  }
  EXPECT_EQ(a.text("long.key.to.copy"), std::string(100, 'v'));
  EXPECT_EQ(a.type("long.key.to.copy"), 'i');
}

TEST(SpanAttributes, BehavesAsAMapOfKeyToTextAndType) {
  std::mt19937 rng(54);
  for (int round = 0; round < 300; ++round) {
    std::map<std::string, std::pair<std::string, char>> want;
    Attributes got;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      // Few distinct keys, so that some repeat; some share a prefix.
      std::string key = "k" + std::to_string(rng() % 6);
      if (rng() % 3 == 0) key += ".longer.than.a.short.string";
      const std::string text(rng() % 40, static_cast<char>('a' + rng() % 26));
      const char type = "idbs"[rng() % 4];
      if (rng() % 8 == 0) {
        want.erase(key);
        got.erase(key);
        continue;
      }
      want[key] = {text, type};
      got.set(key, text, type);
    }
    ASSERT_EQ(got.size(), want.size());
    auto it = want.begin();
    for (const Attributes::Entry e : got) {
      EXPECT_EQ(e.key, it->first);
      EXPECT_EQ(e.text, it->second.first);
      EXPECT_EQ(e.type, it->second.second);
      ++it;
    }
    Attributes copy;
    for (auto r = want.rbegin(); r != want.rend(); ++r)
      copy.set(r->first, r->second.first, r->second.second);
    EXPECT_TRUE(copy == got) << "the same entries set in another order";
    if (!want.empty()) {
      copy.set(want.begin()->first, "changed", want.begin()->second.second);
      EXPECT_TRUE(copy != got);
    }
  }
}

}  // namespace
}  // namespace lens::analysis
