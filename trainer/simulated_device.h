// TEST AID: the stages' compute on a simulated GPU (docs/device-time.md).
//
// lens-train --test-simulated-device F runs against the simulated CUDA
// runtime named in LENS_CUDA_RUNTIME (tests/device/simulated_cuda_runtime.cc):
// each forward and backward span is timed on a stream of the rank's own,
// and after the host's compute (which stands for the kernel launches) the
// device runs F times that long. The span then ends, as a host span around
// asynchronous kernels would, long before the device is done; the rank
// waits for the device after it (as a copy to the host for Gloo does)
// before it sends or computes on. So host times show launches and a wait
// outside the spans, and the device-timed spans show the compute: what
// `lens analyze` then reads is device time.
//
// Thread safety: one rank's training thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace lens::train {

class SimulatedDevice {
 public:
  // Loads the runtime LENS_CUDA_RUNTIME names; std::runtime_error when it
  // is not set or is not the simulated runtime (it lacks lens_sim_launch).
  static std::unique_ptr<SimulatedDevice> open(double factor, int rank);
  ~SimulatedDevice();
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  void* stream() const { return stream_; }
  // The device runs `factor` times what the host took since `start`.
  void launch(std::chrono::steady_clock::time_point start);
  // Waits until the device is done with what was launched.
  void wait();

 private:
  SimulatedDevice() = default;
  void* handle_ = nullptr;
  void* stream_ = nullptr;
  void* event_ = nullptr;
  double factor_ = 1;
  void (*launch_)(void*, std::int64_t) = nullptr;
  int (*record_)(void*, void*) = nullptr;
  int (*synchronize_)(void*) = nullptr;
  int (*destroy_event_)(void*) = nullptr;
};

}  // namespace lens::train
