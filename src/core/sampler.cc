#include "lens/sampler.h"

#include <cmath>
#include <cstring>

namespace lens {

bool Sampler::decide_root(const TraceId& trace_id) const {
  switch (kind) {
    case Kind::kAlwaysOn:
      return true;
    case Kind::kAlwaysOff:
      return false;
    case Kind::kTraceIdRatio: {
      if (ratio >= 1.0) return true;
      if (ratio <= 0.0) return false;
      // The trace id's last 8 bytes as a big-endian integer, compared with
      // ratio * 2^64: the same trace id always gets the same answer.
      std::uint64_t low = 0;
      for (std::size_t i = 8; i < TraceId::kSize; ++i) low = (low << 8) | trace_id.bytes()[i];
      const double bound = std::ldexp(ratio, 64);
      return static_cast<double>(low) < bound;
    }
  }
  return true;
}

std::string Sampler::describe() const {
  std::string base = parent_based ? "parentbased_" : "";
  switch (kind) {
    case Kind::kAlwaysOn:
      return base + "always_on";
    case Kind::kAlwaysOff:
      return base + "always_off";
    case Kind::kTraceIdRatio:
      return base + "traceidratio{" + std::to_string(ratio) + "}";
  }
  return base;
}

}  // namespace lens
