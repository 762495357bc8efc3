/// \file
/// InProcessGroup: a communicator group whose ranks are threads of one
/// process, for unit tests of the step protocol. Not a transport for real
/// jobs.
///
/// Each collective is a rendezvous of all ranks; a rank that calls a
/// different collective (or root, or size) than the others gets CommError,
/// and so does a rank that waits longer than the timeout.
///
/// Thread safety: each rank's Communicator is used by one thread; the group
/// must outlive its communicators.
#pragma once

#include <memory>

#include "lens/communicator.h"

namespace lens {

class InProcessGroup {
 public:
  explicit InProcessGroup(int size);
  ~InProcessGroup();

  int size() const;
  /// The communicator for one rank; call once per rank.
  std::unique_ptr<Communicator> communicator(int rank);

  /// Collectives completed so far (every rank's call counted once).
  std::uint64_t collectives() const;

  struct Shared;  ///< the rendezvous state, shared with the rank communicators

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace lens
