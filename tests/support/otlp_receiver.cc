#include "otlp_receiver.h"

#include <zlib.h>

#include <chrono>

namespace lens::testing {
namespace {

std::string gunzip(const std::string& in) {
  z_stream zs{};
  inflateInit2(&zs, 15 + 32);
  std::string out(in.size() * 8 + 1024, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc;
  do {
    if (zs.total_out >= out.size()) out.resize(out.size() * 2);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
    zs.avail_out = static_cast<uInt>(out.size() - zs.total_out);
    rc = inflate(&zs, Z_NO_FLUSH);
  } while (rc == Z_OK);
  out.resize(zs.total_out);
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("bad gzip body");
  return out;
}

}  // namespace

OtlpReceiver::OtlpReceiver(std::function<Reply(int)> policy, int port, std::optional<TlsFiles> tls)
    : tls_(tls.has_value()), policy_(std::move(policy)) {
  if (tls) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        tls->certificate.c_str(), tls->private_key.c_str(),
        tls->client_ca.empty() ? nullptr : tls->client_ca.c_str());
    if (!ssl->is_valid())
      throw std::runtime_error("test receiver: cannot load " + tls->certificate + " / " +
                               tls->private_key);
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  // Both routes answer as the policy says, inflate a gzip body the server
  // left as it came, and keep the request's headers; then each decodes its
  // own message.
  const auto take = [this](const httplib::Request& req, httplib::Response& res, std::string& body) {
    const int n = requests_.fetch_add(1);
    Reply reply = policy_(n);
    if (reply.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(reply.delay_ms));
    res.status = reply.status;
    if (!reply.retry_after.empty()) res.set_header("Retry-After", reply.retry_after);
    if (reply.status < 200 || reply.status >= 300) return std::optional<Reply>();
    body = req.body;
    if (body.size() > 2 && static_cast<unsigned char>(body[0]) == 0x1f &&
        static_cast<unsigned char>(body[1]) == 0x8b)
      body = gunzip(body);
    std::map<std::string, std::string> hdrs;
    for (const auto& [k, v] : req.headers) hdrs[k] = v;
    std::lock_guard<std::mutex> lock(mu_);
    headers_.push_back(hdrs);
    return std::optional<Reply>(reply);
  };
  server_->Post("/v1/traces", [this, take](const httplib::Request& req, httplib::Response& res) {
    std::string body;
    const std::optional<Reply> reply = take(req, res, body);
    if (!reply) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (req.get_header_value("Content-Type") == "application/json") {
      nlohmann::json j = nlohmann::json::parse(body);
      for (const auto& rs : j["resourceSpans"])
        for (const auto& ss : rs["scopeSpans"]) accepted_spans_ += ss["spans"].size();
      json_.push_back(std::move(j));
      res.set_content(reply->body.empty() ? "{}" : reply->body, "application/json");
    } else {
      lens::test::otlp::ExportTraceServiceRequest r;
      if (!r.ParseFromString(body)) {
        res.status = 400;
        return;
      }
      for (const auto& rs : r.resource_spans())
        for (const auto& ss : rs.scope_spans())
          accepted_spans_ += static_cast<std::size_t>(ss.spans_size());
      proto_.push_back(std::move(r));
      res.set_content(reply->body, "application/x-protobuf");
    }
  });
  server_->Post("/v1/metrics", [this, take](const httplib::Request& req, httplib::Response& res) {
    std::string body;
    const std::optional<Reply> reply = take(req, res, body);
    if (!reply) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (req.get_header_value("Content-Type") == "application/json") {
      metrics_json_.push_back(nlohmann::json::parse(body));
      res.set_content("{}", "application/json");
    } else {
      lens::test::otlp::ExportMetricsServiceRequest r;
      if (!r.ParseFromString(body)) {
        res.status = 400;
        return;
      }
      metrics_proto_.push_back(std::move(r));
      res.set_content("", "application/x-protobuf");
    }
  });
  if (port > 0) {
    port_ = server_->bind_to_port("127.0.0.1", port) ? port : -1;
  } else {
    port_ = server_->bind_to_any_port("127.0.0.1");
  }
}

OtlpReceiver::~OtlpReceiver() { stop(); }

void OtlpReceiver::start() {
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  for (int i = 0; i < 2000 && !server_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void OtlpReceiver::stop() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::vector<lens::test::otlp::ExportTraceServiceRequest> OtlpReceiver::protobuf_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return proto_;
}
std::vector<nlohmann::json> OtlpReceiver::json_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return json_;
}
std::vector<std::map<std::string, std::string>> OtlpReceiver::headers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return headers_;
}
std::vector<lens::test::otlp::ExportMetricsServiceRequest> OtlpReceiver::metrics_protobuf_requests()
    const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_proto_;
}
std::vector<nlohmann::json> OtlpReceiver::metrics_json_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_json_;
}
std::size_t OtlpReceiver::accepted_spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_spans_;
}

}  // namespace lens::testing
