// Step figures: spans time their figure, recorded or not, only when the
// figures are on; each thread keeps its own totals.
#include "lens/step_figures.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "lens/tracer.h"
#include "memory_telemetry.h"

namespace lens {
namespace {

using namespace std::chrono_literals;

// Turns the figures on for one test and leaves them off after it.
class StepFiguresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_step_figures(true);
    take_step_figures();
  }
  void TearDown() override {
    set_step_figures(false);
    take_step_figures();
  }
};

TEST(StepFiguresOff, SpansTimeNothing) {
  ASSERT_FALSE(step_figures_on());
  take_step_figures();
  Tracer disabled;
  { Span s = disabled.start_span(SpanGroup::kMicrobatch, "megatron.microbatch.forward"); }
  { Span s = disabled.start_span(SpanGroup::kCommunication, "recv", StepFigure::kP2pWait); }
  testing::MemoryTelemetry t;
  { Span s = t.telemetry->tracer().start_span(SpanGroup::kMicrobatch, "forward"); }
  const StepFigureTotals totals = take_step_figures();
  for (int f = 0; f < kStepFigureCount; ++f) {
    EXPECT_EQ(totals.ns[f], 0) << f;
    EXPECT_EQ(totals.spans[f], 0u) << f;
  }
}

TEST_F(StepFiguresTest, AnUnrecordedSpanTimesItsGroupsFigure) {
  Tracer disabled;  // telemetry not initialised: nothing is recorded
  {
    Span s = disabled.start_span(SpanGroup::kMicrobatch, "megatron.microbatch.forward");
    EXPECT_FALSE(s.recording());
    std::this_thread::sleep_for(20ms);
  }
  { Span s = disabled.start_span(SpanGroup::kOptimizer, "megatron.optimizer.step"); }
  // A communication span counts only where its start names a figure.
  { Span s = disabled.start_span(SpanGroup::kCommunication, "megatron.tp.all_reduce"); }
  { Span s = disabled.start_span(SpanGroup::kStep, "megatron.train_step"); }
  const StepFigureTotals totals = take_step_figures();
  EXPECT_GE(totals[StepFigure::kCompute], 20'000'000);
  EXPECT_LT(totals[StepFigure::kCompute], 20'000'000'000);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kCompute)], 1u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kOptimizer)], 1u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kNone)], 0u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kP2pWait)], 0u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kAllReduce)], 0u);
  // Taken: the totals start again.
  EXPECT_EQ(take_step_figures()[StepFigure::kCompute], 0);
}

TEST_F(StepFiguresTest, TheStartNamesTheFigure) {
  Tracer disabled;
  { Span s = disabled.start_span(SpanGroup::kCommunication, "recv", StepFigure::kP2pWait); }
  { Span s = disabled.start_span(SpanGroup::kCommunication, "send", StepFigure::kP2pSend); }
  StartOptions o;
  o.figure = StepFigure::kAllReduce;
  { Span s = disabled.start_span(SpanGroup::kCommunication, "megatron.grads.all_reduce", o); }
  // Naming kNone takes a span out of its group's figure.
  o.figure = StepFigure::kNone;
  { Span s = disabled.start_span(SpanGroup::kMicrobatch, "nested", o); }
  const StepFigureTotals totals = take_step_figures();
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kP2pWait)], 1u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kP2pSend)], 1u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kAllReduce)], 1u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kCompute)], 0u);
}

TEST_F(StepFiguresTest, AMovedSpanCountsOnceWhenItEnds) {
  Tracer disabled;
  Span outer;
  {
    Span s = disabled.start_span(SpanGroup::kMicrobatch, "forward");
    outer = std::move(s);
    s.end();  // moved from: nothing
  }
  EXPECT_EQ(take_step_figures().spans[static_cast<int>(StepFigure::kCompute)], 0u);
  outer.end();
  outer.end();
  EXPECT_EQ(take_step_figures().spans[static_cast<int>(StepFigure::kCompute)], 1u);
}

TEST_F(StepFiguresTest, ARecordedSpanAddsTheDurationItIsExportedWith) {
  testing::MemoryTelemetry t;
  Tracer tracer = t.telemetry->tracer();
  {
    Span s = tracer.start_span(SpanGroup::kMicrobatch, "megatron.microbatch.backward");
    ASSERT_TRUE(s.recording());
    std::this_thread::sleep_for(5ms);
  }
  // Off at the start: the span counts nowhere, even though it ends with the figures on.
  set_step_figures(false);
  Span late = tracer.start_span(SpanGroup::kOptimizer, "megatron.optimizer.step");
  set_step_figures(true);
  late.end();
  const StepFigureTotals totals = take_step_figures();
  const auto spans = t.spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(totals[StepFigure::kCompute],
            static_cast<std::int64_t>(spans[0].end_time_unix_ns - spans[0].start_time_unix_ns));
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kCompute)], 1u);
  EXPECT_EQ(totals.spans[static_cast<int>(StepFigure::kOptimizer)], 0u);
}

TEST_F(StepFiguresTest, EachThreadKeepsItsOwnTotals) {
  Tracer disabled;
  std::thread other([&] {
    { Span s = disabled.start_span(SpanGroup::kMicrobatch, "forward"); }
    EXPECT_EQ(take_step_figures().spans[static_cast<int>(StepFigure::kCompute)], 1u);
  });
  other.join();
  EXPECT_EQ(take_step_figures().spans[static_cast<int>(StepFigure::kCompute)], 0u);
}

TEST(StepFigureNames, AsInMetricNames) {
  EXPECT_EQ(step_figure_name(StepFigure::kCompute), "compute");
  EXPECT_EQ(step_figure_name(StepFigure::kP2pWait), "p2p_wait");
  EXPECT_EQ(step_figure_name(StepFigure::kP2pSend), "p2p_send");
  EXPECT_EQ(step_figure_name(StepFigure::kAllReduce), "all_reduce");
  EXPECT_EQ(step_figure_name(StepFigure::kOptimizer), "optimizer");
  EXPECT_EQ(step_figure_name(StepFigure::kNone), "none");
  // Figures added by hand; out-of-range figures and negative times are ignored.
  take_step_figures();
  add_step_figure(StepFigure::kAllReduce, 7);
  add_step_figure(static_cast<StepFigure>(9), 7);
  add_step_figure(StepFigure::kCompute, -1);
  const StepFigureTotals totals = take_step_figures();
  EXPECT_EQ(totals[StepFigure::kAllReduce], 7);
  EXPECT_EQ(totals[StepFigure::kCompute], 0);
}

}  // namespace
}  // namespace lens
