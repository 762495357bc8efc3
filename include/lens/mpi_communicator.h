/// \file
/// MpiCommunicator: the Communicator interface over any MPI communicator
/// (MPI_COMM_WORLD or a pipeline-parallel sub-communicator the job made).
///
/// By default collectives use MPI's non-blocking forms (MPI_Ibcast,
/// MPI_Iallgather) and poll for completion, so that a peer that never arrives
/// yields CommError after the timeout instead of blocking forever. MPI cannot
/// cancel a started collective: after such an error the communicator is
/// unusable and the job should abort (MPI_Abort), which is what a hung MPI job
/// needs anyway. With Wait::kBlocking the plain blocking collectives are used
/// instead (about 1 us less per broadcast on shared memory, see
/// bench/README.md); the timeout is then not enforced and a missing peer
/// blocks until MPI or the job scheduler gives up.
///
/// Thread safety: one collective at a time; MPI must be initialised (any
/// thread level) before construction and finalised after destruction. The
/// MPI_Comm is borrowed, not freed.
#pragma once

#include <mpi.h>

#include "lens/communicator.h"

namespace lens {

class MpiCommunicator : public Communicator {
 public:
  enum class Wait { kPollWithTimeout, kBlocking };
  explicit MpiCommunicator(MPI_Comm comm, Wait wait = Wait::kPollWithTimeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return "mpi"; }

  void broadcast(std::span<std::uint8_t> data, int root,
                 std::chrono::milliseconds timeout) override;
  void all_gather(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                  std::chrono::milliseconds timeout) override;
  /// MPI_Ibcast into an owned buffer; wait() polls it (or MPI_Wait with
  /// Wait::kBlocking). An abandoned request's buffer is deliberately leaked:
  /// MPI may still write into it.
  std::unique_ptr<PendingBroadcast> start_broadcast(std::span<const std::uint8_t> data, int root,
                                                    std::chrono::milliseconds timeout) override;

  MPI_Comm comm() const { return comm_; }

  /// Waits for a request the way this communicator's Wait mode says.
  void wait(MPI_Request& request, std::string_view what, std::chrono::milliseconds timeout);

 private:

  MPI_Comm comm_;
  Wait wait_mode_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace lens
