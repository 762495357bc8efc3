// Counters, gauges and histograms with exemplars, their OpenMetrics text,
// and the HTTP endpoint that serves it, against what the OpenMetrics 1.0
// text format says (metric families, cumulative buckets with le, +Inf,
// escaping, exemplars with trace_id and span_id, # EOF), and requests a
// client may send it (well-formed or not).
#include "lens/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "lens/metrics_endpoint.h"
#include "remote_context.h"

namespace lens {
namespace {

using namespace std::string_literals;

SpanContext sampled_context() { return testing::example_sampled_context(); }

TEST(Histogram, CountsPerBucketAndKeepsTheLatestSampledObservationAsItsExemplar) {
  Histogram h({0.1, 1, 10});
  SpanContext unsampled = sampled_context();
  unsampled.trace_flags = 0;
  h.record(0.05);                                               // bucket 0, no trace
  h.record(0.5, sampled_context(), 1'700'000'000'123'456'789);  // bucket 1
  h.record(0.7, unsampled, 1'700'000'001'000'000'000);          // bucket 1, not sampled
  h.record(100);                                                // +Inf
  h.record(std::nan(""));                                       // not counted
  const auto s = h.snapshot();
  EXPECT_EQ(s.counts, (std::vector<std::uint64_t>{1, 2, 0, 1}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 101.25);
  EXPECT_FALSE(s.exemplars[0].has_value()) << "no sampled trace fell there";
  ASSERT_TRUE(s.exemplars[1].has_value());
  EXPECT_DOUBLE_EQ(s.exemplars[1]->value, 0.5) << "an unsampled one does not replace it";
  EXPECT_THROW(Histogram({1, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({1, INFINITY}), std::invalid_argument);
}

TEST(MetricRegistry, WritesTheOpenMetricsTextFormat) {
  MetricRegistry r;
  r.counter("lens_steps", "Steps the rank has run.", {{"rank", "0"}}).add(3);
  r.gauge("lens_straggler_score", "The last score.", {}, {{"rank", "0"}}).set(1.5);
  Histogram& h = r.histogram("lens_step_duration_seconds", "Step time.", "seconds", {0.1, 1},
                             {{"rank", "0"}, {"stage", "1"}});
  h.record(0.25, sampled_context(), 1'700'000'000'000'000'123);
  h.record(2);
  const std::string text = r.openmetrics();
  const std::string expected =
      "# TYPE lens_steps counter\n"
      "# HELP lens_steps Steps the rank has run.\n"
      "lens_steps_total{rank=\"0\"} 3\n"
      "# TYPE lens_straggler_score gauge\n"
      "# HELP lens_straggler_score The last score.\n"
      "lens_straggler_score{rank=\"0\"} 1.5\n"
      "# TYPE lens_step_duration_seconds histogram\n"
      "# UNIT lens_step_duration_seconds seconds\n"
      "# HELP lens_step_duration_seconds Step time.\n"
      "lens_step_duration_seconds_bucket{rank=\"0\",stage=\"1\",le=\"0.1\"} 0\n"
      "lens_step_duration_seconds_bucket{rank=\"0\",stage=\"1\",le=\"1\"} 1 # "
      "{trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\",span_id=\"00f067aa0ba902b7\"} 0.25 "
      "1700000000.000000123\n"
      "lens_step_duration_seconds_bucket{rank=\"0\",stage=\"1\",le=\"+Inf\"} 2\n"
      "lens_step_duration_seconds_count{rank=\"0\",stage=\"1\"} 2\n"
      "lens_step_duration_seconds_sum{rank=\"0\",stage=\"1\"} 2.25\n"
      "# EOF\n";
  EXPECT_EQ(text, expected);
}

TEST(MetricRegistry, EscapesLabelValuesAndHelpAndRefusesBadNames) {
  MetricRegistry r;
  r.gauge("g", "a \"quoted\" \\ help\nline", {}, {{"run", "a\"b\\c\nd"}}).set(-INFINITY);
  const std::string text = r.openmetrics();
  EXPECT_NE(text.find("# HELP g a \\\"quoted\\\" \\\\ help\\nline\n"), std::string::npos) << text;
  EXPECT_NE(text.find("g{run=\"a\\\"b\\\\c\\nd\"} -Inf\n"), std::string::npos) << text;
  // Names are checked when a metric is made, not at a scrape.
  struct Bad {
    std::string name, unit, label;
  };
  for (const Bad& b : {Bad{"1steps", "", "rank"}, Bad{"step-time", "", "rank"},
                       Bad{"step_time", "seconds", "rank"}, Bad{"steps", "", "le"},
                       Bad{"steps", "", "ra:nk"}, Bad{"", "", "rank"}}) {
    MetricRegistry fresh;
    EXPECT_THROW(fresh.gauge(b.name, "", b.unit, {{b.label, "0"}}), std::invalid_argument)
        << b.name << " / " << b.unit << " / " << b.label;
  }
  // A family keeps its kind and bounds.
  r.histogram("h_seconds", "", "seconds", {1, 2});
  EXPECT_THROW(r.counter("h_seconds", ""), std::invalid_argument);
  EXPECT_THROW(r.histogram("h_seconds", "", "seconds", {1, 3}), std::invalid_argument);
  // The same labels give the same metric.
  Counter& a = r.counter("c", "", {{"rank", "1"}});
  EXPECT_EQ(&a, &r.counter("c", "", {{"rank", "1"}}));
  EXPECT_NE(&a, &r.counter("c", "", {{"rank", "2"}}));
}

TEST(MetricRegistry, WritesOneOtlpJsonMetricsRequestWithOpenTelemetrysNames) {
  MetricRegistry r;
  r.counter("lens_steps", "Steps.", {{"rank", "0"}}).add(3);
  r.gauge("lens_straggler_score", "Score.", {}, {{"rank", "0"}}).set(1.5);
  Histogram& h =
      r.histogram("lens_step_duration_seconds", "Step time.", "seconds", {0.1, 1}, {{"rank", "0"}});
  h.record(0.25, sampled_context(), 1'700'000'000'000'000'123);
  h.record(2);
  Resource resource;
  resource.attributes.push_back({"service.name", std::string("megatron-lm")});
  const nlohmann::json j = nlohmann::json::parse(r.otlp_json(resource, 100, 200));
  const auto& rm = j["resourceMetrics"][0];
  EXPECT_EQ(rm["resource"]["attributes"][0]["key"], "service.name");
  EXPECT_EQ(rm["scopeMetrics"][0]["scope"]["name"], "nemo.lens");
  const auto& metrics = rm["scopeMetrics"][0]["metrics"];
  ASSERT_EQ(metrics.size(), 3u);
  // The counter: a monotonic cumulative sum.
  EXPECT_EQ(metrics[0]["name"], "lens.steps");
  EXPECT_EQ(metrics[0]["sum"]["aggregationTemporality"], 2);
  EXPECT_EQ(metrics[0]["sum"]["isMonotonic"], true);
  const auto& c = metrics[0]["sum"]["dataPoints"][0];
  EXPECT_EQ(c["asDouble"], 3.0);
  EXPECT_EQ(c["startTimeUnixNano"], "100");
  EXPECT_EQ(c["timeUnixNano"], "200");
  EXPECT_EQ(c["attributes"][0]["key"], "rank");
  EXPECT_EQ(c["attributes"][0]["value"]["stringValue"], "0");
  EXPECT_EQ(metrics[1]["name"], "lens.straggler.score");
  EXPECT_EQ(metrics[1]["gauge"]["dataPoints"][0]["asDouble"], 1.5);
  // The histogram: per-bucket counts, its bounds, the exemplar.
  const auto& m = metrics[2];
  EXPECT_EQ(m["name"], "lens.step.duration");
  EXPECT_EQ(m["unit"], "s");
  EXPECT_EQ(m["description"], "Step time.");
  EXPECT_EQ(m["histogram"]["aggregationTemporality"], 2);
  const auto& p = m["histogram"]["dataPoints"][0];
  EXPECT_EQ(p["count"], "2");
  EXPECT_EQ(p["sum"], 2.25);
  EXPECT_EQ(p["bucketCounts"], nlohmann::json({"0", "1", "1"}));
  EXPECT_EQ(p["explicitBounds"], nlohmann::json({0.1, 1.0}));
  ASSERT_EQ(p["exemplars"].size(), 1u);
  EXPECT_EQ(p["exemplars"][0]["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(p["exemplars"][0]["spanId"], "00f067aa0ba902b7");
  EXPECT_EQ(p["exemplars"][0]["asDouble"], 0.25);
  EXPECT_EQ(p["exemplars"][0]["timeUnixNano"], "1700000000000000123");
}

// One request to the endpoint: what it answered (status line and body).
std::string ask(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "connect failed";
  }
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    answer.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return answer;
}

TEST(MetricsEndpoint, ServesTheTextAtMetricsAndAnswersEveryOtherRequestWithoutTrustingIt) {
  MetricRegistry r;
  r.counter("lens_steps", "Steps.").add(2);
  MetricsEndpoint endpoint(r, "127.0.0.1", 0);
  ASSERT_GT(endpoint.port(), 0);
  const std::string ok = ask(endpoint.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(ok.starts_with("HTTP/1.1 200 OK\r\n")) << ok;
  EXPECT_NE(ok.find("Content-Type: application/openmetrics-text; version=1.0.0"),
            std::string::npos);
  EXPECT_NE(ok.find("\r\n\r\n# TYPE lens_steps counter\n"), std::string::npos) << ok;
  EXPECT_TRUE(ok.ends_with("lens_steps_total 2\n# EOF\n")) << ok;
  struct Case {
    std::string request;
    const char* status;
  };
  const std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(10000, 'a') + "\r\n\r\n";
  for (const Case& c :
       {Case{"GET / HTTP/1.1\r\n\r\n", "404"}, Case{"POST /metrics HTTP/1.1\r\n\r\n", "405"},
        Case{"GET /metrics\r\n\r\n", "400"}, Case{"garbage\r\n\r\n", "400"},
        Case{"GET /metrics HTTP/1.1\0\r\n\r\n"s, "200"}, Case{huge, "431"}}) {
    const std::string answer = ask(endpoint.port(), c.request);
    EXPECT_TRUE(answer.starts_with(std::string("HTTP/1.1 ") + c.status)) << answer;
  }
  // A client that sends half a request and waits is cut off at the timeout,
  // and the endpoint goes on serving.
  const auto started = std::chrono::steady_clock::now();
  const std::string slow = ask(endpoint.port(), "GET /metr");
  EXPECT_TRUE(slow.starts_with("HTTP/1.1 408")) << slow;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  EXPECT_TRUE(
      ask(endpoint.port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
  const auto s = endpoint.stats();
  EXPECT_EQ(s.scrapes, 3u);
  EXPECT_EQ(s.rejected, 6u);
  endpoint.stop();
  EXPECT_EQ(ask(endpoint.port(), "GET /metrics HTTP/1.1\r\n\r\n"), "connect failed");
  // A port taken, or an address that is not one, says so.
  MetricsEndpoint first(r, "127.0.0.1", 0);
  EXPECT_THROW(MetricsEndpoint(r, "127.0.0.1", first.port()), std::runtime_error);
  EXPECT_THROW(MetricsEndpoint(r, "localhost", 0), std::runtime_error);
  EXPECT_THROW(MetricsEndpoint(r, "127.0.0.1", 70000), std::runtime_error);
}

}  // namespace
}  // namespace lens
