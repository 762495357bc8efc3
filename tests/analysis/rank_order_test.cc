// place_rank: a global rank's coordinates from the layout's sizes, by hand
// for Megatron's default order and another, and every refusal named.
#include "rank_order.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace lens::analysis {
namespace {

TEST(RankOrder, MegatronsDefaultOrderVariesTpFastestAndPpSlowest) {
  // TP2 x PP4 x DP2: rank = tp + 2 dp + 4 pp.
  const std::array<int, kParallelDims> sizes = {2, 1, 1, 2, 4};
  for (int rank = 0; rank < 16; ++rank) {
    const RankPlace p = place_rank(rank, 16, sizes);
    EXPECT_EQ(p.coord(ParallelDim::kTp), rank % 2) << rank;
    EXPECT_EQ(p.coord(ParallelDim::kDp), (rank / 2) % 2) << rank;
    EXPECT_EQ(p.coord(ParallelDim::kPp), rank / 4) << rank;
    EXPECT_EQ(p.pipeline_source, rank % 4) << rank << ": the same tp and dp at pp 0";
  }
  // With cp and ep between them: rank = tp + 2 cp + 4 ep + 8 dp + 16 pp.
  const RankPlace q = place_rank(2 + 4 + 16 * 3, -1, {2, 2, 2, 2, 4});
  EXPECT_EQ(q.world_size, 64);
  EXPECT_EQ(q.coord(ParallelDim::kCp), 1);
  EXPECT_EQ(q.coord(ParallelDim::kEp), 1);
  EXPECT_EQ(q.coord(ParallelDim::kPp), 3);
  EXPECT_EQ(q.pipeline_source, 6);
}

TEST(RankOrder, AnotherOrderIsFollowed) {
  // tp-pp-dp (as lens-train's own layouts): rank = tp + 2 pp + 8 dp.
  const RankPlace p = place_rank(13, 16, {2, 1, 1, 2, 4}, "tp-cp-ep-pp-dp");
  EXPECT_EQ(p.coord(ParallelDim::kTp), 1);
  EXPECT_EQ(p.coord(ParallelDim::kPp), 2);
  EXPECT_EQ(p.coord(ParallelDim::kDp), 1);
  EXPECT_EQ(p.pipeline_source, 9);
}

TEST(RankOrder, WhatDoesNotFitIsRefusedNamingIt) {
  const std::array<int, kParallelDims> pp4 = {1, 1, 1, 1, 4};
  const struct {
    int rank, world;
    std::array<int, kParallelDims> sizes;
    const char* order;
    const char* says;
  } cases[] = {
      {0, 8, pp4, "tp-cp-ep-dp-pp", "their product is 4"},
      {4, 4, pp4, "tp-cp-ep-dp-pp", "rank 4 of world size 4"},
      {-1, 4, pp4, "tp-cp-ep-dp-pp", "rank -1"},
      {0, 4, {1, 1, 1, 0, 4}, "tp-cp-ep-dp-pp", "dp size 0 must be at least 1"},
      {0, 4, pp4, "tp-dp-pp", "must name tp, cp, ep, dp and pp once each"},
      {0, 4, pp4, "tp-cp-ep-dp-pp-tp", "must name tp, cp, ep, dp and pp once each"},
      {0, 4, pp4, "tp-cp-ep-dp-dp", "must name tp, cp, ep, dp and pp once each"},
      {0, 4, pp4, "", "must name"},
  };
  for (const auto& c : cases) {
    try {
      place_rank(c.rank, c.world, c.sizes, c.order);
      ADD_FAILURE() << c.order << " rank " << c.rank << ": accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lens::analysis
