#include "lens/trace_context.h"

#include <gtest/gtest.h>

namespace lens {
namespace {

constexpr const char* kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kSpan = "00f067aa0ba902b7";

struct TraceparentCase {
  const char* header;
  bool valid;
  const char* why;
};

class TraceparentTable : public ::testing::TestWithParam<TraceparentCase> {};

TEST_P(TraceparentTable, ParsesExactlyPerW3C) {
  const auto& c = GetParam();
  auto ctx = parse_traceparent(c.header);
  EXPECT_EQ(ctx.has_value(), c.valid) << c.why << ": " << c.header;
  if (ctx) {
    EXPECT_EQ(ctx->trace_id.to_hex(), kTrace);
    EXPECT_EQ(ctx->span_id.to_hex(), kSpan);
    EXPECT_TRUE(ctx->remote);
  }
}

INSTANTIATE_TEST_SUITE_P(
    W3C, TraceparentTable,
    ::testing::Values(
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true, "sampled"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true,
                        "not sampled"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", true,
                        "unknown flag bits are kept"},
        TraceparentCase{"  00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\t", true,
                        "optional whitespace around the value"},
        TraceparentCase{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true,
                        "future version parsed by version-00 rules"},
        TraceparentCase{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future",
                        true, "future version may append fields after '-'"},
        TraceparentCase{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false,
                        "future version: extra data must start with '-'"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false,
                        "version 00 must be exactly 55 characters"},
        TraceparentCase{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false,
                        "version ff is invalid"},
        TraceparentCase{"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false,
                        "version not hex"},
        TraceparentCase{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false,
                        "uppercase trace id"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01", false,
                        "uppercase span id"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A", false,
                        "uppercase flags"},
        TraceparentCase{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false,
                        "all-zero trace id"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false,
                        "all-zero span id"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false,
                        "short trace id"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01", false,
                        "short span id"},
        TraceparentCase{"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", false,
                        "wrong separators"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", false,
                        "one-digit flags"},
        TraceparentCase{"", false, "empty"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x", false,
                        "flags not hex"},
        TraceparentCase{"00-4bf92f3577b34da6a3ce929d0e0e47z6-00f067aa0ba902b7-01", false,
                        "trace id not hex"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(Traceparent, FlagsAreParsed) {
  auto ctx = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(ctx);
  EXPECT_TRUE(ctx->sampled());
  ctx = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(ctx);
  EXPECT_FALSE(ctx->sampled());
}

TEST(Traceparent, FormatRoundTrips) {
  SpanContext ctx;
  ctx.trace_id = *TraceId::from_hex(kTrace);
  ctx.span_id = *SpanId::from_hex(kSpan);
  ctx.trace_flags = 0x01;
  const std::string header = format_traceparent(ctx);
  EXPECT_EQ(header, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  auto back = parse_traceparent(header);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->trace_id, ctx.trace_id);
  EXPECT_EQ(back->span_id, ctx.span_id);
  EXPECT_EQ(back->trace_flags, ctx.trace_flags);
}

TEST(Traceparent, FutureVersionKeepsVersion00Fields) {
  auto ctx = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abcd");
  ASSERT_TRUE(ctx);
  EXPECT_TRUE(ctx->sampled());
  EXPECT_EQ(format_traceparent(*ctx).substr(0, 2), "00");
}

struct TracestateCase {
  const char* header;
  const char* expected;
  const char* why;
};

class TracestateTable : public ::testing::TestWithParam<TracestateCase> {};

TEST_P(TracestateTable, KeepsAValidHeaderWholeAndDiscardsAnInvalidOneWhole) {
  const auto& c = GetParam();
  EXPECT_EQ(sanitize_tracestate(c.header), c.expected) << c.why;
}

INSTANTIATE_TEST_SUITE_P(
    W3C, TracestateTable,
    ::testing::Values(
        TracestateCase{"", "", "empty header"},
        TracestateCase{"rojo=00f067aa0ba902b7", "rojo=00f067aa0ba902b7", "one member"},
        TracestateCase{"rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE",
                       "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "whitespace around members"},
        TracestateCase{"rojo=1,,congo=2", "rojo=1,congo=2", "empty members are allowed"},
        TracestateCase{"rojo=1, \t ,congo=2", "rojo=1,congo=2", "blank members are allowed"},
        TracestateCase{"Rojo=1,congo=2", "", "an uppercase key discards the whole value"},
        TracestateCase{"rojo=1,congo", "", "a member without '=' discards the whole value"},
        TracestateCase{"rojo=,congo=2", "", "an empty value discards the whole value"},
        TracestateCase{"rojo=a=b,congo=2", "", "'=' inside a value discards the whole value"},
        TracestateCase{"rojo=trailing ,congo=2", "rojo=trailing,congo=2",
                       "optional whitespace after a member is not part of the value"},
        TracestateCase{"rojo=in side,congo=2", "rojo=in side,congo=2",
                       "space inside a value is allowed"},
        TracestateCase{"tenant@vendor=1", "tenant@vendor=1", "key with @"},
        TracestateCase{"1tenant@vendor=1", "1tenant@vendor=1", "key may start with a digit"},
        TracestateCase{"foo@=1", "foo@=1", "@ may end a key (Level 2)"},
        TracestateCase{"tenant@1vendor=1", "tenant@1vendor=1", "after @, a digit (Level 2)"},
        TracestateCase{"tenant@vendorvendorvendor=1", "tenant@vendorvendorvendor=1",
                       "no 14-character limit after @ (Level 2)"},
        TracestateCase{"@vendor=1,a=2", "", "a key must start with a letter or digit"},
        TracestateCase{"_abc=1,a=2", "", "a key must start with a letter or digit"},
        TracestateCase{"a_b-c*d/e@f=1", "a_b-c*d/e@f=1", "key punctuation allowed"},
        TracestateCase{"a=1,a=2,b=3", "a=1,b=3", "a repeated key keeps its first member"},
        TracestateCase{"foo=1,foo=1", "foo=1", "a member repeated as is is kept once"},
        TracestateCase{"foo=1,bar=2,foo=2", "foo=1,bar=2", "a later repeat is dropped in place"},
        TracestateCase{"a=1,a=2,B=3", "", "an invalid member still discards the whole value"},
        TracestateCase{"a=\x01,b=3", "", "a control character discards the whole value"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(Tracestate, ThirtyTwoMembersAreKeptAndMoreDiscardTheWholeValue) {
  std::string header;
  for (int i = 0; i < 32; ++i)
    header += (i ? "," : "") + std::string("k") + std::to_string(i) + "=v";
  EXPECT_EQ(sanitize_tracestate(header), header);
  EXPECT_EQ(sanitize_tracestate(header + ",k32=v"), "");
  // Fields of a header repeated over several lines are combined first.
  EXPECT_EQ(sanitize_tracestate(header + ",,"), header);
}

TEST(Tracestate, KeyAndValueLengthLimits) {
  EXPECT_TRUE(valid_tracestate_key(std::string(256, 'a')));
  EXPECT_FALSE(valid_tracestate_key(std::string(257, 'a')));
  EXPECT_TRUE(valid_tracestate_value(std::string(256, 'v')));
  EXPECT_FALSE(valid_tracestate_value(std::string(257, 'v')));
  // Level 2: '@' is a key character like the others, within the same 256.
  EXPECT_TRUE(valid_tracestate_key(std::string(241, 't') + "@" + std::string(14, 's')));
  EXPECT_TRUE(valid_tracestate_key(std::string(100, 't') + "@" + std::string(155, 's')));
  EXPECT_FALSE(valid_tracestate_key(std::string(100, 't') + "@" + std::string(156, 's')));
  EXPECT_TRUE(valid_tracestate_key("foo@"));
  EXPECT_TRUE(valid_tracestate_key("0"));
  EXPECT_FALSE(valid_tracestate_key("Foo"));
}

TEST(TraceContext, TracestateIgnoredWhenTraceparentInvalid) {
  EXPECT_FALSE(parse_trace_context("garbage", "a=1"));
  auto ctx =
      parse_trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1,b=2");
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->tracestate, "a=1,b=2");
  // An invalid member discards the whole tracestate, not the traceparent.
  ctx = parse_trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1,B=2");
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->tracestate, "");
}

}  // namespace
}  // namespace lens
