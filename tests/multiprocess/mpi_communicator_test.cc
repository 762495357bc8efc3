// MpiCommunicator's collectives over real MPI: run with mpirun -np 3.
// Broadcasts from every root and with changing sizes (each change remakes
// the persistent request, on every rank at the same point), a prefetched
// MPI_Ibcast interleaved with persistent broadcasts, and all_gather; every
// rank checks what it received. Exit 0 when every check holds on every rank.
#include "lens/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

std::vector<std::uint8_t> payload(int root, std::size_t size, int round) {
  std::vector<std::uint8_t> v(size);
  for (std::size_t i = 0; i < size; ++i)
    v[i] = static_cast<std::uint8_t>(root * 31 + round * 7 + i);
  return v;
}

// `late_peer` (mpirun -np 2): rank 0's all_gather times out because rank 1
// joins 1 s late; MPI cannot cancel it, so it completes later, when rank 0
// next drives MPI. It must complete into lens's own buffers, never into the
// caller's output, which rank 0 still holds and checks.
int late_peer() {
  int failures = 0;
  {
    lens::MpiCommunicator comm(MPI_COMM_WORLD);
    std::vector<std::uint8_t> mine(8, static_cast<std::uint8_t>(0x10 + comm.rank()));
    std::vector<std::uint8_t> all(16, 0xAA);
    if (comm.rank() == 0) {
      bool timed_out = false;
      try {
        comm.all_gather(mine, all, std::chrono::milliseconds(200));
      } catch (const lens::CommError&) {
        timed_out = true;
      }
      if (!timed_out) {
        ++failures;
        std::fprintf(stderr, "rank 0: FAILED: no timeout\n");
      }
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      comm.all_gather(mine, all, std::chrono::milliseconds(30000));
    }
    MPI_Barrier(MPI_COMM_WORLD);  // drives MPI: the abandoned all-gather completes meanwhile
    if (comm.rank() == 0 && all != std::vector<std::uint8_t>(16, 0xAA)) {
      ++failures;
      std::fprintf(stderr,
                   "rank 0: FAILED: a timed-out all_gather wrote into the caller's buffer\n");
    }
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc > 1 && std::string(argv[1]) == "late_peer") return late_peer();
  int failures = 0;
  const auto expect = [&](bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  };
  {
    lens::MpiCommunicator comm(MPI_COMM_WORLD);
    const auto timeout = std::chrono::milliseconds(30000);
    int round = 0;
    for (std::size_t size : {256u, 17u, 256u, 1u}) {
      for (int root = 0; root < comm.size(); ++root) {
        for (int again = 0; again < 3; ++again, ++round) {
          const auto want = payload(root, size, round);
          std::vector<std::uint8_t> data =
              comm.rank() == root ? want : std::vector<std::uint8_t>(size, 0xee);
          comm.broadcast(data, root, timeout);
          expect(data == want, "broadcast of " + std::to_string(size) + " bytes from root " +
                                   std::to_string(root) + ", round " + std::to_string(round));
        }
      }
    }
    // A prefetched broadcast (MPI_Ibcast) in flight while persistent ones run.
    const auto early = payload(0, 256, 1000);
    auto pending = comm.start_broadcast(
        comm.rank() == 0 ? early : std::vector<std::uint8_t>(256, 0), 0, timeout);
    const auto later = payload(1, 256, 1001);
    std::vector<std::uint8_t> data = comm.rank() == 1 ? later : std::vector<std::uint8_t>(256, 0);
    comm.broadcast(data, 1, timeout);
    pending->wait(timeout);
    expect(std::vector<std::uint8_t>(pending->data().begin(), pending->data().end()) == early,
           "prefetched broadcast");
    expect(data == later, "broadcast while a prefetched one was in flight");

    std::vector<std::uint8_t> mine = {static_cast<std::uint8_t>(comm.rank()),
                                      static_cast<std::uint8_t>(comm.rank() * 2)};
    std::vector<std::uint8_t> all(2 * static_cast<std::size_t>(comm.size()));
    comm.all_gather(mine, all, timeout);
    for (int r = 0; r < comm.size(); ++r)
      expect(all[2 * r] == r && all[2 * r + 1] == 2 * r,
             "all_gather entry of rank " + std::to_string(r));
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
