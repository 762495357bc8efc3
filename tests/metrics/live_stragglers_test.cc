// The live straggler rule over hand-made windows: a rank that slows down is
// named once (against its own start, or against its stage's other ranks),
// a stage that does more work from the start is not, a rank that recovers
// may be named again, and figures that are not figures are ignored.
#include "lens/live_stragglers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace lens {
namespace {

// pp 2 x dp 2 (Megatron's order, tp 1): ranks 0, 1 stage 0; 2, 3 stage 1.
std::vector<RankCoordinates> pp2_dp2() {
  return {{0, 0, 0, 0}, {1, 0, 1, 0}, {2, 1, 0, 0}, {3, 1, 1, 0}};
}

TEST(LiveStragglerRule, NamesARankThatSlowsDownOnceAgainstItsStagesOtherRanks) {
  LiveStragglerRule rule(pp2_dp2());
  EXPECT_TRUE(rule.observe(9, {10, 10, 12, 12}).empty());
  EXPECT_TRUE(rule.observe(19, {10, 11, 12, 13}).empty()) << "noise under 1.5x";
  const auto named = rule.observe(29, {10, 10, 12, 48});
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].who.rank, 3);
  EXPECT_EQ(named[0].who.stage, 1);
  EXPECT_EQ(named[0].who.replica, 1);
  EXPECT_EQ(named[0].step, 29);
  EXPECT_DOUBLE_EQ(named[0].factor, 4.0);
  EXPECT_EQ(named[0].describe(),
            "rank 3 (stage 1, replica 1, tensor rank 0) is a straggler at step 29: 4.0x its "
            "stage's other ranks");
  EXPECT_DOUBLE_EQ(rule.score(3), 4.0);
  EXPECT_TRUE(rule.observe(39, {10, 10, 12, 50}).empty()) << "named once while it stays slow";
  EXPECT_TRUE(rule.observe(49, {10, 10, 12, 12}).empty());
  EXPECT_LT(rule.score(3), 1.5) << "recovered";
  EXPECT_EQ(rule.observe(59, {10, 10, 12, 40}).size(), 1u) << "slow again: named again";
}

TEST(LiveStragglerRule, ARankNamedAtALowFactorIsNamedAgainWhenItGetsMarkedlyWorse) {
  LiveStragglerRule rule(pp2_dp2());
  EXPECT_TRUE(rule.observe(4, {10, 10, 12, 12}).empty());
  ASSERT_EQ(rule.observe(9, {10, 10, 12, 20}).size(), 1u) << "1.67x: named (noise, perhaps)";
  EXPECT_TRUE(rule.observe(14, {10, 10, 12, 24}).empty()) << "2x: not markedly worse than 1.67x";
  const auto worse = rule.observe(19, {10, 10, 12, 48});
  ASSERT_EQ(worse.size(), 1u) << "4x: 1.5 times the factor it was named at";
  EXPECT_DOUBLE_EQ(worse[0].factor, 4.0);
}

TEST(LiveStragglerRule, AStageThatDoesMoreWorkIsNotAStragglerButARankAloneIsAgainstItsStart) {
  // One pipeline (no peers): stage 1 does 3x the work from the start.
  LiveStragglerRule pipeline({{0, 0, 0, 0}, {1, 1, 0, 0}});
  EXPECT_TRUE(pipeline.observe(9, {10, 30}).empty());
  EXPECT_TRUE(pipeline.observe(19, {10, 31}).empty());
  // Then stage 0 slows down 3x: named against its own first steps.
  const auto named = pipeline.observe(29, {30, 31});
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].who.rank, 0);
  EXPECT_FALSE(named[0].against_peers);
  EXPECT_NE(named[0].describe().find("3.0x its own first steps"), std::string::npos);
  // With replicas, a slow stage's ranks are as slow as each other.
  LiveStragglerRule replicas(pp2_dp2());
  EXPECT_TRUE(replicas.observe(9, {10, 10, 40, 40}).empty());
  EXPECT_TRUE(replicas.observe(19, {10, 10, 41, 39}).empty());
}

TEST(LiveStragglerRule, FiguresThatAreNotFiguresAreIgnoredAndBadSetupsRefused) {
  LiveStragglerRule rule(pp2_dp2());
  EXPECT_TRUE(rule.observe(9, {NAN, -1, 0, INFINITY}).empty());
  EXPECT_TRUE(rule.observe(19, {10, 10}).empty()) << "not one figure per rank";
  EXPECT_TRUE(rule.observe(29, {10, 10, 12, 12}).empty()) << "the first usable window is the start";
  EXPECT_THROW(LiveStragglerRule({{1, 0, 0, 0}}), std::invalid_argument);
  EXPECT_THROW(LiveStragglerRule(pp2_dp2(), 1.0), std::invalid_argument);
}

}  // namespace
}  // namespace lens
