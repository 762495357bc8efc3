// Spans on two clocks. On a GPU, compute spans timed on the device
// (lens.otel's and lens.managed_span(stream=)'s: they carry
// lens.host.start_unix_ns) end where the device finished the work, while
// the p2p spans stay on the host; Megatron's synchronise the device inside
// them (batch_p2p_sync), so a host-timed p2p span begins while the device
// still runs the compute before it. That stretch is the compute's, not a
// wait for the peer: the span's start is moved to the end of the latest
// device-timed compute of its rank that began before the span ended.
//
// And a run on GPUs whose compute is timed on the host describes the
// launch thread, not the work: said in a warning on every view.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "run_reader.h"

namespace lens::analysis {

// One rank's compute spans seen, and of them those timed on the device.
struct ComputeClocks {
  std::uint64_t compute = 0, device_timed = 0;
};

// Moves the start of each host-timed p2p span of `file` (one step's spans)
// past the device drain described above; counts its compute spans into
// `clocks`. Returns how many spans moved.
std::size_t settle_device_drain(RankFile& file, ComputeClocks& clocks);

// The GPUs a rank's resource says it had: nemo-lens's host.gpu.count (its
// documentation's dl.gpu.count too); 0 when it says none.
std::int64_t gpu_count(const RankFile& file);

// The warning for the ranks that ran on GPUs with their compute timed on the
// host (by rank: their resource's file and what was seen), or none.
std::optional<std::string> host_timed_compute_warning(
    const std::map<int, std::pair<const RankFile*, ComputeClocks>>& ranks);

}  // namespace lens::analysis
