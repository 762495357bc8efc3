/// \file
/// MetricsEndpoint: a registry's OpenMetrics text over HTTP, for Prometheus
/// to scrape (docs/metrics.md).
///
/// A thread of its own accepts connections and answers one request each:
/// `GET /metrics` gives the registry's text (`application/openmetrics-text;
/// version=1.0.0`), another path 404, another method 405, a request that is
/// malformed, larger than 8 KiB or slower than 2 s to arrive 400, 431 or
/// 408, and the connection is closed. What a client sends is never trusted:
/// a request is read into a bounded buffer and parsed there, and a client
/// that stalls only holds its own connection until the timeout (one at a
/// time: the scraper is one Prometheus).
///
/// Thread safety: stats() from any thread; stop() (or the destructor) once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "lens/metrics.h"

namespace lens {

class MetricsEndpoint {
 public:
  struct Stats {
    std::uint64_t scrapes = 0;   ///< 200 answers
    std::uint64_t rejected = 0;  ///< every other answer, and dropped connections
  };

  /// Listens on `host` (an IPv4 address; "0.0.0.0" for every interface) and
  /// `port` (0: one the system picks, see port()). std::runtime_error,
  /// naming the address, when it cannot listen.
  MetricsEndpoint(const MetricRegistry& registry, const std::string& host, int port);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }
  /// Stops listening and joins the thread (a request in progress is cut).
  void stop();
  Stats stats() const;

 private:
  void run();
  void serve(int fd);

  const MetricRegistry& registry_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: stop() writes, the thread wakes
  int port_ = 0;
  std::atomic<std::uint64_t> scrapes_{0}, rejected_{0};
  std::thread thread_;
};

}  // namespace lens
