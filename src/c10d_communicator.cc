#include "lens/c10d_communicator.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace lens {
namespace {

at::Tensor bytes_tensor(void* data, std::size_t bytes) {
  return torch::from_blob(data, {static_cast<std::int64_t>(bytes)},
                          torch::TensorOptions().dtype(torch::kUInt8));
}

// Waits for a posted collective: CommError naming `what` when the engine
// reports an error or the work is not done within `timeout`.
void wait_work(const C10dCommunicator& comm, c10d::Work& work, std::string_view what,
               std::chrono::milliseconds timeout) {
  bool done = false;
  try {
    done = work.wait(timeout);
  } catch (const std::exception& e) {
    throw CommError(comm.describe_failure(what, e.what()));
  }
  if (!done)
    throw CommError(comm.describe_failure(
        what, "did not complete within " + std::to_string(timeout.count()) + " ms"));
}

}  // namespace

C10dCommunicator::C10dCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group)
    : group_(std::move(group)) {
  if (!group_) throw CommError("lens: C10dCommunicator needs a process group");
  rank_ = group_->getRank();
  size_ = group_->getSize();
  engine_ = "c10d/" + group_->getBackendName();
}

void C10dCommunicator::broadcast(std::span<std::uint8_t> data, int root,
                                 std::chrono::milliseconds timeout) {
  // The tensors wrap the caller's bytes and stay alive until the work is done.
  std::vector<at::Tensor> tensors;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    tensors.push_back(bytes_tensor(data.data(), data.size()));
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout;
    work = group_->broadcast(tensors, opts);
  } catch (const std::exception& e) {
    throw CommError(describe_failure("broadcast", e.what()));
  }
  wait_work(*this, *work, "broadcast", timeout);
}

namespace {

class C10dPendingBroadcast : public PendingBroadcast {
 public:
  C10dPendingBroadcast(const C10dCommunicator* comm, at::Tensor tensor,
                       c10::intrusive_ptr<c10d::Work> work)
      : comm_(comm), tensor_(std::move(tensor)), work_(std::move(work)) {}
  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    wait_work(*comm_, *work_, "broadcast", timeout);
    done_ = true;
  }
  std::span<const std::uint8_t> data() const override {
    return {tensor_.data_ptr<std::uint8_t>(), static_cast<std::size_t>(tensor_.numel())};
  }

 private:
  const C10dCommunicator* comm_;
  at::Tensor tensor_;  // owned: the Work keeps it alive too, if abandoned
  c10::intrusive_ptr<c10d::Work> work_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<PendingBroadcast> C10dCommunicator::start_broadcast(
    std::span<const std::uint8_t> data, int root, std::chrono::milliseconds timeout) {
  try {
    at::Tensor tensor = torch::empty({static_cast<std::int64_t>(data.size())},
                                     torch::TensorOptions().dtype(torch::kUInt8));
    std::copy(data.begin(), data.end(), tensor.data_ptr<std::uint8_t>());
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout;
    auto work = group_->broadcast(tensors, opts);
    return std::make_unique<C10dPendingBroadcast>(this, std::move(tensor), std::move(work));
  } catch (const std::exception& e) {
    throw CommError(describe_failure("broadcast", e.what()));
  }
}

void C10dCommunicator::all_gather(std::span<const std::uint8_t> input,
                                  std::span<std::uint8_t> output,
                                  std::chrono::milliseconds timeout) {
  if (output.size() != input.size() * static_cast<std::size_t>(size_))
    throw CommError(describe_failure("all_gather", "output size is not size() * input size"));
  std::vector<at::Tensor> in;
  std::vector<std::vector<at::Tensor>> out(1);
  c10::intrusive_ptr<c10d::Work> work;
  try {
    in.push_back(bytes_tensor(const_cast<std::uint8_t*>(input.data()), input.size()));
    for (int r = 0; r < size_; ++r)
      out[0].push_back(
          bytes_tensor(output.data() + static_cast<std::size_t>(r) * input.size(), input.size()));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout;
    work = group_->allgather(out, in, opts);
  } catch (const std::exception& e) {
    throw CommError(describe_failure("all_gather", e.what()));
  }
  wait_work(*this, *work, "all_gather", timeout);
}

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_process_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& master_addr) {
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (master_addr == "127.0.0.1" || master_addr == "localhost" || master_addr == "::1") {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  } catch (const std::exception& e) {
    throw CommError("lens: creating the Gloo process group failed on rank " + std::to_string(rank) +
                    " of " + std::to_string(size) + ": " + e.what());
  }
}

c10::intrusive_ptr<c10d::Store> connect_tcp_store(const std::string& host, std::uint16_t port,
                                                  int world_size,
                                                  std::chrono::milliseconds timeout) {
  try {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = false;
    opts.numWorkers = static_cast<std::size_t>(world_size);
    opts.waitWorkers = false;
    opts.timeout = timeout;
    return c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    throw CommError("lens: cannot reach the rendezvous store at " + host + ":" +
                    std::to_string(port) + ": " + e.what());
  }
}

TcpStoreServer::TcpStoreServer(std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = 0;  // the kernel picks a free port
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  port_ = store->getPort();
  store_ = store;
}

TcpStoreServer::~TcpStoreServer() = default;

std::uint16_t TcpStoreServer::port() const { return port_; }

}  // namespace lens
