// A global rank's place in a Megatron-style layout: its tensor-, context-,
// expert-, data- and pipeline-parallel coordinates from the group sizes and
// the order in which the dimensions vary (Megatron-LM's default
// tp-cp-ep-dp-pp: tp fastest, pp slowest). The one rule every reader of a
// layout given as sizes uses: the importer of Megatron-LM's own traces
// (upstream_steps.h) and, through lens._analysis, the OpenTelemetry
// provider (lens.otel).
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace lens::analysis {

// The five dimensions, in the order of RankPlace's arrays.
enum class ParallelDim : int { kTp = 0, kCp = 1, kEp = 2, kDp = 3, kPp = 4 };
inline constexpr std::size_t kParallelDims = 5;

struct RankPlace {
  int rank = 0;
  int world_size = 1;
  std::array<int, kParallelDims> sizes{1, 1, 1, 1, 1};   // by ParallelDim
  std::array<int, kParallelDims> coords{0, 0, 0, 0, 0};  // this rank's, by ParallelDim
  /// The global rank of this rank's pipeline's first stage: the same
  /// coordinates with pp = 0.
  int pipeline_source = 0;

  int size(ParallelDim d) const { return sizes[static_cast<std::size_t>(d)]; }
  int coord(ParallelDim d) const { return coords[static_cast<std::size_t>(d)]; }
};

// The default order, fastest first.
inline constexpr std::string_view kMegatronRankOrder = "tp-cp-ep-dp-pp";

// `rank`'s place. `sizes` by ParallelDim (each at least 1); `world_size`
// negative: their product. `order` names tp, cp, ep, dp and pp once each,
// fastest first, separated by '-'. Throws std::invalid_argument naming
// what does not fit (an order that is not a permutation, a size below 1,
// sizes whose product is not the world size, a rank outside it).
RankPlace place_rank(int rank, int world_size, const std::array<int, kParallelDims>& sizes,
                     std::string_view order = kMegatronRankOrder);

}  // namespace lens::analysis
