#include "faulty_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace lens::testing {
namespace {

// A TCP socket bound to 127.0.0.1 and a free port; returns the port.
int bind_loopback(int fd) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error("faulty endpoint: bind failed");
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace

FaultyEndpoint::FaultyEndpoint(Fault fault) : fault_(fault) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd_ < 0) throw std::runtime_error("faulty endpoint: no socket");
  port_ = bind_loopback(listen_fd_);
  if (::listen(listen_fd_, 64) != 0) throw std::runtime_error("faulty endpoint: listen failed");
  thread_ = std::thread([this] { serve(); });
}

FaultyEndpoint::~FaultyEndpoint() {
  stop_ = true;
  thread_.join();
  for (int fd : open_) ::close(fd);
  ::close(listen_fd_);
}

void FaultyEndpoint::serve() {
  char buf[4096];
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (int fd : open_) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      const int c = ::accept(listen_fd_, nullptr, nullptr);
      if (c >= 0) {
        ++connections_;
        open_.push_back(c);
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int fd = fds[i].fd;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      const bool closed = n <= 0;
      if (closed || fault_ == Fault::kReset) {
        if (!closed) {  // mid-request: a reset, not an orderly close
          linger l{1, 0};
          ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        }
        ::close(fd);
        std::erase(open_, fd);
      }
      // kSilent: the bytes are read and never answered.
    }
  }
}

std::string refused_endpoint() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int port = bind_loopback(fd);
  ::close(fd);  // bound, never listened on: the port refuses until reused
  return "http://127.0.0.1:" + std::to_string(port) + "/v1/traces";
}

}  // namespace lens::testing
