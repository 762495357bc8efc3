#include "lens/otlp_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace lens {
namespace {

using json = nlohmann::json;

std::string json_quoted(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

TEST(OtlpJson, EscapesControlCharactersAndQuotes) {
  EXPECT_EQ(json_quoted("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_quoted("\n\t\r\b\f"), R"("\n\t\r\b\f")");
  EXPECT_EQ(json_quoted(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
  EXPECT_EQ(json_quoted(std::string("nul\0x", 5)), R"("nul\u0000x")");
}

TEST(OtlpJson, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(json_quoted("\xce\xbb \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"\xce\xbb \xe2\x82\xac \xf0\x9f\x98\x80\"");
  const char* bad[] = {"\xff",         "\xc0\xaf", "\xe0\x80\xaf",
                       "\xed\xa0\x80", "\xce",     "\xf4\x90\x80\x80"};
  for (const char* b : bad) {
    std::string out = json_quoted(b);
    EXPECT_TRUE(json::accept(out)) << out;
    EXPECT_NE(out.find("\xef\xbf\xbd"), std::string::npos) << out;
  }
}

TEST(OtlpJson, SpecialDoublesFollowProto3Json) {
  SpanRecord s;
  s.name = "d";
  s.attributes = {{"nan", std::nan("")},
                  {"inf", std::numeric_limits<double>::infinity()},
                  {"ninf", -std::numeric_limits<double>::infinity()},
                  {"big", std::int64_t{-9223372036854775807LL - 1}}};
  const SpanRecord* batch[] = {&s};
  std::string out;
  append_otlp_json(out, Resource(), batch);
  json j = json::parse(out);
  const json& attrs = j["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"];
  EXPECT_EQ(attrs[0]["value"]["doubleValue"], "NaN");
  EXPECT_EQ(attrs[1]["value"]["doubleValue"], "Infinity");
  EXPECT_EQ(attrs[2]["value"]["doubleValue"], "-Infinity");
  EXPECT_EQ(attrs[3]["value"]["intValue"], "-9223372036854775808");
}

TEST(OtlpJson, GroupsSpansByScope) {
  InstrumentationScope a{"a", ""}, b{"b", "2"};
  SpanRecord s1, s2, s3;
  s1.name = "1";
  s1.scope = &a;
  s2.name = "2";
  s2.scope = &b;
  s3.name = "3";
  s3.scope = &a;
  const SpanRecord* batch[] = {&s1, &s2, &s3};
  std::string out;
  append_otlp_json(out, Resource(), batch);
  json j = json::parse(out);
  const json& scopes = j["resourceSpans"][0]["scopeSpans"];
  ASSERT_EQ(scopes.size(), 2u);
  EXPECT_EQ(scopes[0]["scope"]["name"], "a");
  EXPECT_FALSE(scopes[0]["scope"].contains("version"));
  EXPECT_EQ(scopes[0]["spans"].size(), 2u);
  EXPECT_EQ(scopes[1]["scope"]["version"], "2");
  EXPECT_EQ(scopes[1]["spans"][0]["name"], "2");
}

}  // namespace
}  // namespace lens
