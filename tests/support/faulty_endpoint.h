// Backends that misbehave, for the delivery tests: an HTTP endpoint on
// 127.0.0.1 that accepts connections and never answers, or one that resets
// each connection once the request starts arriving; and a port that refuses.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace lens::testing {

enum class Fault {
  kSilent,  // accepts and reads, never answers, keeps the connection open
  kReset,   // resets the connection (RST) once request bytes arrive
};

class FaultyEndpoint {
 public:
  explicit FaultyEndpoint(Fault fault);
  ~FaultyEndpoint();
  FaultyEndpoint(const FaultyEndpoint&) = delete;
  FaultyEndpoint& operator=(const FaultyEndpoint&) = delete;

  std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces";
  }
  int connections() const { return connections_.load(); }

 private:
  void serve();

  Fault fault_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::vector<int> open_;  // the silent endpoint's connections
  std::thread thread_;
};

// An endpoint on a loopback port nothing listens on (connections refused).
std::string refused_endpoint();

}  // namespace lens::testing
