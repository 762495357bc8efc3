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
/// Also here: make_gloo_process_group() (a ProcessGroupGloo over a store, on
/// the device lens picks: GLOO_SOCKET_IFNAME if set, else 127.0.0.1 for a
/// loopback master, else the host's default) and TcpStoreServer, the
/// rendezvous server a local launcher runs on a free port.
///
/// Thread safety: one collective at a time, like the process group.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>

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
  void all_gather(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                  std::chrono::milliseconds timeout) override;

  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_;
  int size_;
  std::string engine_;
};

/// A ProcessGroupGloo over `store`. `master_addr` picks the device when
/// GLOO_SOCKET_IFNAME is unset. Throws CommError if the group cannot form.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_process_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& master_addr = "127.0.0.1");

/// A client of the TCPStore at host:port (rank 0 included: the server runs in
/// the launcher, or wherever TcpStoreServer was started).
c10::intrusive_ptr<c10d::Store> connect_tcp_store(const std::string& host, std::uint16_t port,
                                                  int world_size,
                                                  std::chrono::milliseconds timeout);

/// A TCPStore server on 127.0.0.1 and a free port, for launchers.
class TcpStoreServer {
 public:
  explicit TcpStoreServer(std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~TcpStoreServer();
  std::uint16_t port() const;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::uint16_t port_ = 0;
};

}  // namespace lens
