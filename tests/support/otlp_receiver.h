// A real OTLP/HTTP receiver for tests: cpp-httplib on 127.0.0.1 and a free
// port, decoding what it receives at /v1/traces and /v1/metrics with
// libprotobuf (from the project's tests/support/otlp_{trace,metrics}.proto)
// or nlohmann-json. Each request's reply is
// chosen by a test-supplied policy, so tests can inject 429s, 500s and slow
// answers.
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "otlp_metrics.pb.h"
#include "otlp_trace.pb.h"

namespace lens::testing {

// A certificate and its private key (PEM files) to serve HTTPS with.
struct TlsFiles {
  std::string certificate;
  std::string private_key;
  std::string client_ca;  // when set, clients must present a certificate it signed
};

struct Reply {
  int status = 200;
  std::string body;  // for 200: an encoded ExportTraceServiceResponse, or empty
  std::string retry_after;
  int delay_ms = 0;
};

class OtlpReceiver {
 public:
  // policy(n) decides the reply to the n-th request (0-based).
  // port 0: any free port. With `tls`, the receiver speaks HTTPS.
  explicit OtlpReceiver(
      std::function<Reply(int)> policy = [](int) { return Reply{}; }, int port = 0,
      std::optional<TlsFiles> tls = std::nullopt);
  ~OtlpReceiver();

  // Binds now; listening starts with start() (so a test can have the port
  // before the receiver is up).
  int port() const { return port_; }
  std::string endpoint() const {
    return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_) +
           "/v1/traces";
  }
  void start();
  void stop();

  int requests() const { return requests_.load(); }
  // Successfully decoded requests that were answered with 2xx.
  std::vector<lens::test::otlp::ExportTraceServiceRequest> protobuf_requests() const;
  std::vector<nlohmann::json> json_requests() const;
  // The same for /v1/metrics (ExportMetricsServiceRequest).
  std::vector<lens::test::otlp::ExportMetricsServiceRequest> metrics_protobuf_requests() const;
  std::vector<nlohmann::json> metrics_json_requests() const;
  std::vector<std::map<std::string, std::string>> headers() const;
  // Spans in requests that were answered with 2xx.
  std::size_t accepted_spans() const;

 private:
  bool tls_ = false;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = -1;
  std::function<Reply(int)> policy_;
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  std::vector<lens::test::otlp::ExportTraceServiceRequest> proto_;
  std::vector<nlohmann::json> json_;
  std::vector<lens::test::otlp::ExportMetricsServiceRequest> metrics_proto_;
  std::vector<nlohmann::json> metrics_json_;
  std::vector<std::map<std::string, std::string>> headers_;
  std::size_t accepted_spans_ = 0;
};

}  // namespace lens::testing
