// MetricsEndpoint: the OpenMetrics text over HTTP (lens/metrics_endpoint.h).
#include "lens/metrics_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace lens {
namespace {

constexpr std::size_t kMaxRequestBytes = 8192;
constexpr int kRequestTimeoutMs = 2000;

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;  // the client went away: nothing to tell it
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void respond(int fd, int status, const char* reason, std::string_view type, std::string_view body) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                     "\r\nContent-Type: " + std::string(type) +
                     "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n";
  send_all(fd, head);
  send_all(fd, body);
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(const MetricRegistry& registry, const std::string& host, int port)
    : registry_(registry) {
  if (port < 0 || port > 65535)
    throw std::runtime_error("metrics endpoint: port " + std::to_string(port) +
                             " is not valid; accepted: 0 to 65535");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    throw std::runtime_error("metrics endpoint: '" + host + "' is not an IPv4 address");
  const std::string where = host + ":" + std::to_string(port);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw std::runtime_error("metrics endpoint: no socket: " + std::string(std::strerror(errno)));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error("metrics endpoint: cannot listen on " + where + ": " + why);
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (::pipe2(wake_fd_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("metrics endpoint: no pipe: " + std::string(std::strerror(errno)));
  }
  thread_ = std::thread([this] { run(); });
}

MetricsEndpoint::~MetricsEndpoint() { stop(); }

void MetricsEndpoint::stop() {
  if (!thread_.joinable()) return;
  const char byte = 1;
  while (::write(wake_fd_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_[0]);
  ::close(wake_fd_[1]);
}

MetricsEndpoint::Stats MetricsEndpoint::stats() const {
  return {scrapes_.load(), rejected_.load()};
}

void MetricsEndpoint::run() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    serve(fd);
    ::close(fd);
  }
}

void MetricsEndpoint::serve(int fd) {
  const auto reject = [&](int status, const char* reason, std::string_view body) {
    ++rejected_;
    respond(fd, status, reason, "text/plain", body);
  };
  // The request head, up to its blank line, within the size and time bounds.
  std::string request;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  for (;;) {
    if (request.size() > kMaxRequestBytes)
      return reject(431, "Request Header Fields Too Large", "request too large\n");
    if (request.find("\r\n\r\n") != std::string::npos) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (left <= 0 || ::poll(fds, 2, static_cast<int>(left)) <= 0)
      return reject(408, "Request Timeout", "request timeout\n");
    if (fds[1].revents != 0) return;  // stopping
    char buf[2048];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      ++rejected_;  // closed or reset before a whole request
      return;
    }
    request.append(buf, static_cast<std::size_t>(n));
  }
  // "METHOD SP TARGET SP HTTP/1.x"
  const std::string_view line = std::string_view(request).substr(0, request.find("\r\n"));
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1."))
    return reject(400, "Bad Request", "malformed request line\n");
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") return reject(405, "Method Not Allowed", "only GET\n");
  if (target != "/metrics") return reject(404, "Not Found", "the metrics are at /metrics\n");
  const std::string body = registry_.openmetrics();
  ++scrapes_;
  respond(fd, 200, "OK", "application/openmetrics-text; version=1.0.0; charset=utf-8",
          method == "HEAD" ? std::string_view() : std::string_view(body));
}

}  // namespace lens
