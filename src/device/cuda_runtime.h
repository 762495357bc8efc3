// The CUDA runtime as lens uses it: loaded when first needed, the few
// functions lens calls declared here and resolved by name (docs/device-time.md).
// Nothing of CUDA is needed to build lens; without a runtime, available() is
// false and nothing else changes.
//
// Which runtime, first found:
//   1. LENS_CUDA_RUNTIME, a path (tests name the simulated runtime there);
//   2. one the process has already loaded (PyTorch's libcudart), found by
//      its soname without loading anything, so lens and the framework share
//      one context;
//   3. the first libcudart that the dynamic loader finds.
// A library that lacks one of the functions is not used, and says which.
//
// Thread safety: the functions are the runtime's (thread-safe); a
// CudaRuntime is immutable once loaded.
#pragma once

#include <memory>
#include <string>

namespace lens::device {

using Event = void*;   // cudaEvent_t
using Stream = void*;  // cudaStream_t; nullptr is the legacy default stream

// The runtime's status codes that lens tells apart (cudaError_t).
inline constexpr int kSuccess = 0;
inline constexpr int kNotReady = 600;

class CudaRuntime {
 public:
  // The process's runtime, found on the first call (the order above).
  static const CudaRuntime& process();
  // The runtime in the library at `path` (a fresh load, for tests); its
  // origin says `path`, after `how` it was chosen when given.
  static std::unique_ptr<CudaRuntime> from_library(const std::string& path,
                                                   const std::string& how = {});
  // None: what a process without a GPU has.
  static std::unique_ptr<CudaRuntime> none(std::string why);

  ~CudaRuntime();
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  bool available() const { return handle_ != nullptr; }
  // Where the runtime came from ("LENS_CUDA_RUNTIME=/path", "already
  // loaded: libcudart.so.12"), or why there is none.
  const std::string& origin() const { return origin_; }

  // The runtime's own functions (0: success, 600: not ready, else an
  // error). Events are created with timing on.
  int create_event(Event* event) const;
  int destroy_event(Event event) const;
  int record(Event event, Stream stream) const;
  int query(Event event) const;
  int synchronize(Event event) const;
  // Milliseconds from `start` to `end` (both complete), as the runtime
  // measures them (about 0.5 us resolution).
  int elapsed_ms(float* ms, Event start, Event end) const;
  // A stream of lens's own that waits for no other (cudaStreamNonBlocking),
  // and its end.
  int create_stream(Stream* stream) const;
  int destroy_stream(Stream stream) const;
  // The calling thread's current device, and setting it.
  int get_device(int* device) const;
  int set_device(int device) const;
  // The runtime's message for a status code.
  std::string describe(int status) const;

 private:
  CudaRuntime() = default;
  // Resolves every function from `handle`; on a missing one closes it and
  // says which in origin_.
  bool bind(void* handle, std::string origin);

  void* handle_ = nullptr;
  bool keep_loaded_ = false;  // the process's: never closed
  std::string origin_;
  int (*create_)(Event*, unsigned) = nullptr;
  int (*destroy_)(Event) = nullptr;
  int (*record_)(Event, Stream) = nullptr;
  int (*query_)(Event) = nullptr;
  int (*synchronize_)(Event) = nullptr;
  int (*elapsed_)(float*, Event, Event) = nullptr;
  int (*create_stream_)(Stream*, unsigned) = nullptr;
  int (*destroy_stream_)(Stream) = nullptr;
  int (*get_device_)(int*) = nullptr;
  int (*set_device_)(int) = nullptr;
  const char* (*error_string_)(int) = nullptr;
};

}  // namespace lens::device
