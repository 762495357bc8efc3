// Forming a job's Gloo process group, for the programs that launch jobs
// (lens-train, the multi-process tests, the benchmarks); not part of the
// installed library.
//
// make_gloo_process_group(): a ProcessGroupGloo over a store, on the device
// lens picks: GLOO_SOCKET_IFNAME if set, else 127.0.0.1 for a loopback
// master, else the host's default. TcpStoreServer: the rendezvous server a
// local launcher runs on a free port.
//
// Thread safety: as c10d's stores and process groups.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace lens {

/// A ProcessGroupGloo over `store`. `master_addr` picks the device when
/// GLOO_SOCKET_IFNAME is unset. Throws CommError if the group cannot form.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_process_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& master_addr = "127.0.0.1");

/// A client of the TCPStore at host:port (the server runs in the launcher,
/// or wherever TcpStoreServer was started).
c10::intrusive_ptr<c10d::Store> connect_tcp_store(const std::string& host, std::uint16_t port,
                                                  int world_size,
                                                  std::chrono::milliseconds timeout);

/// The rendezvous store of PyTorch's `env://` rule, for a rank started with
/// MASTER_ADDR and MASTER_PORT: rank 0 serves the TCPStore on MASTER_PORT
/// and every rank (rank 0 too) uses it; unless
/// TORCHELASTIC_USE_AGENT_STORE=True, which says the launcher's agent
/// (torchrun, lens-train's own launcher) already serves it, and then every
/// rank is a client of it, under the key prefix
/// /worker/attempt_<TORCHELASTIC_RESTART_COUNT>, as torch's own ranks use.
c10::intrusive_ptr<c10d::Store> rendezvous_store(const std::string& host, std::uint16_t port,
                                                 int rank, int world_size,
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
