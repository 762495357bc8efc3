// A GPU-shaped run (device_drain.h): two stages whose computes run on the
// device after the host launched them, and p2p spans that synchronise the
// device before they transfer (Megatron's batch_p2p_sync), written as lens
// writes it twice: compute timed on the host (launch times) and on the
// device (with its host times kept). The host-timed one carries the
// warning; the device-timed one reads the device's critical path and
// counts no drain as a wait or a transfer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analyze.h"
#include "device_drain.h"

namespace lens::analysis {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kLaunchMs = 0.05, kTransferMs = 0.1;
constexpr double kForwardMs = 2, kBackwardMs = 4;
constexpr int kSteps = 3, kMicrobatches = 2;

enum class Op { kForward, kBackward, kSendForward, kSendBackward, kRecvForward, kRecvBackward };

struct Timed {
  Op op;
  int microbatch;
  double host_start, host_end;      // the host's span
  double device_start = 0, device_end = 0;  // a compute's work on the device
};

// One step of GPipe order on P = 2 from `t0`: per stage its ops with their
// host and device times. A compute's launch takes kLaunchMs of the host; the
// device runs it when the launch and the work before it are done; a send
// waits for the device, then transfers for kTransferMs; a receive ends when
// the data arrived (and the device is idle).
std::vector<std::vector<Timed>> simulate_step(double t0) {
  const std::vector<std::vector<std::pair<Op, int>>> order = {
      {{Op::kForward, 0}, {Op::kSendForward, 0}, {Op::kForward, 1}, {Op::kSendForward, 1},
       {Op::kRecvBackward, 0}, {Op::kBackward, 0}, {Op::kRecvBackward, 1}, {Op::kBackward, 1}},
      {{Op::kRecvForward, 0}, {Op::kForward, 0}, {Op::kRecvForward, 1}, {Op::kForward, 1},
       {Op::kBackward, 0}, {Op::kSendBackward, 0}, {Op::kBackward, 1}, {Op::kSendBackward, 1}}};
  std::vector<std::vector<Timed>> out(2);
  std::map<std::pair<bool, int>, double> arrived;  // (backward, microbatch) -> data at the peer
  std::vector<double> host(2, t0), device(2, t0);
  std::vector<std::size_t> next(2, 0);
  while (next[0] < order[0].size() || next[1] < order[1].size()) {
    bool progressed = false;
    for (int s = 0; s < 2; ++s) {
      while (next[s] < order[s].size()) {
        const auto [op, mb] = order[s][next[s]];
        Timed t{op, mb, host[s], host[s]};
        if (op == Op::kForward || op == Op::kBackward) {
          t.host_end = host[s] + kLaunchMs;
          t.device_start = std::max(t.host_end, device[s]);
          t.device_end = t.device_start + (op == Op::kForward ? kForwardMs : kBackwardMs);
          device[s] = t.device_end;
        } else if (op == Op::kSendForward || op == Op::kSendBackward) {
          t.host_end = std::max(host[s], device[s]) + kTransferMs;
          arrived[{op == Op::kSendBackward, mb}] = t.host_end;
        } else {
          const auto a = arrived.find({op == Op::kRecvBackward, mb});
          if (a == arrived.end()) break;  // the peer has not sent it yet
          t.host_end = std::max({host[s], device[s], a->second});
        }
        host[s] = t.host_end;
        out[s].push_back(t);
        ++next[s];
        progressed = true;
      }
    }
    if (!progressed) throw std::logic_error("the schedule deadlocks");
  }
  return out;
}

std::string hex(std::uint64_t v, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

json attr(const std::string& key, std::int64_t v) {
  return {{"key", key}, {"value", {{"intValue", std::to_string(v)}}}};
}

std::string ns(double ms) { return std::to_string(static_cast<std::int64_t>(1e9 + ms * 1e6)); }

// The run of kSteps steps in `dir`, compute timed on the device or on the
// host; each rank's resource says it had a GPU. Returns the device's step
// length (first compute start to last compute end) per step.
std::vector<double> write_run(const fs::path& dir, bool device_timed) {
  fs::create_directories(dir);
  std::vector<json> spans(2, json::array());
  std::vector<double> makespans;
  std::uint64_t id = 1;
  double t0 = 0;
  for (int step = 0; step < kSteps; ++step) {
    const auto stages = simulate_step(t0);
    double first = 1e18, last = 0, end = t0;
    for (int s = 0; s < 2; ++s)
      for (const Timed& t : stages[s]) {
        end = std::max({end, t.host_end, t.device_end});
        if (t.op == Op::kForward || t.op == Op::kBackward) {
          first = std::min(first, t.device_start);
          last = std::max(last, t.device_end);
        }
      }
    makespans.push_back(last - first);
    const std::string trace = hex(0xd00 + step, 32);
    for (int s = 0; s < 2; ++s) {
      const std::string step_id = hex(0x5000 + step * 10 + s, 16);
      const auto span = [&](const std::string& name, double a, double b, json attrs) {
        return json{{"traceId", trace},       {"spanId", hex(id++, 16)},
                    {"parentSpanId", step_id}, {"name", name},
                    {"kind", 1},               {"startTimeUnixNano", ns(a)},
                    {"endTimeUnixNano", ns(b)}, {"attributes", attrs}};
      };
      for (const Timed& t : stages[s]) {
        json attrs = json::array({attr("dl.microbatch_id", t.microbatch)});
        switch (t.op) {
          case Op::kForward:
          case Op::kBackward: {
            const std::string name = t.op == Op::kForward ? "megatron.microbatch.forward"
                                                          : "megatron.microbatch.backward";
            if (!device_timed) {
              spans[s].push_back(span(name, t.host_start, t.host_end, attrs));
              break;
            }
            attrs.push_back(attr("lens.host.start_unix_ns", std::stoll(ns(t.host_start))));
            attrs.push_back(attr("lens.host.end_unix_ns", std::stoll(ns(t.host_end))));
            spans[s].push_back(span(name, t.device_start, t.device_end, attrs));
            break;
          }
          default: {
            const bool send = t.op == Op::kSendForward || t.op == Op::kSendBackward;
            const bool backward = t.op == Op::kSendBackward || t.op == Op::kRecvBackward;
            const std::string name = std::string("megatron.p2p.") + (send ? "send_" : "recv_") +
                                     (backward ? "backward" : "forward");
            attrs.push_back(attr("dl.pipeline_parallel.peer_rank", 1 - s));
            attrs.push_back(attr(send ? "dl.microbatch_id.sent" : "dl.microbatch_id.received",
                                 t.microbatch));
            spans[s].push_back(span(name, t.host_start, t.host_end, attrs));
          }
        }
      }
      spans[s].push_back(span("megatron.forward_backward", t0, end, json::array()));
      json step_span = span("megatron.train_step", t0, end,
                            json::array({attr("dl.step", step), attr("dl.pipeline_parallel.rank", s),
                                         attr("dl.pipeline_parallel.size", 2),
                                         attr("dl.num_microbatches", kMicrobatches)}));
      step_span["spanId"] = step_id;
      step_span.erase("parentSpanId");
      spans[s].push_back(step_span);
    }
    t0 = end + 1;
  }
  for (int s = 0; s < 2; ++s) {
    const json resource = {
        {"attributes",
         json::array({attr("dl.rank", s), attr("dl.world_size", 2), attr("host.gpu.count", 8),
                      {{"key", "nemo.run.id"}, {"value", {{"stringValue", "gpu-run"}}}}})}};
    std::ofstream(dir / ("rank-" + std::to_string(s) + ".otlp.jsonl"))
        << json{{"resourceSpans", json::array({{{"resource", resource},
                                                {"scopeSpans",
                                                 json::array({{{"spans", spans[s]}}})}}})}}
               .dump()
        << "\n";
  }
  return makespans;
}

class DeviceDrain : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lens-device-drain-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

bool warns_host_timed(const std::vector<std::string>& warnings) {
  return std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
    return w.starts_with("compute timed on the host on GPUs: ranks 0-1 ran on GPUs");
  });
}

TEST_F(DeviceDrain, HostTimedComputeOnAGpuIsSaidAndDeviceTimedComputeGetsTheDevicesPath) {
  AnalyzeOptions options;
  options.raw_clock = true;
  std::vector<std::string> warnings;
  const std::vector<double> makespans = write_run(dir_ / "host", false);
  const Analysis host = analyze_run(dir_ / "host", options, &warnings);
  EXPECT_TRUE(warns_host_timed(warnings)) << ::testing::PrintToString(warnings);
  // On the host's clock the compute is its launches: 8 of 0.05 ms a step.
  for (const auto& st : host.stages_analysis) EXPECT_LT(st.compute_p50_ms, 0.5) << st.stage;

  warnings.clear();
  write_run(dir_ / "device", true);
  const Analysis device = analyze_run(dir_ / "device", options, &warnings);
  EXPECT_FALSE(warns_host_timed(warnings)) << ::testing::PrintToString(warnings);
  const double makespan = makespans[1];
  EXPECT_NEAR(device.critical_path_p50_ms, makespan, 0.05 * makespan);
  // Compute on the path: all but the transfers between the stages.
  EXPECT_GT(device.critical_compute_p50_ms, 0.95 * (makespan - 4 * kTransferMs));
  for (const auto& st : device.stages_analysis) {
    EXPECT_NEAR(st.compute_p50_ms, 2 * kForwardMs + 2 * kBackwardMs, 0.01) << st.stage;
    // Each send's drain (the device finishing the compute before it) is
    // the compute's: what is left of the p2p spans is their transfers (two
    // sends and two receives a step) and the waits for the other stage.
    EXPECT_LT(st.transfer_p50_ms, 4 * kTransferMs + 0.01) << st.stage;
    EXPECT_LT(st.late_receiver_p50_ms, 0.01) << st.stage;
  }
}

TEST(DeviceDrainSettle, AHostTimedP2pSpanStartsWhereTheDeviceFinishedTheComputeBeforeIt) {
  RankFile f;
  const auto row = [](const char* name, std::int64_t a, std::int64_t b, bool device) {
    SpanRow r;
    r.name = name;
    r.start_ns = a;
    r.end_ns = b;
    if (device) r.attributes.set("lens.host.start_unix_ns", std::to_string(a - 500), 'i');
    return r;
  };
  f.spans = {row("megatron.microbatch.forward", 1000, 3000, true),
             row("megatron.p2p.send_forward", 200, 3100, false),   // drained 200 -> 3000
             row("megatron.p2p.recv_backward", 3100, 9000, false),  // after it: as it was
             row("megatron.microbatch.backward", 9000, 13000, true),
             row("megatron.p2p.send_backward", 9100, 12000, false)};  // ends first: cut at its end
  ComputeClocks clocks;
  EXPECT_EQ(settle_device_drain(f, clocks), 2u);
  EXPECT_EQ(f.spans[1].start_ns, 3000);
  EXPECT_EQ(f.spans[2].start_ns, 3100);
  EXPECT_EQ(f.spans[4].start_ns, 12000);
  EXPECT_EQ(clocks.compute, 2u);
  EXPECT_EQ(clocks.device_timed, 2u);
}

}  // namespace
}  // namespace lens::analysis
