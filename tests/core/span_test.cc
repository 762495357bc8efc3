#include "lens/span.h"

#include <gtest/gtest.h>

#include <thread>

#include "lens/tracer.h"
#include "memory_telemetry.h"
#include "remote_context.h"

namespace lens {
namespace {

using testing::MemoryTelemetry;

const SpanRecord* find(const std::vector<SpanRecord>& spans, std::string_view name) {
  for (const auto& s : spans)
    if (s.name == name) return &s;
  return nullptr;
}

TEST(Span, DisabledGroupRecordsNothing) {
  TelemetryOptions opts;
  opts.span_groups.emplace("default");
  MemoryTelemetry mt(opts);
  Tracer tracer = mt.telemetry->tracer();
  EXPECT_FALSE(tracer.enabled(SpanGroup::kCommunication));
  {
    Span s = tracer.start_span(SpanGroup::kCommunication, "megatron.p2p.send_forward");
    EXPECT_FALSE(s.recording());
    EXPECT_FALSE(s.context().valid());
    s.set_attribute("k", 1);
    s.add_event("e");
    s.add_link(SpanContext());
    CurrentSpanScope scope(s);
    EXPECT_FALSE(current_span_context().valid());
  }
  Span job = tracer.start_span(SpanGroup::kJob, "job");
  EXPECT_TRUE(job.recording());
  job.end();
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].name, "job");
}

TEST(Span, DefaultTracerIsDisabled) {
  Tracer tracer;
  EXPECT_FALSE(tracer.enabled(SpanGroup::kJob));
  Span s = tracer.start_span(SpanGroup::kJob, "x");
  EXPECT_FALSE(s.recording());
}

TEST(Span, RecordsNameKindTimesAttributesEventsStatus) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer("my.scope", "1.2");
  StartOptions opts;
  opts.kind = SpanKind::kProducer;
  {
    Span s = tracer.start_span(SpanGroup::kStep, "megatron.train_step", opts);
    s.set_attribute("b", true);
    s.set_attribute("i", 42);
    s.set_attribute("u", std::uint32_t{7});
    s.set_attribute("d", 2.5);
    s.set_attribute("s", "text");
    s.set_attribute("sv", std::string_view("view"));
    s.set_attribute("arr", AttributeValue(std::vector<std::int64_t>{1, 2, 3}));
    s.set_attribute("i", 43);  // replaces
    s.add_event("checkpoint", {{"bytes", std::int64_t{1024}}});
    s.set_status(StatusCode::kError, "boom");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 1u);
  const SpanRecord& r = spans[0];
  EXPECT_EQ(r.name, "megatron.train_step");
  EXPECT_EQ(r.kind, SpanKind::kProducer);
  EXPECT_EQ(r.group, SpanGroup::kStep);
  ASSERT_NE(r.scope, nullptr);
  EXPECT_EQ(r.scope->name, "my.scope");
  EXPECT_EQ(r.scope->version, "1.2");
  EXPECT_GE(r.end_time_unix_ns - r.start_time_unix_ns, 2'000'000);
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  EXPECT_LT(std::llabs(now - r.start_time_unix_ns), 10'000'000'000LL);
  ASSERT_EQ(r.attributes.size(), 7u);
  EXPECT_EQ(std::get<bool>(*find_attribute(r.attributes, "b")), true);
  EXPECT_EQ(std::get<std::int64_t>(*find_attribute(r.attributes, "i")), 43);
  EXPECT_EQ(std::get<std::int64_t>(*find_attribute(r.attributes, "u")), 7);
  EXPECT_EQ(std::get<double>(*find_attribute(r.attributes, "d")), 2.5);
  EXPECT_EQ(std::get<std::string>(*find_attribute(r.attributes, "s")), "text");
  EXPECT_EQ(std::get<std::string>(*find_attribute(r.attributes, "sv")), "view");
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(*find_attribute(r.attributes, "arr")),
            (std::vector<std::int64_t>{1, 2, 3}));
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].name, "checkpoint");
  EXPECT_GE(r.events[0].time_unix_ns, r.start_time_unix_ns);
  EXPECT_LE(r.events[0].time_unix_ns, r.end_time_unix_ns);
  EXPECT_EQ(r.status_code, StatusCode::kError);
  EXPECT_EQ(r.status_message, "boom");
  EXPECT_TRUE(r.context.sampled());
  EXPECT_FALSE(r.has_parent());
}

TEST(Span, StatusOkIsFinalAndUnsetIgnored) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  {
    Span s = tracer.start_span(SpanGroup::kJob, "a");
    s.set_status(StatusCode::kOk, "ignored message");
    s.set_status(StatusCode::kError, "late");
    s.set_status(StatusCode::kUnset);
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].status_code, StatusCode::kOk);
  EXPECT_EQ(spans[0].status_message, "");
}

TEST(Span, EndAtEndsAtTheTimeGivenNeverBeforeItsStart) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  StartOptions at;
  at.start_time_unix_ns = 1'700'000'000'000'000'000;
  {
    Span s = tracer.start_span(SpanGroup::kJob, "given", at);
    s.end_at(1'700'000'000'250'000'000);
    s.end_at(1'800'000'000'000'000'000);  // ended: no-op
  }
  {
    Span early = tracer.start_span(SpanGroup::kJob, "before its start", at);
    early.end_at(1'600'000'000'000'000'000);
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].start_time_unix_ns, 1'700'000'000'000'000'000);
  EXPECT_EQ(spans[0].end_time_unix_ns, 1'700'000'000'250'000'000);
  EXPECT_EQ(spans[1].end_time_unix_ns, spans[1].start_time_unix_ns);
}

TEST(Span, ScopeMakesChildrenAndNests) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  SpanContext outer_ctx, inner_ctx;
  {
    Span outer = tracer.start_span(SpanGroup::kJob, "outer");
    outer_ctx = outer.context();
    CurrentSpanScope s1(outer);
    EXPECT_EQ(current_span_context(), outer_ctx);
    {
      Span inner = tracer.start_span(SpanGroup::kStep, "inner");
      inner_ctx = inner.context();
      CurrentSpanScope s2(inner);
      Span leaf = tracer.start_span(SpanGroup::kStep, "leaf");
    }
    EXPECT_EQ(current_span_context(), outer_ctx);
    Span sibling = tracer.start_span(SpanGroup::kStep, "sibling");
    StartOptions root;
    root.root = true;
    Span detached = tracer.start_span(SpanGroup::kStep, "root", root);
  }
  EXPECT_FALSE(current_span_context().valid());
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 5u);
  EXPECT_EQ(find(spans, "inner")->parent_span_id, outer_ctx.span_id);
  EXPECT_EQ(find(spans, "inner")->context.trace_id, outer_ctx.trace_id);
  EXPECT_EQ(find(spans, "leaf")->parent_span_id, inner_ctx.span_id);
  EXPECT_EQ(find(spans, "sibling")->parent_span_id, outer_ctx.span_id);
  EXPECT_FALSE(find(spans, "root")->has_parent());
  EXPECT_NE(find(spans, "root")->context.trace_id, outer_ctx.trace_id);
  EXPECT_FALSE(find(spans, "outer")->has_parent());
}

TEST(Span, ExplicitRemoteParentAndJoiningATraceAsRoot) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  const SpanContext remote = testing::remote_context("vendor=1");
  const SpanId reserved = IdGenerator::new_span_id();
  {
    StartOptions child;
    child.parent = remote;
    Span a = tracer.start_span(SpanGroup::kStep, "child-of-remote", child);
    StartOptions join;
    join.context = SpanContext{remote.trace_id, reserved, remote.trace_flags};
    Span b = tracer.start_span(SpanGroup::kStep, "joined-root", join);
    EXPECT_EQ(b.context().span_id, reserved);
  }
  auto spans = mt.spans();
  const auto* a = find(spans, "child-of-remote");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->context.trace_id, remote.trace_id);
  EXPECT_EQ(a->parent_span_id, remote.span_id);
  EXPECT_TRUE(a->parent_remote);
  EXPECT_EQ(a->context.tracestate, "vendor=1");
  const auto* b = find(spans, "joined-root");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->context.trace_id, remote.trace_id);
  EXPECT_EQ(b->context.span_id, reserved);
  EXPECT_FALSE(b->has_parent());
}

TEST(Span, UnsampledSpansAreNotExportedButPropagate) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  {
    StartOptions opts;
    opts.context = SpanContext{TraceId(), SpanId(), 0};
    Span s = tracer.start_span(SpanGroup::kStep, "unsampled", opts);
    EXPECT_TRUE(s.context().valid());
    CurrentSpanScope scope(s);
    Span child = tracer.start_span(SpanGroup::kStep, "child");
    EXPECT_FALSE(child.context().sampled());
    EXPECT_EQ(child.context().trace_id, s.context().trace_id);
  }
  EXPECT_TRUE(mt.spans().empty());
}

TEST(Span, LinksCarryTheirOwnAttributesAndInvalidLinksAreIgnored) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  const SpanContext target = testing::remote_context();
  {
    StartOptions opts;
    opts.links.push_back({target, {{"at", std::string("start")}}, 0});
    opts.links.push_back({SpanContext(), {}, 0});
    Span s = tracer.start_span(SpanGroup::kCommunication, "linked", opts);
    s.add_link(target, {{"at", std::string("later")}});
    s.add_link(SpanContext());
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 1u);
  ASSERT_EQ(spans[0].links.size(), 2u);
  EXPECT_EQ(spans[0].links[0].context, target);
  EXPECT_EQ(std::get<std::string>(spans[0].links[0].attributes[0].value), "start");
  EXPECT_EQ(std::get<std::string>(spans[0].links[1].attributes[0].value), "later");
  EXPECT_EQ(spans[0].dropped_links_count, 0u);
}

TEST(Span, LimitsDropAndCount) {
  TelemetryOptions opts;
  SpanLimits limits;
  limits.attribute_count = 3;
  limits.event_count = 2;
  limits.link_count = 1;
  limits.attribute_per_event_count = 1;
  limits.attribute_per_link_count = 2;
  opts.span_limits = limits;
  MemoryTelemetry mt(opts);
  Tracer tracer = mt.telemetry->tracer();
  SpanContext target;
  target.trace_id = IdGenerator::new_trace_id();
  target.span_id = IdGenerator::new_span_id();
  {
    Span s = tracer.start_span(SpanGroup::kJob, "limited");
    for (int i = 0; i < 10; ++i) s.set_attribute("k" + std::to_string(i), i);
    s.set_attribute("k0", 100);  // replacing an existing key is not dropped
    for (int i = 0; i < 5; ++i) s.add_event("e", {{"a", true}, {"b", true}, {"c", true}});
    for (int i = 0; i < 4; ++i) s.add_link(target, {{"x", 1.0}, {"y", 2.0}, {"z", 3.0}});
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 1u);
  const auto& r = spans[0];
  EXPECT_EQ(r.attributes.size(), 3u);
  EXPECT_EQ(r.dropped_attributes_count, 7u);
  EXPECT_EQ(std::get<std::int64_t>(*find_attribute(r.attributes, "k0")), 100);
  EXPECT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.dropped_events_count, 3u);
  EXPECT_EQ(r.events[0].attributes.size(), 1u);
  EXPECT_EQ(r.events[0].dropped_attributes_count, 2u);
  EXPECT_EQ(r.links.size(), 1u);
  EXPECT_EQ(r.dropped_links_count, 3u);
  EXPECT_EQ(r.links[0].attributes.size(), 2u);
  EXPECT_EQ(r.links[0].dropped_attributes_count, 1u);
}

TEST(Span, MoveTransfersOwnershipAndEndIsIdempotent) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  {
    Span a = tracer.start_span(SpanGroup::kJob, "moved");
    Span b = std::move(a);
    EXPECT_FALSE(a.recording());
    EXPECT_TRUE(b.recording());
    b.end();
    b.end();
    EXPECT_FALSE(b.recording());
    Span c = tracer.start_span(SpanGroup::kJob, "assigned-over");
    c = tracer.start_span(SpanGroup::kJob, "assigned");
  }
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_NE(find(spans, "moved"), nullptr);
  EXPECT_NE(find(spans, "assigned-over"), nullptr);
  EXPECT_NE(find(spans, "assigned"), nullptr);
}

TEST(Span, RecycledRecordsStartClean) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  for (int i = 0; i < 200; ++i) {
    Span s = tracer.start_span(SpanGroup::kJob, i % 2 ? "odd" : "even");
    if (i % 2) {
      s.set_attribute("only-odd", i);
      s.add_event("odd-event");
      s.set_status(StatusCode::kError, "odd");
    }
    if (i % 50 == 0) mt.telemetry->flush(std::chrono::seconds(5));
  }
  for (const auto& r : mt.spans()) {
    if (r.name == "even") {
      EXPECT_TRUE(r.attributes.empty());
      EXPECT_TRUE(r.events.empty());
      EXPECT_EQ(r.status_code, StatusCode::kUnset);
      EXPECT_EQ(r.status_message, "");
    } else {
      EXPECT_EQ(r.attributes.size(), 1u);
    }
  }
}

// A recycled record keeps its earlier attributes' slots to reuse in place:
// none of them may show in a later span that sets fewer, other or
// differently typed attributes, nor in the copy shutdown makes of an open
// span, nor count against the attribute limit.
TEST(Span, ReusedAttributeSlotsNeverShow) {
  TelemetryOptions opts;
  SpanLimits limits;
  limits.attribute_count = 2;
  opts.span_limits = limits;
  MemoryTelemetry mt(opts);
  Tracer tracer = mt.telemetry->tracer();
  constexpr int kSpans = 600;  // more than the thread's record cache, so records come back
  for (int i = 0; i < kSpans; ++i) {
    Span s = tracer.start_span(SpanGroup::kJob, "s" + std::to_string(i % 3));
    if (i % 3 == 0) {
      s.set_attribute("dl.long_key_for_a_heap_buffer.a", i);
      s.set_attribute("dl.long_key_for_a_heap_buffer.b", std::string(40, 'x'));
      s.set_attribute("dl.over_the_limit", 1);  // dropped
    } else if (i % 3 == 1) {
      s.set_attribute("dl.long_key_for_a_heap_buffer.b", i);  // was a string in the slot
    }
    if (i % 100 == 99) mt.telemetry->flush(std::chrono::seconds(5));
  }
  Span open = tracer.start_span(SpanGroup::kJob, "open");
  open.set_attribute("dl.only", true);
  auto spans = mt.spans();
  ASSERT_EQ(spans.size(), static_cast<std::size_t>(kSpans));
  for (const auto& r : spans) {
    if (r.name == "s0") {
      ASSERT_EQ(r.attributes.size(), 2u);
      EXPECT_EQ(r.attributes[0].key, "dl.long_key_for_a_heap_buffer.a");
      EXPECT_EQ(std::get<std::string>(r.attributes[1].value), std::string(40, 'x'));
      EXPECT_EQ(r.dropped_attributes_count, 1u);
    } else if (r.name == "s1") {
      ASSERT_EQ(r.attributes.size(), 1u);
      EXPECT_EQ(r.attributes[0].key, "dl.long_key_for_a_heap_buffer.b");
      EXPECT_TRUE(std::holds_alternative<std::int64_t>(r.attributes[0].value));
      EXPECT_EQ(r.dropped_attributes_count, 0u);
    } else {
      EXPECT_TRUE(r.attributes.empty()) << r.attributes[0].key;
      EXPECT_EQ(r.dropped_attributes_count, 0u);
    }
  }
  ASSERT_TRUE(mt.telemetry->shutdown(std::chrono::seconds(10)));
  const auto all = mt.exporter->spans();
  const SpanRecord* truncated = find(all, "open");
  ASSERT_NE(truncated, nullptr);
  ASSERT_EQ(truncated->attributes.size(), 2u);
  EXPECT_EQ(truncated->attributes[0].key, "dl.only");
  EXPECT_EQ(truncated->attributes[1].key, "nemo.span.truncated");
}

// A recycled record's kept slot is taken without a search when it already
// holds the key: keys of one length, the same key set twice (a
// replacement), keys that differ in one byte and a slot whose value had
// another type must all come out as the span set them.
TEST(Span, AttributesOfReusedSlotsAreExactlyWhatTheSpanSet) {
  MemoryTelemetry mt;
  Tracer tracer = mt.telemetry->tracer();
  constexpr int kSpans = 600;  // more than the thread's record cache
  for (int i = 0; i < kSpans; ++i) {
    Span s = tracer.start_span(SpanGroup::kJob, "k" + std::to_string(i % 4));
    switch (i % 4) {
      case 0:
        s.set_attribute("dl.key_a", i);
        s.set_attribute("dl.key_b", 2.5);
        break;
      case 1:  // the same length, the other order, then a replacement
        s.set_attribute("dl.key_b", true);
        s.set_attribute("dl.key_a", i);
        s.set_attribute("dl.key_b", i + 1);
        break;
      case 2:  // one byte apart from case 0's keys
        s.set_attribute("dl.key_c", i);
        s.set_attribute("dl.kez_a", i);
        break;
      case 3:  // the same key twice in a row
        s.set_attribute("dl.key_a", 1);
        s.set_attribute("dl.key_a", i);
        break;
    }
    if (i % 100 == 99) mt.telemetry->flush(std::chrono::seconds(5));
  }
  const auto spans = mt.spans();
  ASSERT_EQ(spans.size(), static_cast<std::size_t>(kSpans));
  const auto expect = [](const SpanRecord& r,
                         std::vector<std::pair<std::string, AttributeValue>> want) {
    ASSERT_EQ(r.attributes.size(), want.size()) << r.name;
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(r.attributes[k].key, want[k].first) << r.name;
      EXPECT_EQ(r.attributes[k].value, want[k].second) << r.name << " " << want[k].first;
    }
    EXPECT_EQ(r.dropped_attributes_count, 0u);
  };
  for (const auto& r : spans) {
    const std::int64_t i = std::get<std::int64_t>(
        *find_attribute(r.attributes, r.name == "k2" ? "dl.key_c" : "dl.key_a"));
    if (r.name == "k0")
      expect(r, {{"dl.key_a", i}, {"dl.key_b", 2.5}});
    else if (r.name == "k1")
      expect(r, {{"dl.key_b", i + 1}, {"dl.key_a", i}});
    else if (r.name == "k2")
      expect(r, {{"dl.key_c", i}, {"dl.kez_a", i}});
    else
      expect(r, {{"dl.key_a", i}});
    EXPECT_EQ(i % 4, std::stoi(r.name.substr(1))) << r.name;
  }
}

// A recycled record keeps its earlier links' slots to reuse in place: a
// later span shows exactly its own links (fewer, none, more, with and
// without tracestate or attributes), the link limit counts its links
// only, and the copy shutdown makes of an open span has none of the kept.
TEST(Span, LinksOfReusedSlotsAreExactlyWhatTheSpanAdded) {
  TelemetryOptions opts;
  SpanLimits limits;
  limits.link_count = 2;
  opts.span_limits = limits;
  MemoryTelemetry mt(opts);
  Tracer tracer = mt.telemetry->tracer();
  SpanContext with_state = testing::remote_context();
  with_state.tracestate = "k=v";
  std::vector<SpanContext> others;
  for (int k = 0; k < 3; ++k) others.push_back(testing::remote_context());
  constexpr int kSpans = 600;  // more than the thread's record cache, so records come back
  for (int i = 0; i < kSpans; ++i) {
    Span s = tracer.start_span(SpanGroup::kJob, "l" + std::to_string(i % 3));
    switch (i % 3) {
      case 0:  // two links, the first with tracestate and attributes, a third dropped
        s.add_link(with_state, {{"lens.link", std::string("first")}});
        s.add_link(others[0]);
        s.add_link(others[1]);
        break;
      case 1:  // one bare link into a slot that held tracestate and attributes
        s.add_link(others[2]);
        break;
      case 2:  // none
        break;
    }
    if (i % 100 == 99) mt.telemetry->flush(std::chrono::seconds(5));
  }
  StartOptions with_link;
  with_link.links.push_back({others[1], {}});
  // Links given at the start, into records that kept other slots.
  for (int i = 0; i < 100; ++i) tracer.start_span(SpanGroup::kJob, "l4", with_link).end();
  Span open = tracer.start_span(SpanGroup::kJob, "open");
  open.add_link(others[0]);
  const auto spans = mt.spans();
  ASSERT_EQ(spans.size(), static_cast<std::size_t>(kSpans + 100));
  const auto expect = [](const SpanRecord& r, std::vector<const SpanContext*> want,
                         std::uint32_t dropped) {
    ASSERT_EQ(r.links.size(), want.size()) << r.name;
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(r.links[k].context.span_id, want[k]->span_id) << r.name;
      EXPECT_EQ(r.links[k].context.tracestate, want[k]->tracestate) << r.name;
    }
    EXPECT_EQ(r.dropped_links_count, dropped) << r.name;
  };
  for (const auto& r : spans) {
    if (r.name == "l0") {
      expect(r, {&with_state, &others[0]}, 1);
      ASSERT_EQ(r.links[0].attributes.size(), 1u);
      EXPECT_EQ(r.links[0].attributes[0].key, "lens.link");
      EXPECT_TRUE(r.links[1].attributes.empty());
    } else if (r.name == "l1") {
      expect(r, {&others[2]}, 0);
      EXPECT_TRUE(r.links[0].attributes.empty());
      EXPECT_EQ(r.links[0].dropped_attributes_count, 0u);
    } else if (r.name == "l4") {
      expect(r, {&others[1]}, 0);
    } else {
      expect(r, {}, 0);
    }
  }
  ASSERT_TRUE(mt.telemetry->shutdown(std::chrono::seconds(10)));
  const auto all = mt.exporter->spans();
  const SpanRecord* truncated = find(all, "open");
  ASSERT_NE(truncated, nullptr);
  expect(*truncated, {&others[0]}, 0);
}

TEST(Span, ManyThreadsRecordConcurrently) {
  TelemetryOptions opts;
  opts.max_queue_size = 1 << 16;
  opts.max_export_batch_size = 256;
  MemoryTelemetry mt(opts);
  Tracer tracer = mt.telemetry->tracer();
  constexpr int kThreads = 4, kSpans = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSpans; ++i) {
        Span s = tracer.start_span(SpanGroup::kMicrobatch, "work");
        s.set_attribute("thread", t);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mt.spans().size(), static_cast<std::size_t>(kThreads * kSpans));
}

}  // namespace
}  // namespace lens

namespace lens {
namespace {

// A sampler that is not parent-based (traceidratio) decides for roots and
// remote parents; a step's children follow the step's own decision, which
// lens made once for the whole step (here given as the step's context).
TEST(Sampling, ChildrenOfALocalSpanFollowItsDecisionUnderANonParentBasedSampler) {
  for (const char* ratio : {"0", "1"}) {
    testing::MemoryTelemetry mt(
        {}, {{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", ratio}});
    Tracer tracer = mt.telemetry->tracer();
    for (const bool kept : {true, false}) {
      StartOptions step_start;
      step_start.root = true;
      step_start.context = SpanContext{IdGenerator::new_trace_id(), IdGenerator::new_span_id(),
                                       kept ? TraceFlags::kSampled : std::uint8_t{0}, "", false};
      Span step = tracer.start_span(SpanGroup::kStep, "megatron.train_step", step_start);
      CurrentSpanScope scope(step);
      Span child = tracer.start_span(SpanGroup::kMicrobatch, "megatron.microbatch.forward");
      EXPECT_EQ(child.context().sampled(), kept) << "ratio " << ratio;
    }
  }
  // A remote parent is still decided again by the sampler.
  testing::MemoryTelemetry never(
      {}, {{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "0"}});
  StartOptions remote;
  remote.parent = SpanContext{IdGenerator::new_trace_id(), IdGenerator::new_span_id(),
                              TraceFlags::kSampled, "", true};
  EXPECT_FALSE(
      never.telemetry->tracer().start_span(SpanGroup::kJob, "x", remote).context().sampled());
}

}  // namespace
}  // namespace lens
