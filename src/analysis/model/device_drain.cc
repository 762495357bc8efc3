// Spans on two clocks (device_drain.h).
#include "device_drain.h"

#include <algorithm>
#include <vector>

#include "lens/semconv.h"
#include "span_kind.h"

namespace lens::analysis {

std::size_t settle_device_drain(RankFile& file, ComputeClocks& clocks) {
  // The device-timed computes' (start, end), by start; and the latest end
  // of those up to each.
  std::vector<std::pair<std::int64_t, std::int64_t>> device;
  for (const SpanRow& s : file.spans) {
    // kind_of's forward and backward, by their names alone (every span of
    // every step passes here).
    if (s.name != semconv::kMicrobatchForwardSpan && s.name != semconv::kMicrobatchBackwardSpan)
      continue;
    ++clocks.compute;
    if (!s.has(semconv::kHostStart)) continue;
    ++clocks.device_timed;
    device.emplace_back(s.start_ns, s.end_ns);
  }
  if (device.empty()) return 0;
  std::sort(device.begin(), device.end());
  for (std::size_t i = 1; i < device.size(); ++i)
    device[i].second = std::max(device[i].second, device[i - 1].second);
  std::size_t moved = 0;
  for (SpanRow& s : file.spans) {
    if (kind_of(s) != SpanKind::kP2p || s.has(semconv::kHostStart)) continue;
    // The computes that began before the span ended: the ones launched
    // before it (the next is launched after it returns).
    const auto before = std::lower_bound(device.begin(), device.end(),
                                         std::pair<std::int64_t, std::int64_t>(s.end_ns, 0));
    if (before == device.begin()) continue;
    const std::int64_t drained = std::min(std::prev(before)->second, s.end_ns);
    if (drained > s.start_ns) {
      s.start_ns = drained;
      ++moved;
    }
  }
  return moved;
}

std::int64_t gpu_count(const RankFile& file) {
  for (const char* key : semconv::kGpuCountAttributes)
    if (const auto it = file.resource.find(key); it != file.resource.end())
      if (const auto n = strict_int(it->second); n && *n > 0) return *n;
  return 0;
}

std::optional<std::string> host_timed_compute_warning(
    const std::map<int, std::pair<const RankFile*, ComputeClocks>>& ranks) {
  std::vector<int> host_timed;
  for (const auto& [rank, seen] : ranks)
    if (seen.second.compute > 0 && seen.second.device_timed == 0 && gpu_count(*seen.first) > 0)
      host_timed.push_back(rank);
  if (host_timed.empty()) return std::nullopt;
  // "ranks 0-3, 6": runs of consecutive ranks.
  std::string list;
  for (std::size_t i = 0; i < host_timed.size();) {
    std::size_t j = i;
    while (j + 1 < host_timed.size() && host_timed[j + 1] == host_timed[j] + 1) ++j;
    list += (list.empty() ? "" : ", ") + std::to_string(host_timed[i]) +
            (j > i ? "-" + std::to_string(host_timed[j]) : "");
    i = j + 1;
  }
  return std::string("compute timed on the host on GPUs: ") +
         (host_timed.size() == 1 ? "rank " : "ranks ") + list +
         " ran on GPUs (host.gpu.count) but their forward and backward spans carry no device "
         "times: they measure when the host launched the kernels, so compute reads short and "
         "the p2p spans that synchronise the device read long, and the critical path, waits "
         "and stragglers describe the launch thread, not the GPUs. Time them on the device: "
         "lens.otel does when the process uses CUDA (LENS_DEVICE_SPANS names the spans), "
         "lens.managed_span with stream= (docs/device-time.md)";
}

}  // namespace lens::analysis
