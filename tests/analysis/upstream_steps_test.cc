// Megatron-LM's own traces read: the OTel SDK's console exporter lines as
// OTLP, and one rank's upstream spans correlated after the fact, each
// inferred figure worked by hand.
#include "upstream_steps.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "console_spans.h"

namespace lens::analysis {
namespace {

using json = nlohmann::json;

TEST(ConsoleSpans, Iso8601UtcTimesToUnixNanoseconds) {
  EXPECT_EQ(iso8601_unix_ns("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(iso8601_unix_ns("1970-01-01T00:00:01.5Z"), 1'500'000'000);
  EXPECT_EQ(iso8601_unix_ns("2026-12-04T14:42:53.205703Z"), 1796395373205703000LL);
  EXPECT_EQ(iso8601_unix_ns("2000-02-29T23:59:59.123456789+00:00"), 951868799123456789LL);
  for (const char* bad : {"", "2026-12-04", "2026-13-04T00:00:00Z", "2026-12-04T00:00:00",
                          "2026-12-04T00:00:00+01:00", "2026-12-04T00:00:00.Z", "x026-12-04T00:00:00Z"})
    EXPECT_FALSE(iso8601_unix_ns(bad)) << bad;
}

TEST(ConsoleSpans, ASpanOfTheSdksConsoleExporterReadsAsOtlp) {
  const json line = json::parse(R"({
    "name": "megatron.p2p.recv_forward",
    "context": {"trace_id": "0xC1E804C5B7606AA5AE7F0D4D4BCD6844", "span_id": "0xb59af387bd56bdc4",
                "trace_state": "[]"},
    "kind": "SpanKind.CLIENT", "parent_id": "0x26dd108bf673b1be",
    "start_time": "2026-12-04T14:42:53.205703Z", "end_time": "2026-12-04T14:42:53.205803Z",
    "status": {"status_code": "ERROR", "description": "late"},
    "attributes": {"b": true, "i": 3, "f": 0.5, "s": "x", "l": [1, 2]},
    "events": [{"name": "e", "timestamp": "2026-12-04T14:42:53.205750Z", "attributes": {}}],
    "links": [{"context": {"trace_id": "0x0af7651916cd43dd8448eb211c80319c",
                           "span_id": "0xb7ad6b7169203331", "trace_state": "[]"},
               "attributes": {"why": "w"}}],
    "resource": {"attributes": {"dl.rank": 1, "service.name": "megatron"}, "schema_url": ""}})");
  ASSERT_TRUE(is_console_span(line));
  EXPECT_FALSE(is_console_span(json::parse(R"({"resourceSpans": []})")));
  const json r = request_of_console_span(line);
  const json& span = r["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
  EXPECT_EQ(span["traceId"], "c1e804c5b7606aa5ae7f0d4d4bcd6844");
  EXPECT_EQ(span["spanId"], "b59af387bd56bdc4");
  EXPECT_EQ(span["parentSpanId"], "26dd108bf673b1be");
  EXPECT_EQ(span["kind"], 3);
  EXPECT_EQ(span["startTimeUnixNano"], "1796395373205703000");
  EXPECT_EQ(span["endTimeUnixNano"], "1796395373205803000");
  EXPECT_EQ(span["status"], json({{"code", 2}, {"message", "late"}}));
  std::map<std::string, json> attrs;
  for (const auto& a : span["attributes"]) attrs[a["key"]] = a["value"];
  EXPECT_EQ(attrs["b"], json({{"boolValue", true}}));
  EXPECT_EQ(attrs["i"], json({{"intValue", "3"}}));
  EXPECT_EQ(attrs["f"], json({{"doubleValue", 0.5}}));
  EXPECT_EQ(attrs["s"], json({{"stringValue", "x"}}));
  EXPECT_EQ(attrs["l"]["arrayValue"]["values"].size(), 2u);
  EXPECT_EQ(span["events"][0]["timeUnixNano"], "1796395373205750000");
  EXPECT_EQ(span["links"][0]["spanId"], "b7ad6b7169203331");
  EXPECT_EQ(r["resourceSpans"][0]["resource"]["attributes"][0]["key"], "dl.rank");
}

TEST(ConsoleSpans, ASpanThatDoesNotReadNamesTheField) {
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"name":"a","context":{"trace_id":"0x12","span_id":"0x0000000000000001"},
               "start_time":"2026-12-04T00:00:00Z","end_time":"2026-12-04T00:00:00Z"})",
            "context.trace_id"},
           {R"({"name":"a","context":{"trace_id":"0x0af7651916cd43dd8448eb211c80319c",
               "span_id":"0xzz00000000000001"},"start_time":"2026-12-04T00:00:00Z",
               "end_time":"2026-12-04T00:00:00Z"})",
            "context.span_id"},
           {R"({"name":"a","context":{"trace_id":"0x0af7651916cd43dd8448eb211c80319c",
               "span_id":"0x0000000000000001"},"start_time":"yesterday",
               "end_time":"2026-12-04T00:00:00Z"})",
            "start_time"}}) {
    try {
      request_of_console_span(json::parse(text));
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

json span(const std::string& name, const std::string& trace, int id, std::int64_t start,
          std::int64_t end, json attributes = json::array()) {
  char sid[17];
  std::snprintf(sid, sizeof sid, "%016x", id);
  return {{"traceId", trace},
          {"spanId", sid},
          {"name", name},
          {"startTimeUnixNano", std::to_string(start)},
          {"endTimeUnixNano", std::to_string(end)},
          {"attributes", attributes}};
}

json request(const json& resource, std::vector<json> spans) {
  return {{"resourceSpans",
           json::array({{{"resource", resource},
                         {"scopeSpans", json::array({{{"spans", spans}}})}}})}};
}

std::map<std::string, std::string> attrs_of(const json& s) {
  std::map<std::string, std::string> out;
  for (const auto& a : s["attributes"]) {
    const json& v = a["value"];
    out[a["key"]] = v.contains("intValue") ? v["intValue"].get<std::string>()
                                            : v.begin()->dump();
  }
  return out;
}

TEST(UpstreamSteps, OneRanksStepGetsItsStepMicrobatchIdsAndTransfersByOrder) {
  // Rank 5 of TP2 x PP4 (dp 1): stage 2 (5 = tp 1 + 2 x pp 2). Its step 9:
  // two microbatches, each received from stage 1, computed, sent to stage
  // 3; then their gradients back, in order. Upstream: no attributes.
  const json resource = {{"attributes",
                          {{{"key", "dl.rank"}, {"value", {{"intValue", "5"}}}},
                           {{"key", "dl.world_size"}, {"value", {{"intValue", "8"}}}},
                           {{"key", "dl.tensor_parallel.size"}, {"value", {{"intValue", "2"}}}},
                           {{"key", "dl.pipeline_parallel.size"}, {"value", {{"intValue", "4"}}}}}}};
  const std::string t = "0af7651916cd43dd8448eb211c80319c";
  std::vector<json> spans = {
      span("megatron.p2p.recv_forward", t, 1, 10, 11), span("megatron.microbatch.forward", t, 2, 11, 12),
      span("megatron.p2p.send_forward", t, 3, 12, 13), span("megatron.p2p.recv_forward", t, 4, 13, 14),
      span("megatron.microbatch.forward", t, 5, 14, 15), span("megatron.p2p.send_forward", t, 6, 15, 16),
      span("megatron.p2p.recv_backward", t, 7, 16, 17), span("megatron.microbatch.backward", t, 8, 17, 18),
      span("megatron.p2p.send_backward", t, 9, 18, 19), span("megatron.p2p.recv_backward", t, 10, 19, 20),
      span("megatron.microbatch.backward", t, 11, 20, 21), span("megatron.p2p.send_backward", t, 12, 21, 22),
      span("megatron.train.iteration.forward_backward", t, 13, 10, 22)};
  // Ended out of start order (as a console exporter writes them).
  std::swap(spans[0], spans[12]);
  UpstreamSteps up("tp-cp-ep-dp-pp");
  std::vector<std::string> out;
  up.add(request(resource, spans), out);
  EXPECT_TRUE(out.empty()) << "held until the step span ends";
  const json step = span("megatron.train.iteration", t, 14, 9, 23,
                         {{{"key", "megatron.iteration"}, {"value", {{"intValue", "9"}}}}});
  EXPECT_TRUE(is_upstream_step_span(step));
  up.add(request(resource, {step}), out);
  ASSERT_EQ(out.size(), 1u);
  const json line = json::parse(out[0]);
  std::map<std::string, std::string> res;
  for (const auto& a : line["resourceSpans"][0]["resource"]["attributes"])
    res[a["key"]] = a["value"].contains("intValue") ? a["value"]["intValue"].get<std::string>()
                                                     : a["value"]["stringValue"].get<std::string>();
  EXPECT_EQ(res["dl.pipeline_parallel.rank"], "2");
  EXPECT_EQ(res["dl.tensor_parallel.rank"], "1");
  EXPECT_EQ(res["dl.data_parallel.rank"], "0");
  EXPECT_EQ(res[kInferredAttribute], kInferredWhat);
  std::map<std::string, std::vector<std::map<std::string, std::string>>> by_name;
  for (const auto& s : line["resourceSpans"][0]["scopeSpans"][0]["spans"])
    by_name[s["name"]].push_back(attrs_of(s));
  ASSERT_EQ(by_name["megatron.train.iteration"].size(), 1u);
  EXPECT_EQ(by_name["megatron.train.iteration"][0]["dl.step"], "9");
  EXPECT_EQ(by_name["megatron.train.iteration"][0]["dl.pipeline_parallel.rank"], "2");
  EXPECT_EQ(by_name["megatron.train.iteration"][0]["dl.rank"], "5");
  for (const char* n : {"megatron.microbatch.forward", "megatron.microbatch.backward"}) {
    ASSERT_EQ(by_name[n].size(), 2u);
    EXPECT_EQ(by_name[n][0]["dl.microbatch_id"], "0");
    EXPECT_EQ(by_name[n][1]["dl.microbatch_id"], "1");
  }
  const std::map<std::string, std::pair<std::string, std::string>> transfers = {
      {"megatron.p2p.recv_forward", {"1", "dl.microbatch_id.received"}},
      {"megatron.p2p.send_forward", {"3", "dl.microbatch_id.sent"}},
      {"megatron.p2p.recv_backward", {"3", "dl.microbatch_id.received"}},
      {"megatron.p2p.send_backward", {"1", "dl.microbatch_id.sent"}}};
  for (const auto& [n, expect] : transfers) {
    ASSERT_EQ(by_name[n].size(), 2u) << n;
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(by_name[n][i]["dl.pipeline_parallel.peer_rank"], expect.first) << n;
      EXPECT_EQ(by_name[n][i][expect.second], std::to_string(i)) << n;
    }
  }
  EXPECT_EQ(up.steps(), 1u);
  EXPECT_EQ(up.p2p_spans(), 8u);
}

TEST(UpstreamSteps, UntracedCombinedCallsLeaveEveryTracedTransferOnItsMicrobatchAndAreCounted) {
  // Stage 1 of PP4, 1F1B with 4 microbatches: F0 F1 F2 B0 F3 B1 B2 B3. As
  // upstream traces it, the steady state's combined calls have no span:
  // F2's send and B0's receive, B0's send and F3's receive, F3's send and
  // B1's receive. What is traced: F0, F1 received and sent; F2 received;
  // B1's send; B2, B3 received and sent.
  const json resource = {{"attributes",
                          {{{"key", "dl.rank"}, {"value", {{"intValue", "1"}}}},
                           {{"key", "dl.pipeline_parallel.size"}, {"value", {{"intValue", "4"}}}}}}};
  const std::string t = "0af7651916cd43dd8448eb211c80319c";
  int id = 0, at = 100;
  std::vector<json> spans;
  const auto add = [&](const char* name) {
    spans.push_back(span(name, t, ++id, at, at + 1));
    at += 2;
  };
  for (int mb = 0; mb < 2; ++mb) {
    add("megatron.p2p.recv_forward");
    add("megatron.microbatch.forward");
    add("megatron.p2p.send_forward");
  }
  add("megatron.p2p.recv_forward");
  add("megatron.microbatch.forward");   // F2, its send combined
  add("megatron.microbatch.backward");  // B0: received and sent combined
  add("megatron.microbatch.forward");   // F3: received and sent combined
  add("megatron.microbatch.backward");  // B1: received combined
  add("megatron.p2p.send_backward");
  for (int mb = 2; mb < 4; ++mb) {
    add("megatron.p2p.recv_backward");
    add("megatron.microbatch.backward");
    add("megatron.p2p.send_backward");
  }
  spans.push_back(span("megatron.train.iteration", t, ++id, 99, at,
                       {{{"key", "megatron.iteration"}, {"value", {{"intValue", "0"}}}}}));
  UpstreamSteps up("tp-cp-ep-dp-pp");
  std::vector<std::string> out;
  up.add(request(resource, spans), out);
  ASSERT_EQ(out.size(), 1u);
  std::map<std::string, std::vector<std::string>> carried;
  const json line = json::parse(out[0]);
  for (const auto& s : line["resourceSpans"][0]["scopeSpans"][0]["spans"]) {
    const auto a = attrs_of(s);
    for (const char* key : {"dl.microbatch_id.received", "dl.microbatch_id.sent"})
      if (a.count(key)) carried[s["name"]].push_back(a.at(key));
  }
  using V = std::vector<std::string>;
  EXPECT_EQ(carried["megatron.p2p.recv_forward"], (V{"0", "1", "2"}));
  EXPECT_EQ(carried["megatron.p2p.send_forward"], (V{"0", "1"}));
  EXPECT_EQ(carried["megatron.p2p.send_backward"], (V{"1", "2", "3"}));
  EXPECT_EQ(carried["megatron.p2p.recv_backward"], (V{"2", "3"}));
  // recv_forward, send_forward, recv_backward, send_backward: 4 scheduled
  // each (stage 1 has both neighbours), untraced 1, 2, 2, 1.
  EXPECT_EQ(up.scheduled_transfers(), (UpstreamSteps::P2pCounts{4, 4, 4, 4}));
  EXPECT_EQ(up.untraced_transfers(), (UpstreamSteps::P2pCounts{1, 2, 2, 1}));
}

TEST(UpstreamSteps, MatchedMessagesBoundTheNextStagesClock) {
  // PP2, one step of one microbatch. True times (ns): stage 0 forwards
  // [100, 200], sends [200, 210], waits for the gradient [210, 400] and
  // runs backward [400, 500]; stage 1 receives [150, 215], forwards
  // [215, 300], runs backward [300, 390] and sends [390, 395]. Rank 1's
  // clock reads 1000 ns ahead of rank 0's.
  const auto resource = [](int rank) {
    return json{{"attributes",
                 {{{"key", "dl.rank"}, {"value", {{"intValue", std::to_string(rank)}}}},
                  {{"key", "dl.pipeline_parallel.size"}, {"value", {{"intValue", "2"}}}}}}};
  };
  const json iteration = {{{"key", "megatron.iteration"}, {"value", {{"intValue", "0"}}}}};
  const std::string t0 = "0af7651916cd43dd8448eb211c80319c", t1 = "1af7651916cd43dd8448eb211c80319c";
  UpstreamSteps zero("tp-cp-ep-dp-pp"), one("tp-cp-ep-dp-pp");
  std::vector<std::string> out;
  zero.add(request(resource(0), {span("megatron.microbatch.forward", t0, 1, 100, 200),
                                 span("megatron.p2p.send_forward", t0, 2, 200, 210),
                                 span("megatron.p2p.recv_backward", t0, 3, 210, 400),
                                 span("megatron.microbatch.backward", t0, 4, 400, 500),
                                 span("megatron.train.iteration", t0, 5, 90, 510, iteration)}),
           out);
  const int skew = 1000;
  one.add(request(resource(1), {span("megatron.p2p.recv_forward", t1, 1, 150 + skew, 215 + skew),
                                span("megatron.microbatch.forward", t1, 2, 215 + skew, 300 + skew),
                                span("megatron.microbatch.backward", t1, 3, 300 + skew, 390 + skew),
                                span("megatron.p2p.send_backward", t1, 4, 390 + skew, 395 + skew),
                                span("megatron.train.iteration", t1, 5, 140 + skew, 400 + skew, iteration)}),
          out);
  ASSERT_EQ(out.size(), 2u);
  // offset(1) - offset(0) = d: forward, 200 - 1215 <= d; backward,
  // d <= 400 - 1390. So d in [-1015, -990]: the least correction is -990,
  // within 25 ns of the truth (-1000).
  const MessageClocks m = clocks_from_messages({&zero, &one});
  EXPECT_TRUE(m.notes.empty());
  ASSERT_EQ(m.clocks.size(), 2u);
  EXPECT_EQ(m.clocks[0].rank, 0);
  EXPECT_EQ(m.clocks[0].offset_ns, 0);
  EXPECT_EQ(m.clocks[1].rank, 1);
  EXPECT_EQ(m.clocks[1].offset_ns, -990);
  EXPECT_EQ(m.clocks[1].uncertainty_ns, 25);
  EXPECT_EQ(m.clocks[1].messages, 2u);
  EXPECT_FALSE(m.clocks[1].contradicted);
  EXPECT_LE(std::abs(m.clocks[1].offset_ns - -skew), m.clocks[1].uncertainty_ns);
  // Without the backward transfer there is no upper bound: named, not guessed.
  UpstreamSteps lone("tp-cp-ep-dp-pp");
  lone.add(request(resource(1), {span("megatron.p2p.recv_forward", t1, 1, 1150, 1215),
                                 span("megatron.microbatch.forward", t1, 2, 1215, 1300),
                                 span("megatron.train.iteration", t1, 5, 1140, 1400, iteration)}),
           out);
  const MessageClocks half = clocks_from_messages({&zero, &lone});
  EXPECT_EQ(half.clocks.size(), 1u);
  ASSERT_EQ(half.notes.size(), 1u);
  EXPECT_NE(half.notes[0].find("no backward transfer between stage 0 and 1"), std::string::npos)
      << half.notes[0];
}

TEST(UpstreamSteps, WhatTheSpanSaysWinsAndStepsWithoutAnIterationAreCounted) {
  const json resource = {{"attributes", {{{"key", "dl.rank"}, {"value", {{"intValue", "0"}}}}}}};
  UpstreamSteps up("tp-cp-ep-dp-pp");
  std::vector<std::string> out;
  for (int step = 0; step < 2; ++step) {
    const std::string t = std::string(31, '0') + std::to_string(step + 1);
    up.add(request(resource, {span("megatron.microbatch.forward", t, 1, 1, 2,
                                   {{{"key", "dl.microbatch_id"}, {"value", {{"intValue", "7"}}}}}),
                              span("megatron.train.iteration", t, 2, 0, 3)}),
           out);
  }
  up.add(request(resource, {span("megatron.checkpoint", "ffffffffffffffffffffffffffffffff", 3, 4, 5)}),
         out);
  up.finish(out);
  ASSERT_EQ(out.size(), 3u) << "two steps, then the span of no step";
  for (int step = 0; step < 2; ++step) {
    const json line = json::parse(out[static_cast<std::size_t>(step)]);
    const auto& spans = line["resourceSpans"][0]["scopeSpans"][0]["spans"];
    EXPECT_EQ(attrs_of(spans[0])["dl.microbatch_id"], "7") << "the span's own";
    EXPECT_EQ(attrs_of(spans[1])["dl.step"], std::to_string(step)) << "counted";
  }
  EXPECT_NE(out[2].find("megatron.checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace lens::analysis
