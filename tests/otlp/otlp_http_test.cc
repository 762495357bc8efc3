// OTLP/HTTP export against a real receiver on loopback: field-by-field
// decoding of protobuf and JSON, and the delivery rules under faults. In
// every fault test the traced program ends normally and every span is either
// delivered (once) or counted as failed and spooled.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "lens/error.h"
#include "lens/otlp_http_exporter.h"
#include "lens/telemetry.h"
#include "lens/version.h"
#include "otlp_receiver.h"
#include "remote_context.h"
#include "test_env.h"

namespace lens {
namespace {

using namespace std::chrono_literals;
using testing::OtlpReceiver;
using testing::Reply;

std::string bytes_of(const TraceId& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes().data()), TraceId::kSize);
}
std::string bytes_of(const SpanId& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes().data()), SpanId::kSize);
}

OtlpHttpOptions fast_options(const std::string& endpoint) {
  OtlpHttpOptions o;
  o.endpoint = endpoint;
  o.timeout = 2000ms;
  o.initial_backoff = 50ms;
  o.max_backoff = 200ms;
  o.retry_deadline = 10s;
  return o;
}

struct Traced {
  std::shared_ptr<OtlpHttpExporter> exporter;
  std::unique_ptr<Telemetry> telemetry;

  explicit Traced(OtlpHttpOptions o) {
    exporter = std::make_shared<OtlpHttpExporter>(std::move(o));
    TelemetryOptions opts;
    opts.enabled = true;
    opts.span_groups = "all";
    opts.run_id = "otlp-test";
    opts.rank = 1;
    opts.world_size = 2;
    opts.exporter_instance = exporter;
    telemetry = Telemetry::create(opts, testing::fake_env({}));
  }
  // Ends `n` spans as one batch and flushes.
  void spans(int n, std::string_view name = "work") {
    Tracer t = telemetry->tracer();
    for (int i = 0; i < n; ++i) t.start_span(SpanGroup::kJob, name).end();
    telemetry->flush(60s);
  }
};

struct Recorded {
  SpanContext step, linked, remote;
};

// One step span and a linked child with everything the encoders must carry.
Recorded record_rich_spans(Telemetry& telemetry) {
  Recorded r;
  r.remote = testing::remote_context("rojo=1");
  Tracer tracer = telemetry.tracer("nemo.lens", "0.1.0");
  StartOptions so;
  so.kind = SpanKind::kServer;
  Span step = tracer.start_span(SpanGroup::kStep, "megatron.train_step", so);
  r.step = step.context();
  CurrentSpanScope scope(step);
  {
    Span linked = tracer.start_span(SpanGroup::kCommunication, "megatron.pp.recv_forward.linked");
    r.linked = linked.context();
    linked.set_attribute("dl.microbatch_id", std::int64_t{1} << 40);
    linked.set_attribute("ratio", 0.5);
    linked.set_attribute("ok", true);
    linked.set_attribute("name", "λ \"q\"");
    linked.set_attribute("ints", AttributeValue(std::vector<std::int64_t>{1, -2}));
    linked.add_link(r.remote, {{"link.kind", "pp-step"}});
    linked.add_event("received", {{"bytes", 4096}});
    linked.set_status(StatusCode::kError, "late");
  }
  step.end();
  return r;
}

TEST(OtlpHttp, ProtobufArrivesFieldByField) {
  OtlpReceiver receiver;
  receiver.start();
  OtlpHttpOptions o = fast_options(receiver.endpoint());
  o.headers = {{"authorization", "Bearer token-123"}};
  Traced t(o);
  Recorded r = record_rich_spans(*t.telemetry);
  ASSERT_TRUE(t.telemetry->flush(30s));
  auto requests = receiver.protobuf_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(receiver.headers()[0]["authorization"], "Bearer token-123");
  EXPECT_EQ(receiver.headers()[0]["Content-Type"], "application/x-protobuf");
  const auto& rs = requests[0].resource_spans(0);
  std::map<std::string, lens::test::otlp::AnyValue> res;
  for (const auto& kv : rs.resource().attributes()) res[kv.key()] = kv.value();
  EXPECT_EQ(res["service.name"].string_value(), "megatron-lm");
  EXPECT_EQ(res["nemo.run.id"].string_value(), "otlp-test");
  EXPECT_EQ(res["dl.rank"].int_value(), 1);
  EXPECT_EQ(res["dl.world_size"].int_value(), 2);
  ASSERT_EQ(rs.scope_spans_size(), 1);
  EXPECT_EQ(rs.scope_spans(0).scope().name(), "nemo.lens");
  EXPECT_EQ(rs.scope_spans(0).scope().version(), "0.1.0");
  ASSERT_EQ(rs.scope_spans(0).spans_size(), 2);
  const auto& linked = rs.scope_spans(0).spans(0);
  const auto& step = rs.scope_spans(0).spans(1);

  EXPECT_EQ(step.name(), "megatron.train_step");
  EXPECT_EQ(step.kind(), lens::test::otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(step.trace_id(), bytes_of(r.step.trace_id));
  EXPECT_EQ(step.span_id(), bytes_of(r.step.span_id));
  EXPECT_TRUE(step.parent_span_id().empty());
  EXPECT_EQ(step.flags(), 0x101u);
  EXPECT_EQ(step.status().code(), lens::test::otlp::Status::STATUS_CODE_UNSET);

  EXPECT_EQ(linked.name(), "megatron.pp.recv_forward.linked");
  EXPECT_EQ(linked.kind(), lens::test::otlp::Span::SPAN_KIND_INTERNAL);
  EXPECT_EQ(linked.trace_id(), bytes_of(r.step.trace_id));
  EXPECT_EQ(linked.span_id(), bytes_of(r.linked.span_id));
  EXPECT_EQ(linked.parent_span_id(), bytes_of(r.step.span_id));
  EXPECT_GT(linked.start_time_unix_nano(), 1'600'000'000'000'000'000ull);
  EXPECT_GE(linked.end_time_unix_nano(), linked.start_time_unix_nano());
  EXPECT_GE(step.end_time_unix_nano(), linked.end_time_unix_nano());
  std::map<std::string, lens::test::otlp::AnyValue> attrs;
  for (const auto& kv : linked.attributes()) attrs[kv.key()] = kv.value();
  EXPECT_EQ(attrs["dl.microbatch_id"].int_value(), std::int64_t{1} << 40);
  EXPECT_EQ(attrs["ratio"].double_value(), 0.5);
  EXPECT_TRUE(attrs["ok"].bool_value());
  EXPECT_EQ(attrs["name"].string_value(), "λ \"q\"");
  ASSERT_EQ(attrs["ints"].array_value().values_size(), 2);
  EXPECT_EQ(attrs["ints"].array_value().values(1).int_value(), -2);
  ASSERT_EQ(linked.links_size(), 1);
  EXPECT_EQ(linked.links(0).trace_id(), bytes_of(r.remote.trace_id));
  EXPECT_EQ(linked.links(0).span_id(), bytes_of(r.remote.span_id));
  EXPECT_EQ(linked.links(0).trace_state(), "rojo=1");
  EXPECT_EQ(linked.links(0).flags(), 0x301u);
  ASSERT_EQ(linked.links(0).attributes_size(), 1);
  EXPECT_EQ(linked.links(0).attributes(0).value().string_value(), "pp-step");
  ASSERT_EQ(linked.events_size(), 1);
  EXPECT_EQ(linked.events(0).name(), "received");
  EXPECT_GE(linked.events(0).time_unix_nano(), linked.start_time_unix_nano());
  EXPECT_EQ(linked.events(0).attributes(0).value().int_value(), 4096);
  EXPECT_EQ(linked.status().code(), lens::test::otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(linked.status().message(), "late");
  EXPECT_EQ(t.exporter->stats().spans_delivered, 2u);
}

TEST(OtlpHttp, JsonAndGzipArriveFieldByField) {
  OtlpReceiver receiver;
  receiver.start();
  OtlpHttpOptions o = fast_options(receiver.endpoint());
  o.json = true;
  o.gzip = true;
  Traced t(o);
  Recorded r = record_rich_spans(*t.telemetry);
  ASSERT_TRUE(t.telemetry->flush(30s));
  auto requests = receiver.json_requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(receiver.headers()[0]["Content-Encoding"], "gzip");
  const auto& spans = requests[0]["resourceSpans"][0]["scopeSpans"][0]["spans"];
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["traceId"], r.step.trace_id.to_hex());
  EXPECT_EQ(spans[0]["parentSpanId"], r.step.span_id.to_hex());
  EXPECT_EQ(spans[0]["links"][0]["spanId"], r.remote.span_id.to_hex());
  EXPECT_EQ(spans[0]["events"][0]["name"], "received");
  EXPECT_EQ(spans[0]["status"]["code"], 2);
  EXPECT_EQ(spans[1]["kind"], 2);
}

// A port nobody listens on (connections to it are refused).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(OtlpHttp, EndpointDownAtStartThenUpDeliversOnce) {
  const int port = free_port();
  OtlpHttpOptions o = fast_options("http://127.0.0.1:" + std::to_string(port) + "/v1/traces");
  o.initial_backoff = 200ms;
  Traced t(o);
  std::unique_ptr<OtlpReceiver> receiver;
  std::thread later([&] {
    std::this_thread::sleep_for(500ms);  // the first attempts are refused
    receiver = std::make_unique<OtlpReceiver>([](int) { return Reply{}; }, port);
    receiver->start();
  });
  const auto start = std::chrono::steady_clock::now();
  t.spans(5);
  later.join();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 450ms);
  ASSERT_GT(receiver->port(), 0);
  EXPECT_EQ(receiver->accepted_spans(), 5u);
  EXPECT_EQ(receiver->requests(), 1);
  const auto s = t.exporter->stats();
  EXPECT_EQ(s.spans_delivered, 5u);
  EXPECT_EQ(s.spans_failed, 0u);
  EXPECT_GE(s.retries, 1u);
}

TEST(OtlpHttp, RetryAfterOn429IsHonoured) {
  OtlpReceiver receiver([](int n) {
    Reply r;
    if (n == 0) {
      r.status = 429;
      r.retry_after = "1";
    }
    return r;
  });
  receiver.start();
  Traced t(fast_options(receiver.endpoint()));
  const auto start = std::chrono::steady_clock::now();
  t.spans(3);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);  // not the 50 ms backoff
  EXPECT_EQ(receiver.requests(), 2);
  EXPECT_EQ(receiver.accepted_spans(), 3u);
  EXPECT_EQ(t.exporter->stats().spans_delivered, 3u);
}

TEST(OtlpHttp, Status503IsRetriedThenDelivered) {
  OtlpReceiver receiver([](int n) { return Reply{n < 2 ? 503 : 200, "", "", 0}; });
  receiver.start();
  Traced t(fast_options(receiver.endpoint()));
  t.spans(4);
  EXPECT_EQ(receiver.requests(), 3);
  EXPECT_EQ(receiver.accepted_spans(), 4u);
  EXPECT_EQ(t.exporter->stats().retries, 2u);
}

class Spooling : public ::testing::Test {
 protected:
  void SetUp() override {
    spool_ = std::filesystem::temp_directory_path() /
             ("lens-spool-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()) /
             "spool.otlp.jsonl";
    std::filesystem::remove_all(spool_.parent_path());
  }
  void TearDown() override { std::filesystem::remove_all(spool_.parent_path()); }
  std::size_t spooled_spans() {
    std::ifstream in(spool_);
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      for (const auto& rs : j["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"]) n += ss["spans"].size();
    }
    return n;
  }
  std::filesystem::path spool_;
};

TEST_F(Spooling, Status500ThenOkFailsOnlyTheFirstBatchWithoutRetry) {
  OtlpReceiver receiver([](int n) { return Reply{n == 0 ? 500 : 200, "", "", 0}; });
  receiver.start();
  OtlpHttpOptions o = fast_options(receiver.endpoint());
  o.spool_path = spool_.string();
  Traced t(o);
  t.spans(4);  // answered 500: not retryable in OTLP/HTTP
  t.spans(6);  // answered 200
  EXPECT_EQ(receiver.requests(), 2);
  EXPECT_EQ(receiver.accepted_spans(), 6u);
  const auto s = t.exporter->stats();
  EXPECT_EQ(s.spans_failed, 4u);
  EXPECT_EQ(s.spans_spooled, 4u);
  EXPECT_EQ(s.spans_delivered, 6u);
  EXPECT_EQ(spooled_spans(), 4u);
  EXPECT_NE(s.last_error.find("HTTP 500"), std::string::npos) << s.last_error;
  EXPECT_EQ(t.telemetry->stats().processor.spooled, 4u);
  EXPECT_EQ(t.telemetry->stats().processor.export_failed, 0u);
}

TEST_F(Spooling, Status400IsNotRetried) {
  OtlpReceiver receiver([](int) { return Reply{400, "", "", 0}; });
  receiver.start();
  OtlpHttpOptions o = fast_options(receiver.endpoint());
  o.spool_path = spool_.string();
  Traced t(o);
  t.spans(3);
  EXPECT_EQ(receiver.requests(), 1);
  EXPECT_EQ(t.exporter->stats().spans_failed, 3u);
  EXPECT_EQ(spooled_spans(), 3u);
}

TEST_F(Spooling, SlowReceiverPastTheTimeoutEndsInTheSpool) {
  OtlpReceiver receiver([](int) { return Reply{200, "", "", 1500}; });
  receiver.start();
  OtlpHttpOptions o = fast_options(receiver.endpoint());
  o.timeout = 200ms;
  o.max_attempts = 3;
  o.spool_path = spool_.string();
  Traced t(o);
  const auto start = std::chrono::steady_clock::now();
  t.spans(5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  const auto s = t.exporter->stats();
  // With a spool a request that timed out is not retried: the spool keeps
  // the batch at once, and the backend is taken as not answering.
  EXPECT_EQ(s.requests, 1u);
  EXPECT_EQ(s.spans_failed, 5u);
  EXPECT_EQ(s.backend_unhealthy, 1u);
  EXPECT_EQ(spooled_spans(), 5u);
  receiver.stop();
}

// A bare TCP server: the first connection is reset mid-request, the next
// ones get 200.
class ResettingServer {
 public:
  ResettingServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 8);
    thread_ = std::thread([this] { serve(); });
  }
  ~ResettingServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces";
  }
  int connections() const { return connections_.load(); }
  int completed() const { return completed_.load(); }

 private:
  void serve() {
    while (!stop_) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      const int n = connections_++;
      char buf[4096];
      if (n == 0) {
        (void)read(c, buf, 64);  // part of the request, then a reset
        linger l{1, 0};
        setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        close(c);
        continue;
      }
      std::string req;
      std::size_t need = std::string::npos;
      while (need == std::string::npos || req.size() < need) {
        ssize_t r = read(c, buf, sizeof buf);
        if (r <= 0) break;
        req.append(buf, static_cast<std::size_t>(r));
        auto hdr_end = req.find("\r\n\r\n");
        if (hdr_end != std::string::npos && need == std::string::npos) {
          auto cl = req.find("Content-Length: ");
          std::size_t body = cl == std::string::npos ? 0 : std::stoul(req.substr(cl + 16));
          need = hdr_end + 4 + body;
        }
      }
      // Counted before the reply goes out: the client may check the count as
      // soon as it has read the reply.
      ++completed_;
      const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)write(c, ok.data(), ok.size());
      close(c);
    }
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0}, completed_{0};
  std::thread thread_;
};

TEST(OtlpHttp, ConnectionResetMidRequestIsRetried) {
  ResettingServer server;
  Traced t(fast_options(server.endpoint()));
  t.spans(7);
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.completed(), 1);
  const auto s = t.exporter->stats();
  EXPECT_EQ(s.spans_delivered, 7u);
  EXPECT_EQ(s.retries, 1u);
}

TEST(OtlpHttp, PartialSuccessRejectedCountIsRead) {
  lens::test::otlp::ExportTraceServiceResponse response;
  response.mutable_partial_success()->set_rejected_spans(2);
  response.mutable_partial_success()->set_error_message("too old");
  const std::string body = response.SerializeAsString();
  OtlpReceiver receiver([body](int) { return Reply{200, body, "", 0}; });
  receiver.start();
  Traced t(fast_options(receiver.endpoint()));
  t.spans(5);
  EXPECT_EQ(t.exporter->stats().spans_rejected, 2u);
  EXPECT_EQ(t.exporter->stats().spans_delivered, 5u);
}

TEST(OtlpHttp, PartialSuccessMessageIsLogged) {
  lens::test::otlp::ExportTraceServiceResponse response;
  response.mutable_partial_success()->set_rejected_spans(1);
  response.mutable_partial_success()->set_error_message("span too old\n(dropped)");
  const std::string body = response.SerializeAsString();
  OtlpReceiver receiver([body](int) { return Reply{200, body, "", 0}; });
  receiver.start();
  Traced t(fast_options(receiver.endpoint()));
  ::testing::internal::CaptureStderr();
  t.spans(3);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("rejected 1 of 3 spans: span too old?(dropped)"), std::string::npos) << log;
}

TEST(OtlpHttp, RequestsNameLensAsTheirUserAgent) {
  OtlpReceiver receiver;
  receiver.start();
  Traced t(fast_options(receiver.endpoint()));
  t.spans(1);
  ASSERT_EQ(receiver.headers().size(), 1u);
  EXPECT_EQ(receiver.headers()[0].at("User-Agent"), std::string("lens/") + kVersion);
}

TEST(OtlpHttp, ErrorsShowTheEndpointWithoutItsCredentials) {
  Traced t(fast_options("http://user:hunter2@127.0.0.1:1/v1/traces?token=abc123"));
  t.spans(1);
  const std::string error = t.exporter->stats().last_error;
  EXPECT_NE(error.find("http://***@127.0.0.1:1/v1/traces?token=***"), std::string::npos) << error;
  EXPECT_EQ(error.find("hunter2"), std::string::npos) << error;
  EXPECT_EQ(error.find("abc123"), std::string::npos) << error;
}

TEST(OtlpHttp, OneExportEndsWithinTheBatchExportTimeout) {
  // The receiver answers after 3 s; OTEL_BSP_EXPORT_TIMEOUT=400 ends the
  // export (every attempt and wait) long before, as failed.
  OtlpReceiver receiver([](int) { return Reply{200, "", "", 3000}; });
  receiver.start();
  TelemetryOptions opts;
  opts.enabled = true;
  opts.span_groups = "all";
  opts.run_id = "otlp-deadline";
  auto telemetry = Telemetry::create(
      opts, testing::fake_env({{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint()},
                               {"OTEL_BSP_EXPORT_TIMEOUT", "400"}}));
  telemetry->tracer().start_span(SpanGroup::kJob, "work").end();
  const auto start = std::chrono::steady_clock::now();
  telemetry->flush(60s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2500ms);
  const TelemetryStats stats = telemetry->stats();
  ASSERT_TRUE(stats.delivery);
  EXPECT_EQ(stats.delivery->spans_failed, 1u);
  EXPECT_EQ(stats.delivery->spans_delivered, 0u);
  telemetry->shutdown(1s);
  receiver.stop();
}

TEST(OtlpHttp, ShutdownCutsBackoffShort) {
  OtlpReceiver receiver([](int) { return Reply{503, "", "", 0}; });
  receiver.start();
  OtlpHttpOptions o = fast_options(receiver.endpoint());
  o.initial_backoff = 5s;
  o.max_backoff = 5s;
  o.retry_deadline = 60s;
  Traced t(o);
  t.telemetry->tracer().start_span(SpanGroup::kJob, "x").end();
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(200ms);
  t.telemetry->shutdown(3s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
}

// HTTPS: a self-signed certificate for 127.0.0.1, made for the test with
// the openssl command, served by the receiver.
class Https : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lens-tls-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    tls_.certificate = (dir_ / "cert.pem").string();
    tls_.private_key = (dir_ / "key.pem").string();
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
        "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
        tls_.private_key + " -out " + tls_.certificate + " > " + (dir_ / "openssl.log").string() +
        " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a test certificate";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  testing::TlsFiles tls_;
};

TEST_F(Https, WithTheConfiguredCaTheSpansArrive) {
  OtlpReceiver receiver([](int) { return Reply{}; }, 0, tls_);
  receiver.start();
  ASSERT_EQ(receiver.endpoint().rfind("https://", 0), 0u);
  OtlpHttpOptions o = fast_options(receiver.endpoint());
  o.certificate = tls_.certificate;
  Traced t(o);
  t.spans(4, "over-tls");
  EXPECT_EQ(receiver.accepted_spans(), 4u);
  const auto requests = receiver.protobuf_requests();
  ASSERT_EQ(requests.size(), 1u);
  const auto& spans = requests[0].resource_spans(0).scope_spans(0).spans();
  ASSERT_EQ(spans.size(), 4);
  EXPECT_EQ(spans[0].name(), "over-tls");
  const auto s = t.exporter->stats();
  EXPECT_EQ(s.spans_delivered, 4u);
  EXPECT_EQ(s.spans_failed, 0u);
}

TEST_F(Https, MutualTlsSendsTheClientCertificateTheReceiverRequires) {
  // A client certificate and key (self-signed: the receiver trusts it as its
  // own CA), and a receiver that refuses clients without one it signed.
  const std::string client_cert = (dir_ / "client-cert.pem").string();
  const std::string client_key = (dir_ / "client-key.pem").string();
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=lens-client -keyout " +
      client_key + " -out " + client_cert + " > " + (dir_ / "openssl-client.log").string() +
      " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a client certificate";
  testing::TlsFiles tls = tls_;
  tls.client_ca = client_cert;
  OtlpReceiver receiver([](int) { return Reply{}; }, 0, tls);
  receiver.start();
  const auto env = [&](bool with_client) {
    std::map<std::string, std::string> e = {
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint()},
        {"OTEL_EXPORTER_OTLP_CERTIFICATE", tls_.certificate},
        {"OTEL_EXPORTER_OTLP_TIMEOUT", "2000"},
        {"OTEL_BSP_EXPORT_TIMEOUT", "3000"}};  // a refused handshake is retried until then
    if (with_client) {
      e["OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"] = client_cert;
      e["OTEL_EXPORTER_OTLP_CLIENT_KEY"] = client_key;
    }
    return e;
  };
  for (const bool with_client : {true, false}) {
    TelemetryOptions opts;
    opts.enabled = true;
    opts.span_groups = "all";
    opts.run_id = "mtls";
    auto telemetry = Telemetry::create(opts, testing::fake_env(env(with_client)));
    telemetry->tracer().start_span(SpanGroup::kJob, "over-mtls").end();
    telemetry->flush(30s);
    const TelemetryStats stats = telemetry->stats();
    ASSERT_TRUE(stats.delivery);
    EXPECT_EQ(stats.delivery->spans_delivered, with_client ? 1u : 0u) << with_client;
    EXPECT_EQ(stats.delivery->spans_failed, with_client ? 0u : 1u) << with_client;
    telemetry->shutdown(1s);
  }
  EXPECT_EQ(receiver.accepted_spans(), 1u);
  // One of the two without the other is a configuration error.
  auto half = env(true);
  half.erase("OTEL_EXPORTER_OTLP_CLIENT_KEY");
  EXPECT_THROW(resolve_config({}, testing::fake_env(half)), ConfigError);
}

TEST_F(Https, AnUntrustedCertificateIsRefusedAndCountedNotRetried) {
  OtlpReceiver receiver([](int) { return Reply{}; }, 0, tls_);
  receiver.start();
  // No CA given: verification is on by default and the system's CAs do not
  // know the test's certificate, so nothing may be sent.
  Traced t(fast_options(receiver.endpoint()));
  t.spans(3);
  EXPECT_EQ(receiver.accepted_spans(), 0u);
  const auto s = t.exporter->stats();
  EXPECT_EQ(s.spans_delivered, 0u);
  EXPECT_EQ(s.spans_failed, 3u);
  EXPECT_EQ(s.retries, 0u);  // a certificate does not get better by retrying
  EXPECT_NE(s.last_error.find("certificate"), std::string::npos) << s.last_error;
}

}  // namespace
}  // namespace lens
