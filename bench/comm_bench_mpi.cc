// broadcast_trace_context over MPI vs a raw MPI_Bcast of the same bytes and
// vs the original's two broadcasts. Run under mpirun (see run_comm_bench.sh).
#include <mpi.h>

#include <cstdlib>

#include "comm_bench.h"
#include "lens/mpi_communicator.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  const bool blocking = argc > 3 && std::string(argv[3]) == "blocking";
  lens::MpiCommunicator comm(MPI_COMM_WORLD, blocking ? lens::MpiCommunicator::Wait::kBlocking
                                                      : lens::MpiCommunicator::Wait::kPollWithTimeout);
  lens::bench::Engine e;
  e.name = blocking ? "mpi-block" : "mpi-poll";
  e.comm = &comm;
  e.raw_broadcast = [](std::uint8_t* p, std::size_t n) {
    MPI_Bcast(p, static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD);
  };
  e.raw_broadcast_int64 = [](std::int64_t* v) { MPI_Bcast(v, 1, MPI_INT64_T, 0, MPI_COMM_WORLD); };
  e.barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  lens::bench::run_comm_bench(e, iterations, rounds);
  MPI_Finalize();
  return 0;
}
