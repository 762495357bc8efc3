// Internal header of the pp part: a list of ranks for an error message
// ("0,2,5", at most 16 named).
#pragma once

#include <string>
#include <vector>

namespace lens::detail {

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 16; ++i)
    out += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) out += ",... (" + std::to_string(ranks.size()) + " ranks)";
  return out;
}

}  // namespace lens::detail
