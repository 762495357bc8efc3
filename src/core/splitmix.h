// Internal header of the core part: SplitMix64, the generator that turns one
// 64-bit state into a stream of well-mixed words. It seeds the id generator
// and derives step contexts from the run's shared key.
#pragma once

#include <cstdint>

namespace lens::detail {

// SplitMix64's finaliser: a bijective mix of one word.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Advances `state` and returns the next word.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  return mix64(state += 0x9e3779b97f4a7c15ULL);
}

}  // namespace lens::detail
