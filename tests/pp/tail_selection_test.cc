// Tail selection's choice: the slowest steps of a window by their slowest
// rank, where a rank's slowdown began, a baseline from the run's key; the
// same on every rank from the same figures.
#include "lens/tail_selection.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lens {
namespace {

std::vector<std::uint64_t> window(std::uint64_t first, std::size_t n) {
  std::vector<std::uint64_t> steps;
  for (std::size_t i = 0; i < n; ++i) steps.push_back(first + i);
  return steps;
}

TEST(TailSelector, KeepsTheSlowestStepsByTheirSlowestRank) {
  TailSelector selector(2, 0, 7);
  // Rank 0 is slow at step 3, rank 1 at step 7: the end-to-end time is the
  // slower rank's; step 5 is slow on nobody.
  std::vector<std::vector<double>> seconds(2, std::vector<double>(10, 0.05));
  seconds[0][3] = 0.20;
  seconds[1][7] = 0.30;
  const TailChoice c = selector.choose(window(0, 10), seconds);
  EXPECT_EQ(c.keep, (std::vector<std::uint64_t>{3, 7}));
  EXPECT_EQ(c.drop, (std::vector<std::uint64_t>{0, 1, 2, 4, 5, 6, 8, 9}));
  ASSERT_EQ(c.kept.size(), 2u);
  EXPECT_EQ(c.kept[0].reason, "slowest");
  EXPECT_DOUBLE_EQ(c.kept[0].seconds, 0.20);
  EXPECT_DOUBLE_EQ(c.kept[1].seconds, 0.30);
  // Ties go to the earlier step.
  TailSelector ties(1, 0, 7);
  const TailChoice t =
      ties.choose(window(10, 4), std::vector<std::vector<double>>(3, {0.1, 0.2, 0.2, 0.1}));
  EXPECT_EQ(t.keep, (std::vector<std::uint64_t>{11}));
}

TEST(TailSelector, EveryRankChoosesAlikeFromTheSameFigures) {
  // Each rank runs its own selector over the gathered figures: the same
  // choice, window after window, whatever its own times were.
  std::vector<TailSelector> ranks(4, TailSelector(1, 20, 0x5eed));
  for (std::uint64_t w = 0; w < 20; ++w) {
    std::vector<std::vector<double>> seconds(4, std::vector<double>(10));
    for (std::size_t r = 0; r < 4; ++r)
      for (std::size_t i = 0; i < 10; ++i)
        seconds[r][i] = 0.05 + 0.001 * static_cast<double>((r * 7 + i * 13 + w * 5) % 11);
    const TailChoice first = ranks[0].choose(window(w * 10, 10), seconds);
    for (std::size_t r = 1; r < 4; ++r) {
      const TailChoice other = ranks[r].choose(window(w * 10, 10), seconds);
      EXPECT_EQ(other.keep, first.keep) << "window " << w << " rank " << r;
      EXPECT_EQ(other.drop, first.drop);
    }
    EXPECT_EQ(first.keep.size() + first.drop.size(), 10u);
  }
}

TEST(TailSelector, KeepsTheStepWhereARanksSlowdownBegan) {
  TailSelector selector(1, 0, 1);
  std::vector<std::vector<double>> seconds(2, std::vector<double>(10, 0.05));
  EXPECT_EQ(selector.choose(window(0, 10), seconds).keep.size(), 1u);  // the first window
  EXPECT_EQ(selector.choose(window(10, 10), seconds).keep.size(), 1u);
  // Rank 1 slows down 3x from step 20 and more so later: the slowest step
  // is 29, and the slowdown began at 20.
  for (std::size_t i = 5; i < 10; ++i) seconds[1][i] = 0.15 + 0.01 * static_cast<double>(i);
  for (std::size_t i = 0; i < 5; ++i) seconds[1][i] = 0.16 + 0.005 * static_cast<double>(i);
  TailChoice c = selector.choose(window(20, 10), seconds);
  ASSERT_EQ(c.kept.size(), 2u);
  EXPECT_EQ(c.kept[0].step, 20u);
  EXPECT_EQ(c.kept[0].reason, "onset of rank 1");
  EXPECT_EQ(c.kept[1].step, 29u);
  EXPECT_EQ(c.kept[1].reason, "slowest");
  // Still slow in the next window: no new onset.
  c = selector.choose(window(30, 10), seconds);
  EXPECT_EQ(c.keep.size(), 1u);
}

TEST(TailSelector, TheBaselineIsTheRunsOwnShareOfSteps) {
  const std::vector<std::vector<double>> flat(2, std::vector<double>(1000, 0.05));
  TailSelector a(1, 10, 42), b(1, 10, 42), other(1, 10, 43);
  const TailChoice ca = a.choose(window(0, 1000), flat);
  const TailChoice cb = b.choose(window(0, 1000), flat);
  const TailChoice co = other.choose(window(0, 1000), flat);
  EXPECT_EQ(ca.keep, cb.keep);
  EXPECT_NE(ca.keep, co.keep) << "another run's key, other steps";
  EXPECT_GT(ca.keep.size(), 1u + 50u);
  EXPECT_LT(ca.keep.size(), 1u + 150u);
  TailSelector all(1, 100, 42), none(1, 0, 42);
  EXPECT_EQ(all.choose(window(0, 1000), flat).keep.size(), 1000u);
  EXPECT_EQ(none.choose(window(0, 1000), flat).keep.size(), 1u);
}

TEST(TailSelector, FiguresThatAreNotFiguresChooseNothing) {
  TailSelector selector(2, 0, 1);
  std::vector<std::vector<double>> seconds = {{NAN, -1, INFINITY, 0.1}, {NAN}};
  const TailChoice c = selector.choose(window(0, 4), seconds);
  EXPECT_EQ(c.keep, (std::vector<std::uint64_t>{3}));
  EXPECT_EQ(c.drop, (std::vector<std::uint64_t>{0, 1, 2}));
  EXPECT_TRUE(selector.choose({}, {}).keep.empty());
}

}  // namespace
}  // namespace lens
