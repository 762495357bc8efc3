#include "lens/c10d_communicator.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>

namespace lens {
namespace {

// A uint8 tensor of its own holding a copy of `bytes` (or zeros). The
// engine only ever sees tensors it shares ownership of: a collective that
// times out keeps them alive in its Work while Gloo may still write, instead
// of writing into the caller's buffer after the caller has unwound.
at::Tensor owned_tensor(std::size_t size, std::span<const std::uint8_t> bytes = {}) {
  at::Tensor t =
      torch::zeros({static_cast<std::int64_t>(size)}, torch::TensorOptions().dtype(torch::kUInt8));
  std::copy(bytes.begin(), bytes.end(), t.data_ptr<std::uint8_t>());
  return t;
}

void copy_out(const at::Tensor& t, std::uint8_t* to) {
  std::copy_n(t.data_ptr<std::uint8_t>(), t.numel(), to);
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
  std::vector<at::Tensor> tensors;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    tensors.push_back(owned_tensor(data.size(), data));
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout;
    work = group_->broadcast(tensors, opts);
  } catch (const std::exception& e) {
    throw CommError(describe_failure("broadcast", e.what()));
  }
  wait_work(*this, *work, "broadcast", timeout);
  copy_out(tensors[0], data.data());
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
    at::Tensor tensor = owned_tensor(data.size(), data);
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

void C10dCommunicator::send(std::span<const std::uint8_t> data, int peer, int tag,
                            std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    std::vector<at::Tensor> tensors{owned_tensor(data.size(), data)};
    work = group_->send(tensors, peer, tag);
  } catch (const std::exception& e) {
    throw CommError(describe_failure("send", e.what()));
  }
  wait_work(*this, *work, "send", timeout);
}

void C10dCommunicator::recv(std::span<std::uint8_t> data, int peer, int tag,
                            std::chrono::milliseconds timeout) {
  at::Tensor tensor;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    tensor = owned_tensor(data.size());
    std::vector<at::Tensor> tensors{tensor};
    work = group_->recv(tensors, peer, tag);
  } catch (const std::exception& e) {
    throw CommError(describe_failure("recv", e.what()));
  }
  wait_work(*this, *work, "recv", timeout);
  copy_out(tensor, data.data());
}

void C10dCommunicator::gather_from_all(std::span<const std::uint8_t> input,
                                       std::span<std::uint8_t> output,
                                       std::chrono::milliseconds timeout) {
  std::vector<at::Tensor> in;
  std::vector<std::vector<at::Tensor>> out(1);
  c10::intrusive_ptr<c10d::Work> work;
  try {
    in.push_back(owned_tensor(input.size(), input));
    for (int r = 0; r < size_; ++r) out[0].push_back(owned_tensor(input.size()));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout;
    work = group_->allgather(out, in, opts);
  } catch (const std::exception& e) {
    throw CommError(describe_failure("all_gather", e.what()));
  }
  wait_work(*this, *work, "all_gather", timeout);
  for (int r = 0; r < size_; ++r)
    copy_out(out[0][static_cast<std::size_t>(r)],
             output.data() + static_cast<std::size_t>(r) * input.size());
}

}  // namespace lens
