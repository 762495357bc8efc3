// JsonObjectText and write_json against nlohmann::json's own dump: random
// documents (nested objects and arrays, empty ones, integers of both signs,
// doubles of every magnitude and the non-finite ones, strings with escapes
// and UTF-8), written at several indents; an object's members given in a
// shuffled order; a key given twice; invalid UTF-8 refused as dump refuses it.
#include "json_text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace lens::analysis {
namespace {

using json = nlohmann::json;

class RandomJson {
 public:
  explicit RandomJson(std::uint64_t seed) : random_(seed) {}

  double number() {
    switch (random_() % 6) {
      case 0:  // any bit pattern: tiny, huge, subnormal, NaN, infinite
        return std::bit_cast<double>(static_cast<std::uint64_t>(random_()));
      case 1:
        return static_cast<double>(static_cast<std::int64_t>(random_() % 2000001) - 1000000);
      case 2:
        return static_cast<double>(random_() % 1000000) / 1000.0;
      case 3:
        return std::ldexp(static_cast<double>(random_() % 1000), static_cast<int>(random_() % 120) - 60);
      case 4:
        return random_() % 2 ? std::numeric_limits<double>::infinity() : -0.0;
      default:
        return static_cast<double>(random_()) / static_cast<double>(random_() | 1);
    }
  }

  std::string text() {
    static const std::vector<std::string> kPieces = {
        "a", "step", "_ms", "\"", "\\", "\n", "\t", std::string(1, '\x01'), "\x1f", "\x7f",
        "\xc3\xa9", "\xe2\x82\xac", " ", "{", "0"};
    std::string s;
    for (std::size_t n = random_() % 6; n > 0; --n) s += kPieces[random_() % kPieces.size()];
    return s;
  }

  json value(int depth) {
    const int kinds = depth >= 4 ? 7 : 9;
    switch (random_() % kinds) {
      case 0:
        return json(number());
      case 1:
        return json(static_cast<std::int64_t>(random_()));
      case 2:
        return json(static_cast<std::uint64_t>(random_()));
      case 3:
        return json(random_() % 2 == 0);
      case 4:
        return json(nullptr);
      case 5:
        return json(text());
      case 6:
        return json(static_cast<int>(random_() % 200) - 100);
      case 7: {
        json a = json::array();
        for (std::size_t n = random_() % 5; n > 0; --n) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (std::size_t n = random_() % 6; n > 0; --n) o[text()] = value(depth + 1);
        return o;
      }
    }
  }

  std::mt19937_64& random() { return random_; }

 private:
  std::mt19937_64 random_;
};

TEST(JsonText, WritesWhatDumpWritesForRandomDocuments) {
  RandomJson make(7);
  for (int i = 0; i < 3000; ++i) {
    json doc = make.value(0);
    if (i % 2 == 0) doc = json::array({doc, make.value(1), json::object({{make.text(), doc}})});
    for (const int indent : {0, 1, 2, 4}) {
      std::string out;
      write_json(out, doc, indent, 0);
      ASSERT_EQ(out, doc.dump(indent)) << "document " << i << ", indent " << indent;
    }
  }
}

TEST(JsonText, DoublesAsDumpWritesThem) {
  RandomJson make(11);
  for (int i = 0; i < 200'000; ++i) {
    const double v = make.number();
    std::string out;
    write_double(out, v);
    ASSERT_EQ(out, json(v).dump()) << i;
  }
  for (const double v : {0.0, -0.0, 1.0, 0.1, 1e-5, 1e15, 1e16, 123456789012345678.0, 5e-324,
                         std::numeric_limits<double>::max(), std::nan("")}) {
    std::string out;
    write_double(out, v);
    EXPECT_EQ(out, json(v).dump()) << v;
  }
}

TEST(JsonText, AnObjectsMembersInKeyOrderWhateverOrderTheyCameIn) {
  RandomJson make(3);
  for (int i = 0; i < 500; ++i) {
    // Keys that share prefixes, one a prefix of another, bytes above 0x7f.
    std::vector<std::pair<std::string, json>> members;
    std::vector<std::string> keys = {"step", "step_ms", "steps", "Step", "a", "\xc3\xa9t",
                                     "stage_step_ms", "", "z\"q"};
    std::shuffle(keys.begin(), keys.end(), make.random());
    keys.resize(make.random()() % keys.size());
    json expected = json::object();
    for (const auto& k : keys) {
      members.emplace_back(k, make.value(1));
      expected[k] = members.back().second;
    }
    const int depth = static_cast<int>(make.random()() % 3);
    JsonObjectText o(1, depth);
    for (const auto& [k, v] : members) o.add(k, v);
    std::string out;
    o.write(out);
    std::string want;
    write_json(want, expected, 1, depth);
    ASSERT_EQ(out, want) << i;
    if (depth == 0) {
      ASSERT_EQ(out, expected.dump(1)) << i;
    }
  }
}

TEST(JsonText, AnObjectReusedForRowsOfTheSameOrOtherKeys) {
  // The keys' texts stay where they are; rows take them in one order many
  // times over (the order settled once), then in others, or others of them.
  const std::vector<std::string> texts = {"step", "step_ms", "steps", "a", "\xc3\xa9t",
                                          "stage_step_ms", "", "z\"q", "rank"};
  RandomJson make(5);
  std::vector<std::size_t> order(texts.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::size_t keys = texts.size();
  JsonObjectText o(1, 2);
  for (int row = 0; row < 2000; ++row) {
    if (row % 50 == 0) {  // another order, or fewer keys
      std::shuffle(order.begin(), order.end(), make.random());
      keys = 1 + make.random()() % texts.size();
    }
    o.clear();
    json expected = json::object();
    for (std::size_t i = 0; i < keys; ++i) {
      const std::string& key = texts[order[i]];
      const json value = make.value(3);
      o.add(key, value);
      expected[key] = value;
    }
    std::string out, want;
    o.write(out);
    write_json(want, expected, 1, 2);
    ASSERT_EQ(out, want) << "row " << row;
  }
}

TEST(JsonText, ScalarsNestedObjectsAndArrays) {
  JsonObjectText o(2, 0);
  o.add("int", -3);
  o.add("size", std::size_t{7});
  o.add("long", std::int64_t{-9007199254740993});
  o.add("double", 2.0);
  o.add("absent", std::optional<double>());
  o.add("present", std::optional<double>(0.25));
  o.add("null", nullptr);
  o.add("flag", true);
  o.add("name", "forward");
  o.add("nothing", std::string_view());  // a view with no data
  o.add("list", std::vector<int>{3, 1, 2});
  o.add("empty_list", std::vector<int>{});
  JsonObjectText inner(2, 1);
  inner.add("b", 1);
  inner.add("a", std::string("x"));
  inner.write(o.add_text("inner"));
  JsonObjectText row(2, 2);
  write_array(o.add_text("rows"), 2, 1, 2, [&](std::string& out, std::size_t i, int) {
    row.clear();
    row.add("i", i);
    row.write(out);
  });
  std::string out;
  o.write(out);
  const json expected = {{"int", -3},
                         {"size", 7u},
                         {"long", std::int64_t{-9007199254740993}},
                         {"double", 2.0},
                         {"absent", nullptr},
                         {"present", 0.25},
                         {"null", nullptr},
                         {"flag", true},
                         {"name", "forward"},
                         {"nothing", ""},
                         {"list", {3, 1, 2}},
                         {"empty_list", json::array()},
                         {"inner", {{"b", 1}, {"a", "x"}}},
                         {"rows", {{{"i", 0}}, {{"i", 1}}}}};
  EXPECT_EQ(out, expected.dump(2));
  JsonObjectText empty(1, 0);
  out.clear();
  empty.write(out);
  EXPECT_EQ(out, "{}");
}

TEST(JsonText, RefusesAKeyTwiceAndInvalidUtf8) {
  JsonObjectText o(1, 0);
  o.add("a", 1);
  o.add("a", 2);
  std::string out;
  EXPECT_THROW(o.write(out), std::logic_error);
  EXPECT_THROW(o.write(out), std::logic_error);  // again: nothing of it kept
  o.clear();
  o.add("a", 1);
  out.clear();
  o.write(out);
  EXPECT_EQ(out, "{\n \"a\": 1\n}");
  JsonObjectText bad(1, 0);
  EXPECT_THROW(bad.add("name", std::string("\xff\xfe")), json::type_error);
}

}  // namespace
}  // namespace lens::analysis
