// A global rank's place in a Megatron-style layout (rank_order.h).
#include "rank_order.h"

#include <stdexcept>

namespace lens::analysis {
namespace {

constexpr std::array<std::string_view, kParallelDims> kNames = {"tp", "cp", "ep", "dp", "pp"};

// The dimensions of `order`, fastest first.
std::array<std::size_t, kParallelDims> parse_order(std::string_view order) {
  std::array<std::size_t, kParallelDims> dims{};
  std::array<bool, kParallelDims> seen{};
  std::size_t n = 0;
  std::string_view rest = order;
  while (true) {
    const std::size_t dash = rest.find('-');
    const std::string_view name = rest.substr(0, dash);
    std::size_t d = 0;
    while (d < kParallelDims && kNames[d] != name) ++d;
    if (d == kParallelDims || seen[d] || n == kParallelDims)
      throw std::invalid_argument("rank order '" + std::string(order) +
                                  "' must name tp, cp, ep, dp and pp once each, fastest first "
                                  "(e.g. tp-cp-ep-dp-pp)");
    seen[d] = true;
    dims[n++] = d;
    if (dash == std::string_view::npos) break;
    rest = rest.substr(dash + 1);
  }
  if (n != kParallelDims)
    throw std::invalid_argument("rank order '" + std::string(order) +
                                "' must name tp, cp, ep, dp and pp once each, fastest first "
                                "(e.g. tp-cp-ep-dp-pp)");
  return dims;
}

}  // namespace

RankPlace place_rank(int rank, int world_size, const std::array<int, kParallelDims>& sizes,
                     std::string_view order) {
  const auto dims = parse_order(order);
  long long product = 1;
  std::string listed;
  for (std::size_t d : dims) {
    if (sizes[d] < 1)
      throw std::invalid_argument(std::string(kNames[d]) + " size " + std::to_string(sizes[d]) +
                                  " must be at least 1");
    product *= sizes[d];
    listed += (listed.empty() ? "" : ", ") + std::string(kNames[d]) + "=" +
              std::to_string(sizes[d]);
  }
  if (world_size < 0) world_size = static_cast<int>(product);
  if (product != world_size || rank < 0 || rank >= world_size)
    throw std::invalid_argument("rank " + std::to_string(rank) + " of world size " +
                                std::to_string(world_size) + " does not fit the sizes " + listed +
                                " (their product is " + std::to_string(product) + ")");
  RankPlace p;
  p.rank = rank;
  p.world_size = world_size;
  p.sizes = sizes;
  int stride = 1;
  for (std::size_t d : dims) {
    p.coords[d] = (rank / stride) % sizes[d];
    if (d != static_cast<std::size_t>(ParallelDim::kPp)) p.pipeline_source += p.coords[d] * stride;
    stride *= sizes[d];
  }
  return p;
}

}  // namespace lens::analysis
