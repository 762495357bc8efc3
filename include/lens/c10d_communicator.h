/// \file
/// C10dCommunicator: the Communicator interface over a PyTorch c10d
/// ProcessGroup (e.g. ProcessGroupGloo), so the step protocol's broadcast runs
/// on the same engine, and in the same order, as the job's own collectives.
///
/// Byte buffers travel as uint8 CPU tensors that alias the caller's memory
/// (no copy). Each collective passes the timeout to c10d and waits on its Work
/// with it; a failure or timeout becomes CommError naming the collective and
/// the rank.
///
/// Thread safety: one collective at a time, like the process group.
#pragma once

#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "lens/communicator.h"

namespace lens {

class C10dCommunicator : public Communicator {
 public:
  explicit C10dCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return engine_; }

  void broadcast(std::span<std::uint8_t> data, int root,
                 std::chrono::milliseconds timeout) override;
  /// Posts the broadcast on the process group (an owned uint8 tensor) and
  /// returns at once; wait() waits for the group's Work.
  std::unique_ptr<PendingBroadcast> start_broadcast(std::span<const std::uint8_t> data, int root,
                                                    std::chrono::milliseconds timeout) override;

  /// ProcessGroup::send / recv of an owned uint8 tensor, with the caller's
  /// tag (the group's other point-to-point traffic must not use it).
  void send(std::span<const std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override;
  void recv(std::span<std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override;

  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }

 protected:
  void gather_from_all(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                       std::chrono::milliseconds timeout) override;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_;
  int size_;
  std::string engine_;
};

}  // namespace lens
