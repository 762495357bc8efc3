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

TEST_P(TracestateTable, DropsInvalidMembersOneByOne) {
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
        TracestateCase{"Rojo=1,congo=2", "congo=2", "uppercase key dropped alone"},
        TracestateCase{"rojo=1,congo", "rojo=1", "member without '=' dropped"},
        TracestateCase{"rojo=,congo=2", "congo=2", "empty value dropped"},
        TracestateCase{"rojo=a=b,congo=2", "congo=2", "'=' inside value dropped"},
        TracestateCase{"rojo=trailing ,congo=2", "rojo=trailing,congo=2",
                       "optional whitespace after a member is not part of the value"},
        TracestateCase{"rojo=in side,congo=2", "rojo=in side,congo=2",
                       "space inside a value is allowed"},
        TracestateCase{"tenant@vendor=1", "tenant@vendor=1", "multi-tenant key"},
        TracestateCase{"1tenant@vendor=1", "1tenant@vendor=1", "tenant may start with a digit"},
        TracestateCase{"tenant@1vendor=1,a=2", "a=2", "system id must start with a letter"},
        TracestateCase{"tenant@vendorvendorvendor=1,a=2", "a=2", "system id over 14 chars"},
        TracestateCase{"@vendor=1,a=2", "a=2", "empty tenant"},
        TracestateCase{"1abc=1,a=2", "a=2", "simple key must start with a letter"},
        TracestateCase{"a_b-c*d/e=1", "a_b-c*d/e=1", "key punctuation allowed"},
        TracestateCase{"a=1,a=2,b=3", "a=1,b=3", "duplicate key: first kept"},
        TracestateCase{"a=\x01,b=3", "b=3", "control character in value"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(Tracestate, KeepsAtMost32Members) {
  std::string header;
  for (int i = 0; i < 40; ++i)
    header += (i ? "," : "") + std::string("k") + std::to_string(i) + "=v";
  std::string out = sanitize_tracestate(header);
  EXPECT_EQ(std::count(out.begin(), out.end(), '='), 32);
  EXPECT_NE(out.find("k31=v"), std::string::npos);
  EXPECT_EQ(out.find("k32=v"), std::string::npos);
}

TEST(Tracestate, InvalidMembersDoNotCountTowardTheLimit) {
  std::string header = "BAD=1";
  for (int i = 0; i < 32; ++i) header += ",k" + std::to_string(i) + "=v";
  std::string out = sanitize_tracestate(header);
  EXPECT_EQ(std::count(out.begin(), out.end(), '='), 32);
  EXPECT_NE(out.find("k31=v"), std::string::npos);
}

TEST(Tracestate, KeyAndValueLengthLimits) {
  EXPECT_TRUE(valid_tracestate_key(std::string(256, 'a')));
  EXPECT_FALSE(valid_tracestate_key(std::string(257, 'a')));
  EXPECT_TRUE(valid_tracestate_value(std::string(256, 'v')));
  EXPECT_FALSE(valid_tracestate_value(std::string(257, 'v')));
  EXPECT_TRUE(valid_tracestate_key(std::string(241, 't') + "@" + std::string(14, 's')));
  EXPECT_FALSE(valid_tracestate_key(std::string(242, 't') + "@s"));
}

TEST(TraceContext, TracestateIgnoredWhenTraceparentInvalid) {
  EXPECT_FALSE(parse_trace_context("garbage", "a=1"));
  auto ctx =
      parse_trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1,B=2");
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->tracestate, "a=1");
}

}  // namespace
}  // namespace lens
