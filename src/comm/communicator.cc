#include "lens/communicator.h"

namespace lens {

std::string Communicator::describe_failure(std::string_view what, std::string_view why) const {
  return "lens: " + std::string(what) + " failed on rank " + std::to_string(rank()) + " of " +
         std::to_string(size()) + " (" + engine() + "): " + std::string(why);
}

void Communicator::all_gather(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                              std::chrono::milliseconds timeout) {
  if (output.size() != input.size() * static_cast<std::size_t>(size()))
    throw CommError(describe_failure("all_gather", "output size is not size() * input size"));
  gather_from_all(input, output, timeout);
}

namespace {

// A broadcast that already ran to completion when it was started.
class CompletedBroadcast : public PendingBroadcast {
 public:
  explicit CompletedBroadcast(std::vector<std::uint8_t> data) : data_(std::move(data)) {}
  void wait(std::chrono::milliseconds) override {}
  std::span<const std::uint8_t> data() const override { return data_; }

 private:
  std::vector<std::uint8_t> data_;
};

}  // namespace

std::unique_ptr<PendingBroadcast> Communicator::start_broadcast(std::span<const std::uint8_t> data,
                                                                int root,
                                                                std::chrono::milliseconds timeout) {
  std::vector<std::uint8_t> buffer(data.begin(), data.end());
  broadcast(buffer, root, timeout);
  return std::make_unique<CompletedBroadcast>(std::move(buffer));
}

}  // namespace lens
