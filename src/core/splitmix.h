// Internal header of the core part: SplitMix64, the generator that turns one
// 64-bit state into a stream of well-mixed words. It seeds the id generator
// and derives step contexts from the run's shared key.
#pragma once

#include <cstdint>

namespace lens::detail {

// Advances `state` and returns the next word.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace lens::detail
