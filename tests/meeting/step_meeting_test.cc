// StepMeeting (step_meeting.h): ranks on threads of one process meet over
// an in-process group; every rank reaches the same verdicts from the same
// figures, rank 0 marks its step span, tail selection keeps the same steps
// everywhere, a rank's extra words come back to every rank, and bad options
// and a broken group are refused.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "lens/error.h"
#include "lens/in_process_communicator.h"
#include "lens/step_meeting.h"
#include "lens/telemetry.h"
#include "memory_telemetry.h"

namespace lens {
namespace {

// 2 stages x 2 replicas: rank r is stage r / 2, replica r % 2.
std::vector<RankCoordinates> places(int ranks) {
  std::vector<RankCoordinates> out;
  for (int r = 0; r < ranks; ++r) out.push_back({r, r / 2, r % 2, 0});
  return out;
}

struct RankSeen {
  std::vector<std::vector<LiveStraggler>> named;  // per meeting
  std::vector<std::vector<double>> scores;
  std::vector<std::vector<std::vector<std::int64_t>>> words;
  std::vector<std::int64_t> met_at;
  std::vector<SpanRecord> spans;
  bool finished = false;
};

const AttributeValue* attribute(const std::vector<Attribute>& attributes, std::string_view key) {
  for (const auto& a : attributes)
    if (a.key == key) return &a.value;
  return nullptr;
}

// `ranks` ranks run `steps` steps of 1 ms compute; `slow` computes 4x from
// step `slow_from` on. Meetings every `every` steps.
std::vector<RankSeen> run_job(int ranks, int steps, int every, int slow, int slow_from,
                              bool tail, bool extra) {
  InProcessGroup group(ranks);
  std::vector<RankSeen> seen(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions t;
      t.rank = r;
      t.world_size = ranks;
      t.tail_selection = tail;
      t.tail_keep = 1;
      testing::MemoryTelemetry m(t);
      StepMeetingOptions o;
      o.live_every = every;
      o.ranks = places(ranks);
      if (extra) o.extra_words = [r] { return std::vector<std::int64_t>{r, 100 + r}; };
      StepMeeting meeting(m.telemetry.get(), *comm, o);
      RankSeen& mine = seen[static_cast<std::size_t>(r)];
      const auto keep = [&](const MeetingOutcome& met, std::int64_t step) {
        mine.named.push_back(met.stragglers);
        mine.scores.push_back(met.scores);
        mine.words.push_back(met.words);
        mine.met_at.push_back(step);
      };
      for (int step = 0; step < steps; ++step) {
        Span span = m.telemetry->tracer().start_span(SpanGroup::kStep, "megatron.train_step");
        span.set_attribute("dl.step", std::int64_t{step});
        if (meeting.tail_selection())
          m.telemetry->hold_step(static_cast<std::uint64_t>(step), span.context());
        const double compute_ms = r == slow && step >= slow_from ? 4.0 : 1.0;
        // Step 5 is rank 1's slowest: the one tail selection keeps of its window.
        const double seconds = 0.01 * (step == 5 && r == 1 ? 9 : 1);
        if (meeting.step_done(static_cast<std::uint64_t>(step), compute_ms, seconds))
          keep(meeting.meet(step, &span), step);
        span.end();
      }
      if (const auto met = meeting.finish(steps - 1)) {
        keep(*met, steps - 1);
        mine.finished = true;
      }
      mine.spans = m.spans();
    });
  for (auto& t : threads) t.join();
  return seen;
}

TEST(StepMeeting, EveryRankNamesTheSameStragglerAndRankZeroMarksItsStepSpan) {
  const auto seen = run_job(4, 8, 2, /*slow=*/3, /*slow_from=*/4, false, false);
  for (const RankSeen& s : seen) {
    ASSERT_EQ(s.met_at, (std::vector<std::int64_t>{1, 3, 5, 7})) << "every 2 steps";
    EXPECT_FALSE(s.finished) << "nothing held and no words: no closing meeting";
    EXPECT_EQ(s.scores, seen[0].scores);
    ASSERT_EQ(s.named.size(), 4u);
    EXPECT_TRUE(s.named[0].empty() && s.named[1].empty());
    ASSERT_EQ(s.named[2].size(), 1u) << "named in the window where it slowed";
    EXPECT_EQ(s.named[2][0].who.rank, 3);
    EXPECT_EQ(s.named[2][0].step, 5);
    EXPECT_NEAR(s.named[2][0].factor, 4.0, 1e-9);
    EXPECT_TRUE(s.named[3].empty()) << "named once while it stays as slow";
  }
  EXPECT_NEAR(seen[0].scores[2][3], 4.0, 1e-9);
  EXPECT_NEAR(seen[0].scores[2][0], 1.0, 1e-9);
  // Rank 0's step 5 span carries the event; no other rank's does.
  for (std::size_t r = 0; r < seen.size(); ++r) {
    int events = 0;
    for (const SpanRecord& span : seen[r].spans)
      for (const auto& e : span.events)
        if (e.name == "lens.straggler") {
          ++events;
          EXPECT_EQ(std::get<std::int64_t>(*attribute(span.attributes, "dl.step")), 5);
          EXPECT_EQ(std::get<std::int64_t>(*attribute(e.attributes, "dl.rank")), 3);
          EXPECT_EQ(std::get<std::int64_t>(*attribute(e.attributes, "dl.pipeline_parallel.rank")), 1);
          // 4x both its start and its stage's other rank (rank 2).
          EXPECT_EQ(std::get<std::string>(*attribute(e.attributes, "lens.against")), "peers");
        }
    EXPECT_EQ(events, r == 0 ? 1 : 0) << "rank " << r;
  }
}

TEST(StepMeeting, TailSelectionKeepsTheSameStepsEverywhereAndTheLastWindowAtFinish) {
  // Meetings every 4 steps (the live rule's), 7 steps: windows 0-3, 4-6.
  const auto seen = run_job(2, 7, 4, -1, 0, true, false);
  for (const RankSeen& s : seen) {
    EXPECT_EQ(s.met_at, (std::vector<std::int64_t>{3, 6}));
    EXPECT_TRUE(s.finished) << "the last, partial window is chosen at finish";
    std::set<std::int64_t> exported;
    std::vector<std::string> kept;
    for (const SpanRecord& span : s.spans) {
      if (span.name == "lens.tail_selection")
        kept.push_back(std::get<std::string>(*attribute(span.attributes, "lens.tail.kept")));
      if (const auto* step = attribute(span.attributes, "dl.step"))
        exported.insert(std::get<std::int64_t>(*step));
    }
    ASSERT_EQ(kept.size(), 2u);
    EXPECT_EQ(kept[1].substr(0, 2), "5:") << "rank 1's slow step 5 is kept on every rank";
    EXPECT_TRUE(exported.count(5));
    EXPECT_EQ(exported.size(), 2u) << "one step of each window (tail_keep 1)";
  }
  EXPECT_EQ(seen[0].spans.size(), seen[1].spans.size());
}

TEST(StepMeeting, ExtraWordsComeBackPerRankAtEveryMeetingAndAtFinish) {
  const auto seen = run_job(3, 12, 0, -1, 0, false, true);
  for (const RankSeen& s : seen) {
    // No cadence of its own: every 10 steps, then once more at finish.
    EXPECT_EQ(s.met_at, (std::vector<std::int64_t>{9, 11}));
    ASSERT_TRUE(s.finished);
    ASSERT_EQ(s.words.size(), 2u);
    for (const auto& met : s.words) {
      ASSERT_EQ(met.size(), 3u);
      for (std::int64_t r = 0; r < 3; ++r)
        EXPECT_EQ(met[static_cast<std::size_t>(r)], (std::vector<std::int64_t>{r, 100 + r}));
    }
    EXPECT_TRUE(s.scores[0].empty()) << "no live rule";
  }
}

TEST(StepMeeting, OptionsThatCannotWorkAreRefused) {
  InProcessGroup group(1);
  auto comm = group.communicator(0);
  StepMeetingOptions o;
  o.live_every = -1;
  EXPECT_THROW(StepMeeting(nullptr, *comm, o), ConfigError);
  o.live_every = 5;  // no places
  EXPECT_THROW(StepMeeting(nullptr, *comm, o), ConfigError);
  o.ranks = {{1, 0, 0, 0}};  // rank 0's place says rank 1
  EXPECT_THROW(StepMeeting(nullptr, *comm, o), ConfigError);
  o.ranks = {{0, 0, 0, 0}};
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(StepMeeting(nullptr, *comm, o), ConfigError);
  StepMeetingOptions off;
  StepMeeting idle(nullptr, *comm, off);
  EXPECT_EQ(idle.every(), 0);
  EXPECT_FALSE(idle.step_done(0, 1.0, 0.01)) << "never meets";
  EXPECT_FALSE(idle.finish(0).has_value());
}

// A group whose all-gather fails, as a lost peer makes it.
class BrokenGroup : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string engine() const override { return "broken"; }
  void broadcast(std::span<std::uint8_t>, int, std::chrono::milliseconds) override {}
  void send(std::span<const std::uint8_t>, int, int, std::chrono::milliseconds) override {}
  void recv(std::span<std::uint8_t>, int, int, std::chrono::milliseconds) override {}

 protected:
  void gather_from_all(std::span<const std::uint8_t>, std::span<std::uint8_t>,
                       std::chrono::milliseconds) override {
    throw CommError(describe_failure("all_gather", "peer lost"));
  }
};

TEST(StepMeeting, AFailedAllGatherThrowsAndLeavesAFailureRecordOnWhatIsOpen) {
  testing::MemoryTelemetry m;
  BrokenGroup broken;
  StepMeetingOptions o;
  o.live_every = 1;
  o.ranks = {{0, 0, 0, 0}, {1, 1, 0, 0}};
  o.who = "trainer: rank 0";
  StepMeeting meeting(m.telemetry.get(), broken, o);
  Span step = m.telemetry->tracer().start_span(SpanGroup::kStep, "megatron.train_step");
  ASSERT_TRUE(meeting.step_done(0, 1.0, 0.01));
  EXPECT_THROW(meeting.meet(0, &step), CommError);
  step.end();
  bool marked = false;
  for (const SpanRecord& span : m.spans())
    for (const auto& e : span.events)
      if (e.name == "lens.failure") {
        marked = true;
        const auto* detail = attribute(e.attributes, "lens.detail");
        ASSERT_NE(detail, nullptr);
        EXPECT_NE(std::get<std::string>(*detail).find("the live meeting's all-gather"),
                  std::string::npos);
        EXPECT_NE(std::get<std::string>(*detail).find("peer lost"), std::string::npos);
      }
  EXPECT_TRUE(marked);
}

}  // namespace
}  // namespace lens
