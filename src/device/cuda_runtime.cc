// The CUDA runtime loaded at run time (cuda_runtime.h).
#include "cuda_runtime.h"

#include <dlfcn.h>

#include <cstdlib>

namespace lens::device {
namespace {

// The runtime's sonames, newest first.
constexpr const char* kSonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                    "libcudart.so"};

// cudaEventDefault: timing on, the stream's ordering.
constexpr unsigned kEventDefault = 0;
// cudaStreamNonBlocking: no implicit wait for the legacy default stream.
constexpr unsigned kStreamNonBlocking = 1;

template <typename F>
bool resolve(void* handle, const char* name, F*& out, std::string* missing) {
  out = reinterpret_cast<F*>(::dlsym(handle, name));
  if (out == nullptr && missing->empty()) *missing = name;
  return out != nullptr;
}

std::unique_ptr<CudaRuntime> find() {
  if (const char* path = std::getenv("LENS_CUDA_RUNTIME"); path != nullptr && *path != '\0')
    return CudaRuntime::from_library(path, "LENS_CUDA_RUNTIME=");
  // Already in the process: RTLD_NOLOAD opens nothing new.
  for (const char* soname : kSonames)
    if (void* h = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      ::dlclose(h);
      auto runtime = CudaRuntime::from_library(soname, "already loaded: ");
      if (runtime->available()) return runtime;
    }
  for (const char* soname : kSonames) {
    auto runtime = CudaRuntime::from_library(soname);
    if (runtime->available()) return runtime;
  }
  return CudaRuntime::none("no CUDA runtime (libcudart) in the process or on the loader's path");
}

}  // namespace

const CudaRuntime& CudaRuntime::process() {
  static const std::unique_ptr<CudaRuntime> runtime = [] {
    auto r = find();
    r->keep_loaded_ = true;  // its events may outlive lens's use of them
    return r;
  }();
  return *runtime;
}

std::unique_ptr<CudaRuntime> CudaRuntime::from_library(const std::string& path,
                                                       const std::string& how) {
  std::unique_ptr<CudaRuntime> r(new CudaRuntime());
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    r->origin_ = "cannot load " + path + ": " + (why ? why : "unknown error");
    return r;
  }
  r->bind(handle, how + path);
  return r;
}

std::unique_ptr<CudaRuntime> CudaRuntime::none(std::string why) {
  std::unique_ptr<CudaRuntime> r(new CudaRuntime());
  r->origin_ = std::move(why);
  return r;
}

CudaRuntime::~CudaRuntime() {
  if (handle_ != nullptr && !keep_loaded_) ::dlclose(handle_);
}

bool CudaRuntime::bind(void* handle, std::string origin) {
  std::string missing;
  resolve(handle, "cudaEventCreateWithFlags", create_, &missing);
  resolve(handle, "cudaEventDestroy", destroy_, &missing);
  resolve(handle, "cudaEventRecord", record_, &missing);
  resolve(handle, "cudaEventQuery", query_, &missing);
  resolve(handle, "cudaEventSynchronize", synchronize_, &missing);
  resolve(handle, "cudaEventElapsedTime", elapsed_, &missing);
  resolve(handle, "cudaStreamCreateWithFlags", create_stream_, &missing);
  resolve(handle, "cudaStreamDestroy", destroy_stream_, &missing);
  resolve(handle, "cudaGetDevice", get_device_, &missing);
  resolve(handle, "cudaSetDevice", set_device_, &missing);
  resolve(handle, "cudaGetErrorString", error_string_, &missing);
  if (!missing.empty()) {
    ::dlclose(handle);
    origin_ = origin + " lacks " + missing + "; not used";
    return false;
  }
  handle_ = handle;
  origin_ = std::move(origin);
  return true;
}

int CudaRuntime::create_event(Event* event) const { return create_(event, kEventDefault); }
int CudaRuntime::destroy_event(Event event) const { return destroy_(event); }
int CudaRuntime::record(Event event, Stream stream) const { return record_(event, stream); }
int CudaRuntime::query(Event event) const { return query_(event); }
int CudaRuntime::synchronize(Event event) const { return synchronize_(event); }
int CudaRuntime::elapsed_ms(float* ms, Event start, Event end) const {
  return elapsed_(ms, start, end);
}

int CudaRuntime::create_stream(Stream* stream) const {
  return create_stream_(stream, kStreamNonBlocking);
}
int CudaRuntime::destroy_stream(Stream stream) const { return destroy_stream_(stream); }
int CudaRuntime::get_device(int* device) const { return get_device_(device); }
int CudaRuntime::set_device(int device) const { return set_device_(device); }

std::string CudaRuntime::describe(int status) const {
  const char* s = error_string_ != nullptr ? error_string_(status) : nullptr;
  return "CUDA status " + std::to_string(status) + (s ? std::string(" (") + s + ")" : "");
}

}  // namespace lens::device
