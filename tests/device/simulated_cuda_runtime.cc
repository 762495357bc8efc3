// A simulated CUDA runtime for tests without a GPU: a shared library with
// the runtime functions lens loads (cuda_runtime.h), loaded by the same
// path the real one is (LENS_CUDA_RUNTIME).
//
// Its device is exact by construction. Each stream keeps a cursor: when the
// device will be done with what was queued on it, in host time
// (CLOCK_MONOTONIC ns). Work launched at host time h with the launch delay
// d starts at max(cursor, h + d) and moves the cursor past its duration; an
// event recorded at h completes at max(cursor, h + d), and is ready once the
// host clock has passed that. The device's clock runs (1 + drift) times as
// fast as the host's, so the elapsed time between two events is their
// host-time difference times (1 + drift). A stream can be held: its events
// then never complete (until released).
//
// The controls tests call (extern "C", found with dlsym):
//   lens_sim_reset(delay_ns, drift_ppm)   forget streams, set delay and drift
//   lens_sim_launch(stream, duration_ns)  queue work of that length
//   lens_sim_hold(stream, held)           hold or release a stream
//   lens_sim_completion_ns(event)         when an event completes (host ns), -1 if unrecorded
//   lens_sim_events()                     events alive (created, not destroyed)
//   lens_sim_streams()                    streams alive (created, not destroyed)
//   lens_sim_last_set_device()            the device a thread set last, -1 if none
//
// Streams a program creates are fresh handles, idle until used. The
// current device is the calling thread's (0 until set), as CUDA's is; the
// simulation remembers the device each thread set last, so a test can
// check that lens's own thread works on the training thread's device
// (lens_sim_last_set_device).
//
// Thread safety: every function takes one mutex.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

namespace {

struct SimEvent {
  bool recorded = false;
  std::int64_t completes_ns = 0;  // host time
  void* stream = nullptr;
};

struct SimStream {
  std::int64_t cursor_ns = 0;
  bool held = false;
};

std::mutex mu;
std::map<void*, SimStream> streams;
std::int64_t delay_ns = 0;
double drift = 0;  // (device rate / host rate) - 1
std::atomic<long> alive{0};
std::atomic<long> streams_alive{0};
std::atomic<int> last_set_device{-1};
thread_local int current_device = 0;

std::int64_t host_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// When work queued now on `s` can start.
std::int64_t start_on(SimStream& s) { return std::max(s.cursor_ns, host_ns() + delay_ns); }

bool ready(const SimEvent& e) {
  const auto it = streams.find(e.stream);
  const bool held = it != streams.end() && it->second.held;
  return e.recorded && !held && host_ns() >= e.completes_ns;
}

constexpr int kSuccess = 0, kInvalidValue = 1, kNotReady = 600;

}  // namespace

extern "C" {

int cudaEventCreateWithFlags(void** event, unsigned /*flags*/) {
  if (event == nullptr) return kInvalidValue;
  *event = new SimEvent();
  ++alive;
  return kSuccess;
}

int cudaEventDestroy(void* event) {
  if (event == nullptr) return kInvalidValue;
  std::lock_guard<std::mutex> lock(mu);
  delete static_cast<SimEvent*>(event);
  --alive;
  return kSuccess;
}

int cudaEventRecord(void* event, void* stream) {
  if (event == nullptr) return kInvalidValue;
  std::lock_guard<std::mutex> lock(mu);
  SimStream& s = streams[stream];
  auto* e = static_cast<SimEvent*>(event);
  e->recorded = true;
  e->stream = stream;
  e->completes_ns = s.cursor_ns = start_on(s);
  return kSuccess;
}

int cudaEventQuery(void* event) {
  if (event == nullptr) return kInvalidValue;
  std::lock_guard<std::mutex> lock(mu);
  return ready(*static_cast<SimEvent*>(event)) ? kSuccess : kNotReady;
}

int cudaEventSynchronize(void* event) {
  if (event == nullptr) return kInvalidValue;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (ready(*static_cast<SimEvent*>(event))) return kSuccess;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

int cudaEventElapsedTime(float* ms, void* start, void* end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return kInvalidValue;
  std::lock_guard<std::mutex> lock(mu);
  const auto* a = static_cast<SimEvent*>(start);
  const auto* b = static_cast<SimEvent*>(end);
  if (!ready(*a) || !ready(*b)) return kNotReady;
  *ms = static_cast<float>(static_cast<double>(b->completes_ns - a->completes_ns) * (1 + drift) /
                           1e6);
  return kSuccess;
}

int cudaStreamCreateWithFlags(void** stream, unsigned /*flags*/) {
  if (stream == nullptr) return kInvalidValue;
  *stream = new char(0);  // a unique handle
  ++streams_alive;
  return kSuccess;
}

int cudaStreamDestroy(void* stream) {
  if (stream == nullptr) return kInvalidValue;
  std::lock_guard<std::mutex> lock(mu);
  streams.erase(stream);
  delete static_cast<char*>(stream);
  --streams_alive;
  return kSuccess;
}

int cudaGetDevice(int* device) {
  if (device == nullptr) return kInvalidValue;
  *device = current_device;
  return kSuccess;
}

int cudaSetDevice(int device) {
  if (device < 0 || device > 7) return kInvalidValue;
  current_device = device;
  last_set_device = device;
  return kSuccess;
}

const char* cudaGetErrorString(int status) {
  switch (status) {
    case kSuccess:
      return "no error";
    case kInvalidValue:
      return "invalid argument";
    case kNotReady:
      return "device not ready";
    default:
      return "unknown error";
  }
}

void lens_sim_reset(std::int64_t delay, double drift_ppm) {
  std::lock_guard<std::mutex> lock(mu);
  streams.clear();
  delay_ns = delay;
  drift = drift_ppm * 1e-6;
}

void lens_sim_launch(void* stream, std::int64_t duration_ns) {
  std::lock_guard<std::mutex> lock(mu);
  SimStream& s = streams[stream];
  s.cursor_ns = start_on(s) + duration_ns;
}

void lens_sim_hold(void* stream, bool held) {
  std::lock_guard<std::mutex> lock(mu);
  streams[stream].held = held;
}

std::int64_t lens_sim_completion_ns(void* event) {
  std::lock_guard<std::mutex> lock(mu);
  const auto* e = static_cast<SimEvent*>(event);
  return e->recorded ? e->completes_ns : -1;
}

long lens_sim_events() { return alive.load(); }

long lens_sim_streams() { return streams_alive.load(); }

int lens_sim_last_set_device() { return last_set_device.load(); }

}  // extern "C"
