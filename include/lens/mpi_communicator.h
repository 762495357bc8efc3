/// \file
/// MpiCommunicator: the Communicator interface over any MPI communicator
/// (MPI_COMM_WORLD or a pipeline-parallel sub-communicator the job made).
///
/// By default collectives use MPI's non-blocking forms (MPI_Iallgather, and
/// for broadcast a persistent request made once per root and size with MPI
/// 4's MPI_Bcast_init, or Open MPI 4's MPIX_Bcast_init, then started each
/// time; MPI_Ibcast where neither exists) and poll for completion, so that a
/// peer that never arrives yields CommError after the timeout instead of
/// blocking forever. The persistent request saves the schedule set-up an
/// MPI_Ibcast pays on every call (~0.1 us of a ~1 us shared-memory
/// broadcast). Making it is collective: every rank makes it at its first
/// broadcast with that root and size, which is the same point in their
/// sequence of collectives. MPI cannot
/// cancel a started collective: after such an error the communicator is
/// unusable and the job should abort (MPI_Abort), which is what a hung MPI job
/// needs anyway. With Wait::kBlocking the plain blocking collectives are used
/// instead (about 1 us less per broadcast on shared memory, see
/// bench/README.md), and a started broadcast is waited for with MPI_Wait;
/// the timeout is then not enforced and a missing peer blocks until MPI or
/// the job scheduler gives up. The engine only ever writes into buffers
/// lens owns: a collective that timed out keeps its buffer (leaked on
/// purpose) instead of writing into the caller's after it unwound.
///
/// Thread safety: one collective at a time; MPI must be initialised (any
/// thread level) before construction and finalised after destruction. The
/// MPI_Comm is borrowed, not freed.
#pragma once

#include <mpi.h>

#include <vector>

#include "lens/communicator.h"

namespace lens {

class MpiCommunicator : public Communicator {
 public:
  enum class Wait { kPollWithTimeout, kBlocking };
  explicit MpiCommunicator(MPI_Comm comm, Wait wait = Wait::kPollWithTimeout);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return "mpi"; }

  /// MPI_Isend / MPI_Irecv on the communicator itself, with the caller's
  /// tag: choose one the application's own messages on it do not use.
  void send(std::span<const std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override;
  void recv(std::span<std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override;
  void broadcast(std::span<std::uint8_t> data, int root,
                 std::chrono::milliseconds timeout) override;
  /// MPI_Ibcast into an owned buffer; wait() polls it (or MPI_Wait with
  /// Wait::kBlocking). An abandoned request's buffer is deliberately leaked:
  /// MPI may still write into it.
  std::unique_ptr<PendingBroadcast> start_broadcast(std::span<const std::uint8_t> data, int root,
                                                    std::chrono::milliseconds timeout) override;

  MPI_Comm comm() const { return comm_; }

  /// Waits for a request the way this communicator's Wait mode says.
  void wait(MPI_Request& request, std::string_view what, std::chrono::milliseconds timeout);

 protected:
  void gather_from_all(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                       std::chrono::milliseconds timeout) override;

 private:
  // The persistent broadcast request and the buffer it is bound to.
  struct PersistentBroadcast {
    int root = -1;
    std::vector<std::uint8_t> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  /// Polls a broadcast through the persistent request; false when this MPI
  /// has no persistent collectives.
  bool persistent_broadcast(std::span<std::uint8_t> data, int root,
                            std::chrono::milliseconds timeout);

  MPI_Comm comm_;
  Wait wait_mode_;
  PersistentBroadcast persistent_;
  bool persistent_stuck_ = false;  // a started broadcast timed out: never free it
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace lens
