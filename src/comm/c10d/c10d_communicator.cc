#include "lens/c10d_communicator.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>

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

void C10dCommunicator::gather_from_all(std::span<const std::uint8_t> input,
                                       std::span<std::uint8_t> output,
                                       std::chrono::milliseconds timeout) {
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

}  // namespace lens
