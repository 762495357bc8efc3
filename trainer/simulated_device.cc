// TEST AID: the stages' compute on a simulated GPU (simulated_device.h).
#include "simulated_device.h"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>

namespace lens::train {

std::unique_ptr<SimulatedDevice> SimulatedDevice::open(double factor, int rank) {
  const char* path = std::getenv("LENS_CUDA_RUNTIME");
  if (path == nullptr || *path == '\0')
    throw std::runtime_error(
        "--test-simulated-device needs LENS_CUDA_RUNTIME naming the simulated CUDA runtime "
        "(liblens_simulated_cudart.so, built with the tests)");
  std::unique_ptr<SimulatedDevice> d(new SimulatedDevice());
  d->handle_ = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (d->handle_ == nullptr) throw std::runtime_error(std::string("cannot load ") + path);
  d->launch_ =
      reinterpret_cast<void (*)(void*, std::int64_t)>(::dlsym(d->handle_, "lens_sim_launch"));
  auto create =
      reinterpret_cast<int (*)(void**, unsigned)>(::dlsym(d->handle_, "cudaEventCreateWithFlags"));
  d->record_ = reinterpret_cast<int (*)(void*, void*)>(::dlsym(d->handle_, "cudaEventRecord"));
  d->synchronize_ = reinterpret_cast<int (*)(void*)>(::dlsym(d->handle_, "cudaEventSynchronize"));
  d->destroy_event_ = reinterpret_cast<int (*)(void*)>(::dlsym(d->handle_, "cudaEventDestroy"));
  if (d->launch_ == nullptr || create == nullptr || d->record_ == nullptr ||
      d->synchronize_ == nullptr || d->destroy_event_ == nullptr)
    throw std::runtime_error(std::string(path) +
                             " is not the simulated CUDA runtime (no lens_sim_launch)");
  if (create(&d->event_, 0) != 0) throw std::runtime_error("the simulated runtime made no event");
  d->factor_ = factor;
  // A stream of the rank's own (the simulation keys streams by handle).
  d->stream_ = reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x10000 + rank));
  return d;
}

SimulatedDevice::~SimulatedDevice() {
  if (event_ != nullptr) destroy_event_(event_);
  if (handle_ != nullptr) ::dlclose(handle_);
}

void SimulatedDevice::launch(std::chrono::steady_clock::time_point start) {
  const auto took =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  launch_(stream_, static_cast<std::int64_t>(factor_ * static_cast<double>(took)));
}

void SimulatedDevice::wait() {
  record_(event_, stream_);
  synchronize_(event_);
}

}  // namespace lens::train
