// The OTLP protobuf encoder (otlp_proto.h), decoded by libprotobuf with the
// OTLP trace schema (support/otlp_trace.proto): every field lens writes must
// come back as it went in.
#include "lens/otlp_proto.h"

#include <gtest/gtest.h>

#include "otlp_trace.pb.h"

namespace lens {
namespace {

namespace pb = lens::test::otlp;

std::string bytes_of(const TraceId& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes().data()), id.bytes().size());
}
std::string bytes_of(const SpanId& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes().data()), id.bytes().size());
}

pb::ExportTraceServiceRequest decode(const std::string& wire) {
  pb::ExportTraceServiceRequest request;
  EXPECT_TRUE(request.ParseFromString(wire));
  return request;
}

TEST(OtlpProto, SpanFieldsRoundTripThroughLibprotobuf) {
  InstrumentationScope scope{"nemo.lens", "0.1"};
  SpanRecord s;
  s.scope = &scope;
  s.name = "megatron.pp.recv_forward.linked";
  s.kind = SpanKind::kClient;
  s.context.trace_id = IdGenerator::new_trace_id();
  s.context.span_id = IdGenerator::new_span_id();
  s.context.trace_flags = TraceFlags::kSampled;
  s.context.tracestate = "vendor=1";
  s.parent_span_id = IdGenerator::new_span_id();
  s.start_time_unix_ns = 1'700'000'000'000'000'123;
  s.end_time_unix_ns = 1'700'000'000'000'900'456;
  s.attributes = {{"dl.microbatch_id", std::int64_t{-3}},
                  {"dl.loss", 0.25},
                  {"ok", true},
                  {"who", std::string("rank 1")}};
  s.dropped_attributes_count = 2;
  s.events = {
      SpanEvent{"lens.failure", s.start_time_unix_ns + 5, {{"lens.detail", std::string("x")}}, 0}};
  SpanContext target{IdGenerator::new_trace_id(), IdGenerator::new_span_id(), 1, "", true};
  s.links = {SpanLink{target, {{"lens.link", std::string("global_rank_0_step")}}}};
  s.status_code = StatusCode::kError;
  s.status_message = "lost peer";

  Resource resource;
  resource.set("service.name", std::string("megatron-lm"));
  resource.set("dl.rank", std::int64_t{1});

  std::string wire;
  const SpanRecord* batch[] = {&s};
  append_otlp_proto(wire, resource, batch);
  const auto request = decode(wire);

  ASSERT_EQ(request.resource_spans_size(), 1);
  const auto& rs = request.resource_spans(0);
  ASSERT_EQ(rs.resource().attributes_size(), 2);
  EXPECT_EQ(rs.resource().attributes(0).key(), "service.name");
  EXPECT_EQ(rs.resource().attributes(0).value().string_value(), "megatron-lm");
  EXPECT_EQ(rs.resource().attributes(1).value().int_value(), 1);
  ASSERT_EQ(rs.scope_spans_size(), 1);
  EXPECT_EQ(rs.scope_spans(0).scope().name(), "nemo.lens");
  EXPECT_EQ(rs.scope_spans(0).scope().version(), "0.1");
  ASSERT_EQ(rs.scope_spans(0).spans_size(), 1);
  const auto& span = rs.scope_spans(0).spans(0);
  EXPECT_EQ(span.name(), s.name);
  EXPECT_EQ(span.kind(), pb::Span::SPAN_KIND_CLIENT);
  EXPECT_EQ(span.trace_id(), bytes_of(s.context.trace_id));
  EXPECT_EQ(span.span_id(), bytes_of(s.context.span_id));
  EXPECT_EQ(span.parent_span_id(), bytes_of(s.parent_span_id));
  EXPECT_EQ(span.trace_state(), "vendor=1");
  EXPECT_EQ(span.start_time_unix_nano(), static_cast<std::uint64_t>(s.start_time_unix_ns));
  EXPECT_EQ(span.end_time_unix_nano(), static_cast<std::uint64_t>(s.end_time_unix_ns));
  ASSERT_EQ(span.attributes_size(), 4);
  EXPECT_EQ(span.attributes(0).value().int_value(), -3);
  EXPECT_DOUBLE_EQ(span.attributes(1).value().double_value(), 0.25);
  EXPECT_TRUE(span.attributes(2).value().bool_value());
  EXPECT_EQ(span.attributes(3).value().string_value(), "rank 1");
  EXPECT_EQ(span.dropped_attributes_count(), 2u);
  ASSERT_EQ(span.events_size(), 1);
  EXPECT_EQ(span.events(0).name(), "lens.failure");
  EXPECT_EQ(span.events(0).time_unix_nano(), static_cast<std::uint64_t>(s.start_time_unix_ns + 5));
  ASSERT_EQ(span.links_size(), 1);
  EXPECT_EQ(span.links(0).trace_id(), bytes_of(target.trace_id));
  EXPECT_EQ(span.links(0).span_id(), bytes_of(target.span_id));
  ASSERT_EQ(span.links(0).attributes_size(), 1);
  EXPECT_EQ(span.links(0).attributes(0).value().string_value(), "global_rank_0_step");
  EXPECT_EQ(span.status().code(), pb::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(span.status().message(), "lost peer");
}

TEST(OtlpProto, SpansAreGroupedByScopeInOrderOfFirstAppearance) {
  InstrumentationScope a{"a", ""}, b{"b", ""};
  std::vector<SpanRecord> records(4);
  const InstrumentationScope* scopes[] = {&a, &b, &a, &b};
  std::vector<const SpanRecord*> batch;
  for (std::size_t i = 0; i < records.size(); ++i) {
    records[i].scope = scopes[i];
    records[i].name = "s" + std::to_string(i);
    records[i].context = SpanContext{IdGenerator::new_trace_id(), IdGenerator::new_span_id(), 1};
    batch.push_back(&records[i]);
  }
  std::string wire;
  append_otlp_proto(wire, Resource{}, batch);
  const auto request = decode(wire);
  ASSERT_EQ(request.resource_spans_size(), 1);
  const auto& rs = request.resource_spans(0);
  ASSERT_EQ(rs.scope_spans_size(), 2);
  EXPECT_EQ(rs.scope_spans(0).scope().name(), "a");
  ASSERT_EQ(rs.scope_spans(0).spans_size(), 2);
  EXPECT_EQ(rs.scope_spans(0).spans(0).name(), "s0");
  EXPECT_EQ(rs.scope_spans(0).spans(1).name(), "s2");
  EXPECT_EQ(rs.scope_spans(1).scope().name(), "b");
  EXPECT_EQ(rs.scope_spans(1).spans(1).name(), "s3");
}

TEST(OtlpProto, AppendsToWhatIsInTheBuffer) {
  std::string wire = "prefix";
  SpanRecord s;
  s.name = "x";
  const SpanRecord* batch[] = {&s};
  append_otlp_proto(wire, Resource{}, batch);
  ASSERT_EQ(wire.substr(0, 6), "prefix");
  const auto request = decode(wire.substr(6));
  ASSERT_EQ(request.resource_spans_size(), 1);
}

TEST(OtlpProto, InvalidUtf8BecomesTheReplacementCharacterAndTheRequestParses) {
  SpanRecord s;
  s.name = std::string("mb\xff") + "\xc3";  // a stray byte, then a cut sequence
  s.context.trace_id = IdGenerator::new_trace_id();
  s.context.span_id = IdGenerator::new_span_id();
  s.attributes = {{"who", std::string("\xe2\x82\xac ok")}};  // valid: left as it is
  std::string wire;
  const SpanRecord* batch[] = {&s};
  ASSERT_TRUE(append_otlp_proto(wire, Resource{}, batch));
  const auto request = decode(wire);  // libprotobuf refuses invalid UTF-8 in a string
  const auto& span = request.resource_spans(0).scope_spans(0).spans(0);
  EXPECT_EQ(span.name(), "mb\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(span.attributes(0).value().string_value(), "\xe2\x82\xac ok");
}

TEST(OtlpProto, ARequestOver256MiBIsReportedNotCorrupted) {
  SpanRecord s;
  s.name = "big";
  s.context.trace_id = IdGenerator::new_trace_id();
  s.context.span_id = IdGenerator::new_span_id();
  s.attributes = {{"blob", std::string((std::size_t{1} << 28) + 16, 'x')}};
  std::string wire;
  const SpanRecord* batch[] = {&s};
  EXPECT_FALSE(append_otlp_proto(wire, Resource{}, batch));
  s.attributes = {{"blob", std::string(1000, 'x')}};
  wire.clear();
  EXPECT_TRUE(append_otlp_proto(wire, Resource{}, batch));
}

}  // namespace
}  // namespace lens
