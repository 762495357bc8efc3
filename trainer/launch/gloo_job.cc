// A job's Gloo process group over a TCPStore (gloo_job.h).
#include "gloo_job.h"

#include <torch/torch.h>

#include <cstdlib>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "lens/communicator.h"

namespace lens {

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

namespace {

// A TCPStore at host:port, its server or a client of it.
c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, std::uint16_t port,
                                          int world_size, std::chrono::milliseconds timeout,
                                          bool server) {
  c10d::TCPStoreOptions opts;
  opts.port = port;
  opts.isServer = server;
  opts.numWorkers = static_cast<std::size_t>(world_size);
  opts.waitWorkers = false;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_tcp_store(const std::string& host, std::uint16_t port,
                                                  int world_size,
                                                  std::chrono::milliseconds timeout) {
  try {
    return tcp_store(host, port, world_size, timeout, false);
  } catch (const std::exception& e) {
    throw CommError("lens: cannot reach the rendezvous store at " + host + ":" +
                    std::to_string(port) + ": " + e.what());
  }
}

c10::intrusive_ptr<c10d::Store> rendezvous_store(const std::string& host, std::uint16_t port,
                                                 int rank, int world_size,
                                                 std::chrono::milliseconds timeout) {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent != nullptr && std::string(agent) == "True") {
    const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    return c10::make_intrusive<c10d::PrefixStore>(
        std::string("/worker/attempt_") + (attempt ? attempt : "0"),
        connect_tcp_store(host, port, world_size, timeout));
  }
  if (rank != 0) return connect_tcp_store(host, port, world_size, timeout);
  try {
    return tcp_store(host, port, world_size, timeout, true);
  } catch (const std::exception& e) {
    throw CommError("lens: rank 0 cannot serve the rendezvous store on port " +
                    std::to_string(port) + " (MASTER_PORT): " + e.what() +
                    "; if a launcher's agent serves it already, set "
                    "TORCHELASTIC_USE_AGENT_STORE=True");
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
