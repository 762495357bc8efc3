// The simulated CUDA runtime's controls (simulated_cuda_runtime.cc), from
// the library the device tests load as the runtime, and the host clock it
// keeps time by.
//
// Thread safety: the controls take the simulation's own mutex.
#pragma once

#include <dlfcn.h>
#include <time.h>

#include <cstdint>

#include "cuda_runtime.h"

namespace lens::device::testing {

inline std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A stream by number (the simulation keys streams by their handle).
inline Stream stream(std::uintptr_t n) { return reinterpret_cast<Stream>(n); }

struct Simulation {
  Simulation() {
    handle = ::dlopen(LENS_SIMULATED_CUDA_RUNTIME, RTLD_NOW | RTLD_LOCAL);
    reset = reinterpret_cast<void (*)(std::int64_t, double)>(::dlsym(handle, "lens_sim_reset"));
    launch = reinterpret_cast<void (*)(void*, std::int64_t)>(::dlsym(handle, "lens_sim_launch"));
    hold = reinterpret_cast<void (*)(void*, bool)>(::dlsym(handle, "lens_sim_hold"));
    completion =
        reinterpret_cast<std::int64_t (*)(void*)>(::dlsym(handle, "lens_sim_completion_ns"));
    events = reinterpret_cast<long (*)()>(::dlsym(handle, "lens_sim_events"));
    streams = reinterpret_cast<long (*)()>(::dlsym(handle, "lens_sim_streams"));
    last_set_device = reinterpret_cast<int (*)()>(::dlsym(handle, "lens_sim_last_set_device"));
    set_device = reinterpret_cast<int (*)(int)>(::dlsym(handle, "cudaSetDevice"));
  }
  ~Simulation() { ::dlclose(handle); }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  void* handle = nullptr;
  void (*reset)(std::int64_t delay_ns, double drift_ppm) = nullptr;
  void (*launch)(void* stream, std::int64_t duration_ns) = nullptr;
  void (*hold)(void* stream, bool held) = nullptr;
  std::int64_t (*completion)(void* event) = nullptr;  // host ns; -1 unrecorded
  long (*events)() = nullptr;                         // events alive
  long (*streams)() = nullptr;                        // streams alive
  int (*last_set_device)() = nullptr;                 // -1: none set
  int (*set_device)(int) = nullptr;                   // the calling thread's (cudaSetDevice)
};

}  // namespace lens::device::testing
