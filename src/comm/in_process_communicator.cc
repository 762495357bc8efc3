#include "lens/in_process_communicator.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace lens {

// One rendezvous at a time: ranks arrive (the first one fixes what the
// collective is), the last arrival completes it, then ranks leave; the next
// collective starts only when all have left.
struct InProcessGroup::Shared {
  explicit Shared(int n) : size(n), contributions(static_cast<std::size_t>(n)) {}

  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int left = 0;
  bool complete = false;
  bool failed = false;
  std::string failure;
  // What the current collective is: kind, root, byte count.
  std::string kind;
  int root = -1;
  std::size_t bytes = 0;
  std::vector<std::vector<std::uint8_t>> contributions;
  std::uint64_t completed = 0;
  // Point-to-point messages in flight, by (from, to, tag), oldest first.
  std::map<std::tuple<int, int, int>, std::deque<std::vector<std::uint8_t>>> mailboxes;
};

namespace {

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup::Shared> shared, int rank)
      : shared_(std::move(shared)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }
  std::string engine() const override { return "in-process"; }

  void broadcast(std::span<std::uint8_t> data, int root,
                 std::chrono::milliseconds timeout) override {
    if (root < 0 || root >= size()) throw CommError(describe_failure("broadcast", "bad root"));
    rendezvous("broadcast", root, data.size(), {data.data(), data.size()}, timeout,
               [&](auto& contributions) {
                 if (rank_ != root)
                   std::memcpy(data.data(), contributions[static_cast<std::size_t>(root)].data(),
                               data.size());
               });
  }

 protected:
  void gather_from_all(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                       std::chrono::milliseconds timeout) override {
    rendezvous("all_gather", -1, input.size(), input, timeout, [&](auto& contributions) {
      for (std::size_t r = 0; r < contributions.size(); ++r)
        std::memcpy(output.data() + r * input.size(), contributions[r].data(), input.size());
    });
  }

  void send(std::span<const std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds) override {
    check_peer("send", peer);
    auto& s = *shared_;
    std::lock_guard<std::mutex> lock(s.mu);
    s.mailboxes[{rank_, peer, tag}].emplace_back(data.begin(), data.end());
    s.cv.notify_all();
  }

  void recv(std::span<std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override {
    check_peer("recv", peer);
    auto& s = *shared_;
    std::unique_lock<std::mutex> lock(s.mu);
    auto& box = s.mailboxes[{peer, rank_, tag}];
    if (!s.cv.wait_for(lock, timeout, [&] { return !box.empty() || s.failed; }) || s.failed)
      throw CommError(describe_failure("recv", s.failed ? s.failure : "timed out"));
    std::vector<std::uint8_t> message = std::move(box.front());
    box.pop_front();
    if (message.size() != data.size())
      throw CommError(describe_failure("recv", std::to_string(message.size()) + " bytes sent, " +
                                                   std::to_string(data.size()) + " expected"));
    std::memcpy(data.data(), message.data(), data.size());
  }

 private:
  void check_peer(const char* what, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw CommError(
          describe_failure(what, "peer " + std::to_string(peer) + " is not another rank"));
  }

  template <typename Deliver>
  void rendezvous(const char* kind, int root, std::size_t bytes,
                  std::span<const std::uint8_t> contribution, std::chrono::milliseconds timeout,
                  Deliver deliver) {
    auto& s = *shared_;
    std::unique_lock<std::mutex> lock(s.mu);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // Wait for the previous collective to drain.
    if (!s.cv.wait_until(lock, deadline, [&] { return s.left == 0 && !s.complete; }) || s.failed) {
      throw CommError(describe_failure(kind, s.failed ? s.failure : "timed out"));
    }
    if (s.arrived == 0) {
      s.kind = kind;
      s.root = root;
      s.bytes = bytes;
    } else if (s.kind != kind || s.root != root || s.bytes != bytes) {
      s.failed = true;
      s.failure = "ranks called different collectives (" + s.kind + " root " +
                  std::to_string(s.root) + ", " + std::to_string(s.bytes) + " bytes vs " + kind +
                  " root " + std::to_string(root) + ", " + std::to_string(bytes) + " bytes)";
      s.cv.notify_all();
      throw CommError(describe_failure(kind, s.failure));
    }
    s.contributions[static_cast<std::size_t>(rank_)].assign(contribution.begin(),
                                                            contribution.end());
    if (++s.arrived == s.size) {
      s.complete = true;
      s.cv.notify_all();
    } else if (!s.cv.wait_until(lock, deadline, [&] { return s.complete || s.failed; }) ||
               s.failed) {
      if (!s.failed) {
        s.failed = true;
        s.failure = "rank " + std::to_string(rank_) + " timed out waiting for the others";
        s.cv.notify_all();
      }
      throw CommError(describe_failure(kind, s.failure));
    }
    deliver(s.contributions);
    if (++s.left == s.size) {
      s.arrived = 0;
      s.left = 0;
      s.complete = false;
      ++s.completed;
      s.cv.notify_all();
    }
  }

  std::shared_ptr<InProcessGroup::Shared> shared_;
  int rank_;
};

}  // namespace

InProcessGroup::InProcessGroup(int size) : shared_(std::make_shared<Shared>(size)) {
  if (size < 1) throw CommError("lens: in-process group size must be at least 1");
}
InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return shared_->size; }

std::unique_ptr<Communicator> InProcessGroup::communicator(int rank) {
  if (rank < 0 || rank >= shared_->size)
    throw CommError("lens: in-process rank " + std::to_string(rank) + " out of range");
  return std::make_unique<InProcessCommunicator>(shared_, rank);
}

std::uint64_t InProcessGroup::collectives() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->completed;
}

}  // namespace lens
