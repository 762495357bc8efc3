/// \file
/// DeviceStats: what became of the spans timed on a device
/// (StartOptions::device_stream; docs/device-time.md).
///
/// Every span that asked for a device is counted once as `timed` or
/// `host_timed`; of the timed, each ends as `resolved` (exported with the
/// device's times), `refused` (the pending set was full: exported with its
/// host times) or `unresolved` (its events had not completed by shutdown:
/// exported with its host times, marked truncated), or is still pending.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lens {

struct DeviceStats {
  /// Where the CUDA runtime came from ("LENS_CUDA_RUNTIME=...", "already
  /// loaded: libcudart.so.12"), or why there is none; a runtime without a
  /// device adds why ("; no device: CUDA status 100 (...)").
  std::string runtime;
  std::uint64_t timed = 0;       ///< started with events on their stream
  std::uint64_t host_timed = 0;  ///< asked for a device, timed on the host
  std::uint64_t resolved = 0;    ///< exported with the device's times
  std::uint64_t refused = 0;     ///< pending set full: exported with host times
  std::uint64_t unresolved = 0;  ///< events incomplete at shutdown: host times, truncated
  std::size_t pending_high_water = 0;
  std::uint64_t anchors = 0;  ///< device clock anchors taken
  std::uint64_t anchor_failures = 0;
  double drift = 0;                  ///< the device clock's rate against the host's, minus 1
  std::int64_t uncertainty_ns = 0;   ///< how far a device time may be off on the span clock
  std::int64_t resolver_cpu_ns = 0;  ///< the resolver thread's CPU time
};

}  // namespace lens
