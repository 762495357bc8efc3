// Tail selection's hold (docs/tail-selection.md) through the telemetry: held
// steps' spans wait until the ranks choose, the kept ones (and what ends
// later) are exported, the others are released and counted, room is bounded
// and never waited for, a flush never waits for what is held, and a
// shutdown exports what was never chosen.
#include <gtest/gtest.h>

#include <set>

#include "lens/telemetry.h"
#include "memory_telemetry.h"

namespace lens {
namespace {

using testing::MemoryTelemetry;

TelemetryOptions holding(std::uint32_t steps = 8, std::uint32_t mb = 64) {
  TelemetryOptions o;
  o.tail_selection = true;
  o.tail_hold_steps = steps;
  o.tail_hold_mb = mb;
  return o;
}

// One step: a root span (its trace is the step's) and `children` spans in
// it; returns the step span's context.
SpanContext run_step(Telemetry& t, std::uint64_t step, int children) {
  Tracer tracer = t.tracer();
  Span root = tracer.start_span(SpanGroup::kStep, "megatron.train_step");
  root.set_attribute("dl.step", static_cast<std::int64_t>(step));
  const SpanContext c = root.context();
  t.hold_step(step, c);
  CurrentSpanScope scope(root);
  for (int i = 0; i < children; ++i) tracer.start_span(SpanGroup::kMicrobatch, "forward").end();
  return c;
}

std::set<std::int64_t> steps_exported(const std::vector<SpanRecord>& spans) {
  std::set<std::int64_t> steps;
  for (const auto& s : spans)
    for (const auto& a : s.attributes)
      if (a.key == "dl.step") steps.insert(std::get<std::int64_t>(a.value));
  return steps;
}

TEST(StepHold, KeptStepsAreExportedWholeAndTheOthersCountedNotSelected) {
  MemoryTelemetry m(holding());
  Telemetry& t = *m.telemetry;
  ASSERT_TRUE(t.holds_steps());
  std::vector<SpanContext> steps;
  for (std::uint64_t s = 0; s < 4; ++s) steps.push_back(run_step(t, s, 3));
  // Outside any step: exported as always.
  t.tracer().start_span(SpanGroup::kJob, "megatron.job").end();
  EXPECT_EQ(m.spans().size(), 1u) << "held steps wait; the flush does not wait for them";
  t.settle_steps({1, 3}, {0, 2});
  // A span of a kept step that ends after the choice goes out too; one of a
  // step not selected does not.
  for (std::uint64_t s : {1, 2}) {
    SpanContext parent = steps[s];
    StartOptions o;
    o.parent = parent;
    t.tracer().start_span(SpanGroup::kMicrobatch, "late", o).end();
  }
  const auto spans = m.spans();
  EXPECT_EQ(steps_exported(spans), (std::set<std::int64_t>{1, 3}));
  std::size_t of_kept = 0;
  for (const auto& s : spans)
    of_kept += (s.context.trace_id == steps[1].trace_id || s.context.trace_id == steps[3].trace_id);
  EXPECT_EQ(of_kept, 4u + 4u + 1u) << "each kept step whole, and the late span";
  const TelemetryStats stats = t.stats();
  ASSERT_TRUE(stats.hold.has_value());
  EXPECT_EQ(stats.hold->steps_held, 4u);
  EXPECT_EQ(stats.hold->steps_kept, 2u);
  EXPECT_EQ(stats.hold->steps_not_selected, 2u);
  EXPECT_EQ(stats.hold->spans_not_selected, 9u);
  EXPECT_GT(stats.hold->bytes_peak, 0u);
  const SpanAccount account = SpanAccount::of(stats);
  EXPECT_EQ(account.not_selected, 9u);
  EXPECT_EQ(account.dropped(), 0u);
  EXPECT_EQ(account.ended, account.exported + account.not_selected);
  EXPECT_NE(account.describe().find("9 not selected (tail selection)"), std::string::npos);
}

TEST(StepHold, RoomIsBoundedAndNeverWaitedFor) {
  // Two steps at once: a third waiting step is refused.
  MemoryTelemetry m(holding(2));
  Telemetry& t = *m.telemetry;
  for (std::uint64_t s = 0; s < 3; ++s) run_step(t, s, 2);
  m.spans();
  t.settle_steps({0, 1, 2}, {});
  EXPECT_EQ(steps_exported(m.spans()), (std::set<std::int64_t>{0, 1}));
  const TelemetryStats stats = t.stats();
  EXPECT_EQ(stats.hold->steps_refused, 1u);
  EXPECT_EQ(stats.hold->spans_no_room, 3u);
  EXPECT_EQ(SpanAccount::of(stats).dropped_hold_full, 3u);

  // A step larger than the bytes: what does not fit is lost, counted.
  TelemetryOptions o = holding(8, 1);
  o.max_queue_size = 1 << 14;  // the queue takes them all: the hold is what bounds
  MemoryTelemetry small(o);
  Telemetry& u = *small.telemetry;
  run_step(u, 0, 5000);  // ~5000 records of a few hundred bytes: over 1 MiB
  small.spans();
  u.settle_steps({0}, {});
  const std::size_t exported = small.spans().size();
  const TelemetryStats st = u.stats();
  EXPECT_EQ(st.hold->steps_over_bytes, 1u);
  EXPECT_GT(st.hold->spans_no_room, 0u);
  EXPECT_EQ(exported + st.hold->spans_no_room, 5001u);
  EXPECT_LE(st.hold->bytes_peak, 1u << 20);
}

TEST(StepHold, AShutdownExportsTheStepsNeverChosen) {
  MemoryTelemetry m(holding());
  Telemetry& t = *m.telemetry;
  run_step(t, 7, 2);
  EXPECT_EQ(m.spans().size(), 0u);
  ASSERT_TRUE(t.shutdown(std::chrono::seconds(10)));
  EXPECT_EQ(steps_exported(m.exporter->spans()), (std::set<std::int64_t>{7}));
  EXPECT_EQ(t.stats().hold->steps_undecided, 1u);
}

TEST(StepHold, OffByDefaultAndAnUnsampledStepIsNotHeld) {
  MemoryTelemetry plain;
  EXPECT_FALSE(plain.telemetry->holds_steps());
  run_step(*plain.telemetry, 0, 2);
  EXPECT_EQ(plain.spans().size(), 3u);
  EXPECT_FALSE(plain.telemetry->stats().hold.has_value());
}

}  // namespace
}  // namespace lens
