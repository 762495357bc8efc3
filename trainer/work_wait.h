// Waiting for a c10d work item (a p2p transfer, a TP collective) as the
// trainer's communication does: a timeout or a failure is reported through
// `on_failure` (the rank's failure record, while the spans around it are
// still open) and thrown, as "<what> after up to <timeout> ms: <why>".
// `describe` makes <what> only when something failed.
//
// Thread safety: as the work item's wait.
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace lens::train {

using FailureCallback = std::function<void(const std::string&)>;

template <typename Describe>
void wait_or_fail(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout,
                  Describe&& describe, const FailureCallback& on_failure) {
  try {
    if (!work->wait(timeout)) throw std::runtime_error("timed out");
  } catch (const std::exception& e) {
    const std::string what =
        describe() + " after up to " + std::to_string(timeout.count()) + " ms: " + e.what();
    if (on_failure) on_failure(what);
    throw std::runtime_error(what);
  }
}

}  // namespace lens::train
