// broadcast_trace_context over c10d/Gloo vs a raw ProcessGroupGloo broadcast
// of the same bytes and vs the original's two broadcasts. Launches its own
// ranks (a TCPStore on a free 127.0.0.1 port):
//   lens_comm_bench_c10d [ranks] [iterations] [rounds]
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "comm_bench.h"
#include "gloo_job.h"
#include "lens/c10d_communicator.h"
#include "local_launcher.h"

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 200;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 9;
  if (std::getenv("RANK") == nullptr) {
    lens::TcpStoreServer server;
    lens::LaunchOptions launch;
    launch.world_size = world;
    launch.argv = {std::filesystem::canonical("/proc/self/exe").string(), std::to_string(world),
                   std::to_string(iterations), std::to_string(rounds)};
    launch.master_port = server.port();
    auto result = lens::launch_local_ranks(launch);
    if (result.exit_code != 0) std::fprintf(stderr, "launcher: %s\n", result.message.c_str());
    return result.exit_code;
  }
  const int rank = std::atoi(std::getenv("RANK"));
  const auto port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")));
  const std::chrono::milliseconds timeout(60000);
  auto store = lens::connect_tcp_store("127.0.0.1", port, world, timeout);
  auto group = lens::make_gloo_process_group(store, rank, world, timeout);
  lens::C10dCommunicator comm(group);
  lens::bench::Engine e;
  e.name = "c10d/gloo";
  e.comm = &comm;
  e.raw_broadcast = [&](std::uint8_t* p, std::size_t n) {
    std::vector<at::Tensor> t{torch::from_blob(p, {static_cast<std::int64_t>(n)}, torch::kUInt8)};
    group->broadcast(t)->wait();
  };
  e.raw_broadcast_int64 = [&](std::int64_t* v) {
    std::vector<at::Tensor> t{torch::from_blob(v, {1}, torch::kInt64)};
    group->broadcast(t)->wait();
  };
  e.barrier = [&] { group->barrier()->wait(); };
  lens::bench::run_comm_bench(e, iterations, rounds);
  return 0;
}
