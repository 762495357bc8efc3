// The step protocol over PyTorch c10d (ProcessGroupGloo on a TCPStore over
// 127.0.0.1). Without RANK in the environment it is the launcher: it runs
// the TCPStore server on a free port, starts WORLD ranks of itself, waits,
// and checks every rank's exported spans. With RANK set it is one rank.
//
//   lens_c10d_step_test OUT_DIR [world] [steps]
//
// Exit 0 when the invariants hold, 1 when not, 3 on a start-up configuration
// error (the message names the setting).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gloo_job.h"
#include "lens/c10d_communicator.h"
#include "lens/error.h"
#include "lens/startup_agreement.h"
#include "lens/step_trace.h"
#include "local_launcher.h"
#include "trace_files.h"

namespace {

constexpr int kMicrobatches = 2;

int expected_linked(int pp, int stage) {
  if (stage == 0) return 0;
  const int warmup = std::min(pp - stage - 1, kMicrobatches);
  return warmup + (kMicrobatches > warmup ? 1 : 0);
}

int run_rank(const std::string& out_dir, int steps) {
  const int rank = std::atoi(std::getenv("RANK"));
  const int world = std::atoi(std::getenv("WORLD_SIZE"));
  const std::string addr = std::getenv("MASTER_ADDR");
  const auto port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")));
  const std::chrono::milliseconds timeout(60000);
  auto store = lens::connect_tcp_store(addr, port, world, timeout);
  lens::C10dCommunicator comm(lens::make_gloo_process_group(store, rank, world, timeout, addr));

  std::unique_ptr<lens::Telemetry> telemetry;
  try {
    lens::TelemetryOptions opts;
    opts.trace_dir = out_dir;
    if (!std::getenv("MEGATRON_OTEL_SPAN_GROUPS")) opts.span_groups = "per_step";
    // A test hook: one rank configured differently from the others.
    if (const char* odd = std::getenv("LENS_TEST_MISMATCH_RANK"); odd && std::atoi(odd) == rank)
      opts.span_groups = "all";
    // A test hook: post each next step's broadcast early (c10d Work).
    opts.step_prefetch = std::getenv("LENS_TEST_PREFETCH") != nullptr;
    // A test hook: skewed clocks for the clock sync to find.
    if (std::getenv("LENS_TEST_CLOCK_SKEW") != nullptr) {
      const auto skew = lens::testing::test_clock_skew();
      opts.test_clock_offset_ns =
          static_cast<std::int64_t>(skew.offset_us[static_cast<std::size_t>(rank)] * 1e3);
      opts.test_clock_drift_ppm = skew.drift_ppm[static_cast<std::size_t>(rank)];
    }
    telemetry = lens::create_distributed_telemetry(comm, world, opts);
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 3;
  }
  lens::StepTraceOptions so;
  so.pipeline_parallel_size = world;
  lens::StepTrace trace(telemetry.get(), &comm, so);
  for (int step = 0; step < steps; ++step) {
    lens::StepScope scope(trace, static_cast<std::uint64_t>(step));
    for (int mb = 0; mb < expected_linked(world, rank); ++mb) {
      lens::Span link = trace.recv_forward_linked(mb);
    }
  }
  trace.finish();
  if (telemetry) {
    telemetry->shutdown(std::chrono::seconds(30));
    if (rank == 0) {
      std::ofstream(out_dir + "/last-run-id") << telemetry->config().run_id;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lens_c10d_step_test OUT_DIR [world] [steps]\n");
    return 2;
  }
  const std::string out_dir = argv[1];
  const int world = argc > 2 ? std::atoi(argv[2]) : 4;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 3;
  if (std::getenv("RANK") != nullptr) return run_rank(out_dir, steps);

  std::filesystem::create_directories(out_dir);
  lens::TcpStoreServer server;
  lens::LaunchOptions launch;
  launch.world_size = world;
  launch.argv = {std::filesystem::canonical("/proc/self/exe").string(), out_dir,
                 std::to_string(world), std::to_string(steps)};
  launch.master_port = server.port();
  launch.grace = std::chrono::seconds(20);
  lens::LaunchResult result = lens::launch_local_ranks(launch);
  if (result.exit_code != 0) {
    std::fprintf(stderr, "launcher: %s\n", result.message.c_str());
    return result.rank_status[static_cast<std::size_t>(result.first_failed_rank)] == 3 ? 3 : 1;
  }
  std::string run_id;
  std::ifstream(out_dir + "/last-run-id") >> run_id;
  auto spans = lens::testing::read_run(out_dir + "/" + run_id);
  lens::testing::CorrelationExpectation expect;
  expect.ranks = world;
  expect.steps = steps;
  expect.linked_per_step = [&](int stage) { return expected_linked(world, stage); };
  auto problems = lens::testing::check_correlation(spans, expect);
  if (std::getenv("LENS_TEST_CLOCK_SKEW") != nullptr)
    for (auto& p :
         lens::testing::check_clock_samples(spans, lens::testing::test_clock_skew(), world))
      problems.push_back(p);
  for (const auto& p : problems) std::fprintf(stderr, "violation: %s\n", p.c_str());
  std::printf("checked %zu spans from %d ranks over c10d/gloo, %d steps: %zu violations\n",
              spans.size(), world, steps, problems.size());
  return problems.empty() ? 0 : 1;
}
