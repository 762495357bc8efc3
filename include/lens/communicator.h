/// \file
/// Communicator: the narrow interface lens needs from a job's collective
/// engine. lens never implements its own network collective; adapters wrap
/// the engines jobs already run (mpi_communicator.h, c10d_communicator.h)
/// and, for tests, threads of one process (in_process_communicator.h).
///
/// Every method but send and recv is a collective: all ranks of the group
/// call it, in the same order, with the same root and sizes. A collective that fails or does not
/// finish within its timeout throws CommError naming the collective, the
/// engine and the rank; the group should then be considered broken.
///
/// Thread safety: like the engines underneath, one collective at a time per
/// communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace lens {

class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& message) : std::runtime_error(message) {}
};

/// A broadcast that was started and may still be running (see
/// Communicator::start_broadcast). It owns its buffer, so abandoning it
/// (destroying it without a successful wait) never leaves an engine writing
/// into freed memory.
class PendingBroadcast {
 public:
  virtual ~PendingBroadcast() = default;
  /// Waits for the broadcast to finish; throws CommError on failure or when
  /// it does not finish within the timeout.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  /// The broadcast bytes (the root's, on every rank) once wait() returned.
  virtual std::span<const std::uint8_t> data() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "c10d/gloo", "in-process"...
  virtual std::string engine() const = 0;

  /// Broadcasts data from `root` to every rank, in place.
  virtual void broadcast(std::span<std::uint8_t> data, int root,
                         std::chrono::milliseconds timeout) = 0;

  /// Starts a broadcast of a copy of `data` from `root` and returns without
  /// waiting for it where the engine allows (c10d, MPI); other collectives
  /// on other groups may run meanwhile. The default runs broadcast() at once.
  virtual std::unique_ptr<PendingBroadcast> start_broadcast(std::span<const std::uint8_t> data,
                                                            int root,
                                                            std::chrono::milliseconds timeout);

  /// Every rank contributes input (same size everywhere); output receives
  /// size() * input.size() bytes, rank 0's first. An output of any other
  /// size throws CommError before the engine is called.
  void all_gather(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                  std::chrono::milliseconds timeout);

  /// Point-to-point, between this rank and `peer` only: send returns once
  /// the engine is done with `data`, recv once `data` holds what the peer
  /// sent with the same tag (and size). Messages between two ranks with one
  /// tag arrive in the order sent. For short exchanges (the clock sync);
  /// throws CommError on failure or timeout, leaving the caller's buffer
  /// alone afterwards.
  virtual void send(std::span<const std::uint8_t> data, int peer, int tag,
                    std::chrono::milliseconds timeout) = 0;
  virtual void recv(std::span<std::uint8_t> data, int peer, int tag,
                    std::chrono::milliseconds timeout) = 0;

  /// "lens: <what> failed on rank R of N (<engine>): <why>"
  std::string describe_failure(std::string_view what, std::string_view why) const;

 protected:
  /// The engine's all-gather; all_gather has checked the sizes.
  virtual void gather_from_all(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                               std::chrono::milliseconds timeout) = 0;
};

}  // namespace lens
