// Shared driver of the communication benchmarks: times, in one run and
// interleaved, (a) a raw broadcast of one carrier frame's bytes on the
// engine, (b) broadcast_trace_context, and (c) the original's two-collective
// pattern (an int64 length, then a ~200-byte JSON carrier), and prints
// medians and ratios from rank 0.
//
// Each timed operation starts right after a barrier, as a step's broadcast
// does after a step's worth of work: back-to-back broadcasts would let the
// root run ahead on eager sends and measure throughput, not the latency a
// step pays. A round's figure is the slowest rank's mean time per operation.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "lens/broadcast_trace_context.h"

namespace lens::bench {

struct Engine {
  std::string name;
  Communicator* comm;
  std::function<void(std::uint8_t*, std::size_t)> raw_broadcast;  // root 0
  std::function<void(std::int64_t*)> raw_broadcast_int64;          // root 0
  std::function<void()> barrier;
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A carrier as the Python original serialises it (json.dumps of the W3C
// headers plus the step), about 200 bytes.
inline std::string original_json_carrier() {
  return R"({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", )"
         R"("tracestate": "", "baggage": "", "step": 123456, "run_id": "20261201-070512-3fa2c1", )"
         R"("src_rank": 0})";
}

inline void run_comm_bench(Engine& e, int iterations, int rounds) {
  Communicator& comm = *e.comm;
  CarrierFrame raw{};
  std::optional<StepCarrier> local;
  if (comm.rank() == 0) {
    StepCarrier c;
    c.context.trace_id = IdGenerator::new_trace_id();
    c.context.span_id = IdGenerator::new_span_id();
    c.context.trace_flags = TraceFlags::kSampled;
    local = c;
  }
  const std::string json = original_json_carrier();
  std::vector<std::uint8_t> payload(json.begin(), json.end());

  auto time_per_op = [&](const std::function<void()>& op) {
    double total_us = 0;
    for (int i = 0; i < iterations; ++i) {
      e.barrier();
      const auto start = std::chrono::steady_clock::now();
      op();
      total_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                            start)
                      .count();
    }
    double mean = total_us / iterations;
    std::vector<std::uint8_t> all(sizeof(double) * static_cast<std::size_t>(comm.size()));
    comm.all_gather({reinterpret_cast<const std::uint8_t*>(&mean), sizeof mean}, all,
                    std::chrono::seconds(60));
    double slowest = 0;
    for (int r = 0; r < comm.size(); ++r) {
      double v;
      std::memcpy(&v, all.data() + sizeof(double) * static_cast<std::size_t>(r), sizeof v);
      slowest = std::max(slowest, v);
    }
    return slowest;
  };
  std::vector<double> t_raw, t_lens, t_original;
  auto raw_op = [&] { t_raw.push_back(time_per_op([&] { e.raw_broadcast(raw.data(), raw.size()); })); };
  auto lens_op = [&] {
    t_lens.push_back(time_per_op([&] {
      auto got = broadcast_trace_context(comm, 0, local, std::chrono::seconds(60));
      if (!got) std::abort();
    }));
  };
  auto original_op = [&] {
    t_original.push_back(time_per_op([&] {
      std::int64_t length = static_cast<std::int64_t>(payload.size());
      e.raw_broadcast_int64(&length);
      payload.resize(static_cast<std::size_t>(length));
      e.raw_broadcast(payload.data(), payload.size());
    }));
  };
  // Rotate the order each round so no pattern always runs first.
  for (int r = 0; r < rounds; ++r) {
    switch (r % 3) {
      case 0: raw_op(); lens_op(); original_op(); break;
      case 1: lens_op(); original_op(); raw_op(); break;
      default: original_op(); raw_op(); lens_op(); break;
    }
  }
  if (comm.rank() == 0) {
    const double raw_us = median(t_raw), lens_us = median(t_lens), orig_us = median(t_original);
    std::printf("%-10s ranks=%d  raw %zu-byte broadcast: %8.2f us   broadcast_trace_context: %8.2f us"
                "   original length+JSON: %8.2f us\n",
                e.name.c_str(), comm.size(), raw.size(), raw_us, lens_us, orig_us);
    std::printf("%-10s ranks=%d  ratio lens/raw = %.3f   ratio lens/original = %.3f"
                "   (medians of %d rounds x %d iterations; slowest rank)\n",
                e.name.c_str(), comm.size(), lens_us / raw_us, lens_us / orig_us, rounds,
                iterations);
  }
}

}  // namespace lens::bench
