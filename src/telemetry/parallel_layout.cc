// The job's parallel layout: trace scope names and the export filter
// (parallel_layout.h).
#include "lens/parallel_layout.h"

#include <algorithm>
#include <charconv>

#include "setting.h"

namespace lens {

using detail::fail;
using detail::lower;
using detail::Setting;
using detail::trimmed;

std::string_view trace_scope_name(TraceScope scope) {
  return scope == TraceScope::kPipeline ? "pipeline" : "world";
}

std::string_view step_context_mode_name(StepContextMode mode) {
  return mode == StepContextMode::kDerived ? "derived" : "broadcast";
}

bool ExportFilter::keeps(const ParallelCoordinates& at) const {
  return (!pp || *pp == at.pp) && (!dp || *dp == at.dp) && (!tp || *tp == at.tp);
}

std::string ExportFilter::to_string() const {
  std::string out;
  for (auto [axis, v] : {std::pair{"pp", pp}, std::pair{"dp", dp}, std::pair{"tp", tp}})
    if (v) out += (out.empty() ? "" : ",") + std::string(axis) + "=" + std::to_string(*v);
  return out;
}

ExportFilter ExportFilter::parse(std::string_view spec, std::string_view setting) {
  const std::string accepted =
      "a comma-separated list of axis=value with axis pp, dp or tp and value 0 to 1073741824, "
      "e.g. dp=0 or dp=0,tp=0";
  const Setting whole{std::string(setting), std::string(spec)};
  ExportFilter f;
  std::size_t begin = 0;
  while (begin <= spec.size()) {
    const std::size_t end = std::min(spec.find(',', begin), spec.size());
    const std::string item = trimmed(spec.substr(begin, end - begin));
    const std::size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos) fail(whole, accepted);
    const std::string axis = lower(trimmed(std::string_view(item).substr(0, eq)));
    const Setting value{std::string(setting), trimmed(std::string_view(item).substr(eq + 1))};
    std::optional<int>* slot = axis == "pp"   ? &f.pp
                               : axis == "dp" ? &f.dp
                               : axis == "tp" ? &f.tp
                                              : nullptr;
    if (slot == nullptr || slot->has_value()) fail(whole, accepted);
    std::uint64_t v = 0;
    const char* first = value.value.data();
    const char* last = first + value.value.size();
    auto [ptr, ec] = std::from_chars(first, last, v);
    if (value.value.empty() || ec != std::errc() || ptr != last || v > (1u << 30))
      fail(whole, accepted);
    *slot = static_cast<int>(v);
    begin = end + 1;
  }
  return f;
}

}  // namespace lens
