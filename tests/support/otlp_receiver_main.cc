// lens-test-receiver: the tests' OTLP/HTTP receiver as a program, for runs
// that outlive a test process (the soak script). It answers a chosen share
// of requests with 503 (which exporters retry), decodes the rest, and on
// SIGTERM or SIGINT writes what it saw as JSON:
//   {"requests", "failed", "accepted_spans", "distinct_spans"}
//
//   lens-test-receiver --port-file F --stats F [--fail-ratio 0.2] [--seed 1]
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "otlp_receiver.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "lens-test-receiver: %s\n"
      "usage: lens-test-receiver --port-file FILE --stats FILE [--fail-ratio R] [--seed N]\n",
      why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string port_file, stats_file;
  double fail_ratio = 0.0;
  std::uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + a).c_str());
    const std::string v = argv[++i];
    char* end = nullptr;
    if (a == "--port-file") {
      port_file = v;
    } else if (a == "--stats") {
      stats_file = v;
    } else if (a == "--fail-ratio") {
      fail_ratio = std::strtod(v.c_str(), &end);
      if (*end != '\0' || !(fail_ratio >= 0.0 && fail_ratio < 1.0))
        usage("--fail-ratio must be a number in [0, 1)");
    } else if (a == "--seed") {
      seed = std::strtoull(v.c_str(), &end, 10);
      if (*end != '\0') usage("--seed must be an unsigned integer");
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (port_file.empty() || stats_file.empty()) usage("--port-file and --stats are required");

  std::atomic<std::uint64_t> failed{0};
  const auto threshold = static_cast<std::uint64_t>(fail_ratio * 1e6);
  lens::testing::OtlpReceiver receiver([&](int n) {
    if (mix(seed ^ static_cast<std::uint64_t>(n)) % 1000000 < threshold) {
      failed.fetch_add(1);
      return lens::testing::Reply{503, "", "", 0};
    }
    return lens::testing::Reply{};
  });
  if (receiver.port() <= 0) usage("cannot bind a port on 127.0.0.1");
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  receiver.start();
  {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << receiver.port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  while (!g_stop) ::usleep(50000);
  receiver.stop();

  std::set<std::string> ids;
  for (const auto& r : receiver.protobuf_requests())
    for (const auto& rs : r.resource_spans())
      for (const auto& ss : rs.scope_spans())
        for (const auto& s : ss.spans()) ids.insert(s.trace_id() + s.span_id());
  std::ofstream out(stats_file);
  out << "{\"requests\": " << receiver.requests() << ", \"failed\": " << failed.load()
      << ", \"accepted_spans\": " << receiver.accepted_spans()
      << ", \"distinct_spans\": " << ids.size() << "}\n";
  return out ? 0 : 1;
}
