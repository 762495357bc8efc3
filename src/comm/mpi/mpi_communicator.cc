#include "lens/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <thread>
#include <vector>

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

namespace lens {
namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

// A buffer MPI writes into until its request completes. Freed once the
// request completed; deliberately leaked when the wait gave up, since MPI
// may still write into it (a caller's buffer would be gone by then).
class RequestBuffer {
 public:
  explicit RequestBuffer(std::span<const std::uint8_t> bytes, std::size_t size)
      : bytes_(new std::vector<std::uint8_t>(size)) {
    std::copy(bytes.begin(), bytes.end(), bytes_->begin());
  }
  ~RequestBuffer() {
    if (!abandoned_) delete bytes_;
  }
  RequestBuffer(const RequestBuffer&) = delete;
  RequestBuffer& operator=(const RequestBuffer&) = delete;
  std::uint8_t* data() { return bytes_->data(); }
  void abandon() { abandoned_ = true; }

 private:
  std::vector<std::uint8_t>* bytes_;
  bool abandoned_ = false;
};

// Runs `wait`; when it fails, leaves `buffers` to MPI (abandoned) and
// rethrows.
template <typename Wait>
void wait_or_abandon(Wait&& wait, std::initializer_list<RequestBuffer*> buffers) {
  try {
    wait();
  } catch (const CommError&) {
    for (RequestBuffer* b : buffers) b->abandon();
    throw;
  }
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, Wait wait) : comm_(comm), wait_mode_(wait) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw CommError("lens: MpiCommunicator needs MPI to be initialised first");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

void MpiCommunicator::wait(MPI_Request& request, std::string_view what,
                           std::chrono::milliseconds timeout) {
  if (wait_mode_ == Wait::kBlocking) {
    // As the mode says: MPI_Wait, no timeout.
    const int rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) throw CommError(describe_failure(what, mpi_error_text(rc)));
    return;
  }
  // Spin briefly (a shared-memory broadcast completes in about a microsecond),
  // then poll with growing sleeps up to 1 ms so a slow peer costs no CPU.
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) throw CommError(describe_failure(what, mpi_error_text(rc)));
    if (done) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw CommError(describe_failure(
          what, "did not complete within " + std::to_string(timeout.count()) +
                    " ms (a peer is missing or stuck); the communicator is unusable now"));
    }
    if (now - start > std::chrono::microseconds(200)) {
      pause = std::min(std::chrono::microseconds(1000),
                       pause + std::chrono::microseconds(polls < 1000 ? 10 : 100));
      std::this_thread::sleep_for(pause);
    }
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // MPI forbids freeing a started collective; one that timed out is left.
  if (persistent_.request != MPI_REQUEST_NULL && !finalized && !persistent_stuck_)
    MPI_Request_free(&persistent_.request);
}

bool MpiCommunicator::persistent_broadcast(std::span<std::uint8_t> data, int root,
                                           std::chrono::milliseconds timeout) {
#if MPI_VERSION >= 4 || defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
  if (persistent_stuck_) throw CommError(describe_failure("broadcast", "an earlier one timed out"));
  if (persistent_.request == MPI_REQUEST_NULL || persistent_.root != root ||
      persistent_.buffer.size() != data.size()) {
    if (persistent_.request != MPI_REQUEST_NULL) MPI_Request_free(&persistent_.request);
    persistent_.root = root;
    persistent_.buffer.assign(data.size(), 0);
#if MPI_VERSION >= 4
    const int rc = MPI_Bcast_init(persistent_.buffer.data(), static_cast<int>(data.size()),
                                  MPI_BYTE, root, comm_, MPI_INFO_NULL, &persistent_.request);
#else
    const int rc = MPIX_Bcast_init(persistent_.buffer.data(), static_cast<int>(data.size()),
                                   MPI_BYTE, root, comm_, MPI_INFO_NULL, &persistent_.request);
#endif
    if (rc != MPI_SUCCESS) {
      persistent_.request = MPI_REQUEST_NULL;
      throw CommError(describe_failure("MPI_Bcast_init", mpi_error_text(rc)));
    }
  }
  if (rank_ == root) std::memcpy(persistent_.buffer.data(), data.data(), data.size());
  const int rc = MPI_Start(&persistent_.request);
  if (rc != MPI_SUCCESS) throw CommError(describe_failure("MPI_Start", mpi_error_text(rc)));
  try {
    wait(persistent_.request, "broadcast (persistent MPI_Bcast_init request)", timeout);
  } catch (const CommError&) {
    // The request stays bound to the buffer: it must outlive this object.
    persistent_stuck_ = true;
    (void)new std::vector<std::uint8_t>(std::move(persistent_.buffer));
    throw;
  }
  if (rank_ != root) std::memcpy(data.data(), persistent_.buffer.data(), data.size());
  return true;
#else
  (void)data;
  (void)root;
  (void)timeout;
  return false;
#endif
}

void MpiCommunicator::broadcast(std::span<std::uint8_t> data, int root,
                                std::chrono::milliseconds timeout) {
  if (wait_mode_ == Wait::kBlocking) {
    const int rc = MPI_Bcast(data.data(), static_cast<int>(data.size()), MPI_BYTE, root, comm_);
    if (rc != MPI_SUCCESS) throw CommError(describe_failure("MPI_Bcast", mpi_error_text(rc)));
    return;
  }
  if (persistent_broadcast(data, root, timeout)) return;
  RequestBuffer buffer(data, data.size());
  MPI_Request request;
  const int rc =
      MPI_Ibcast(buffer.data(), static_cast<int>(data.size()), MPI_BYTE, root, comm_, &request);
  if (rc != MPI_SUCCESS) throw CommError(describe_failure("MPI_Ibcast", mpi_error_text(rc)));
  wait_or_abandon([&] { wait(request, "broadcast (MPI_Ibcast)", timeout); }, {&buffer});
  std::memcpy(data.data(), buffer.data(), data.size());
}

namespace {

class MpiPendingBroadcast : public PendingBroadcast {
 public:
  MpiPendingBroadcast(MpiCommunicator* comm, std::vector<std::uint8_t>* buffer)
      : comm_(comm), buffer_(buffer) {}
  ~MpiPendingBroadcast() override {
    if (done_) delete buffer_;  // else MPI may still write into it: leaked on purpose
  }
  MPI_Request& request() { return request_; }
  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    if (request_ == MPI_REQUEST_NULL) {
      done_ = true;
      return;
    }
    comm_->wait(request_, "broadcast (MPI_Ibcast)", timeout);
    done_ = true;
  }
  std::span<const std::uint8_t> data() const override { return *buffer_; }

 private:
  MpiCommunicator* comm_;
  std::vector<std::uint8_t>* buffer_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<PendingBroadcast> MpiCommunicator::start_broadcast(
    std::span<const std::uint8_t> data, int root, std::chrono::milliseconds) {
  auto* buffer = new std::vector<std::uint8_t>(data.begin(), data.end());
  auto pending = std::make_unique<MpiPendingBroadcast>(this, buffer);
  const int rc = MPI_Ibcast(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE, root, comm_,
                            &pending->request());
  if (rc != MPI_SUCCESS) {
    pending->request() = MPI_REQUEST_NULL;
    throw CommError(describe_failure("MPI_Ibcast", mpi_error_text(rc)));
  }
  return pending;
}

void MpiCommunicator::send(std::span<const std::uint8_t> data, int peer, int tag,
                           std::chrono::milliseconds timeout) {
  RequestBuffer buffer(data, data.size());
  MPI_Request request;
  const int rc =
      MPI_Isend(buffer.data(), static_cast<int>(data.size()), MPI_BYTE, peer, tag, comm_, &request);
  if (rc != MPI_SUCCESS) throw CommError(describe_failure("MPI_Isend", mpi_error_text(rc)));
  wait_or_abandon([&] { wait(request, "send (MPI_Isend)", timeout); }, {&buffer});
}

void MpiCommunicator::recv(std::span<std::uint8_t> data, int peer, int tag,
                           std::chrono::milliseconds timeout) {
  RequestBuffer buffer({}, data.size());
  MPI_Request request;
  const int rc =
      MPI_Irecv(buffer.data(), static_cast<int>(data.size()), MPI_BYTE, peer, tag, comm_, &request);
  if (rc != MPI_SUCCESS) throw CommError(describe_failure("MPI_Irecv", mpi_error_text(rc)));
  wait_or_abandon([&] { wait(request, "recv (MPI_Irecv)", timeout); }, {&buffer});
  std::memcpy(data.data(), buffer.data(), data.size());
}

void MpiCommunicator::gather_from_all(std::span<const std::uint8_t> input,
                                      std::span<std::uint8_t> output,
                                      std::chrono::milliseconds timeout) {
  if (wait_mode_ == Wait::kBlocking) {
    const int rc = MPI_Allgather(input.data(), static_cast<int>(input.size()), MPI_BYTE,
                                 output.data(), static_cast<int>(input.size()), MPI_BYTE, comm_);
    if (rc != MPI_SUCCESS) throw CommError(describe_failure("MPI_Allgather", mpi_error_text(rc)));
    return;
  }
  RequestBuffer in(input, input.size());
  RequestBuffer out({}, output.size());
  MPI_Request request;
  const int rc = MPI_Iallgather(in.data(), static_cast<int>(input.size()), MPI_BYTE, out.data(),
                                static_cast<int>(input.size()), MPI_BYTE, comm_, &request);
  if (rc != MPI_SUCCESS) throw CommError(describe_failure("MPI_Iallgather", mpi_error_text(rc)));
  wait_or_abandon([&] { wait(request, "all_gather (MPI_Iallgather)", timeout); }, {&in, &out});
  std::memcpy(output.data(), out.data(), output.size());
}

}  // namespace lens
