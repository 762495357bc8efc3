// The in-process communicator (in_process_communicator.h): the engine the
// step protocol's unit tests run on, so it must behave as a real one does.
#include "lens/in_process_communicator.h"

#include <gtest/gtest.h>

#include <array>
#include <numeric>
#include <thread>
#include <vector>

namespace lens {
namespace {

using namespace std::chrono_literals;

TEST(InProcessCommunicator, BroadcastGivesEveryRankTheRootsBytes) {
  constexpr int kRanks = 4;
  InProcessGroup group(kRanks);
  std::vector<std::array<std::uint8_t, 8>> seen(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      EXPECT_EQ(comm->rank(), r);
      EXPECT_EQ(comm->size(), kRanks);
      auto& buffer = seen[static_cast<std::size_t>(r)];
      buffer.fill(static_cast<std::uint8_t>(r));
      comm->broadcast(buffer, 2, 5s);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& buffer : seen)
    for (std::uint8_t b : buffer) EXPECT_EQ(b, 2);
  EXPECT_EQ(group.collectives(), 1u);
}

TEST(InProcessCommunicator, AllGatherOrdersContributionsByRank) {
  constexpr int kRanks = 3;
  InProcessGroup group(kRanks);
  std::vector<std::vector<std::uint8_t>> outputs(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      const std::array<std::uint8_t, 2> mine{static_cast<std::uint8_t>(10 * r),
                                             static_cast<std::uint8_t>(10 * r + 1)};
      auto& out = outputs[static_cast<std::size_t>(r)];
      out.assign(2 * kRanks, 0xff);
      comm->all_gather(mine, out, 5s);
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<std::uint8_t> expected{0, 1, 10, 11, 20, 21};
  for (const auto& out : outputs) EXPECT_EQ(out, expected);
}

TEST(InProcessCommunicator, StartedBroadcastCarriesTheRootsBytesAfterWait) {
  InProcessGroup group(2);
  std::vector<std::uint8_t> received;
  std::thread other([&] {
    auto comm = group.communicator(1);
    const std::array<std::uint8_t, 3> junk{9, 9, 9};
    auto pending = comm->start_broadcast(junk, 0, 5s);
    pending->wait(5s);
    received.assign(pending->data().begin(), pending->data().end());
  });
  auto comm = group.communicator(0);
  const std::array<std::uint8_t, 3> mine{1, 2, 3};
  auto pending = comm->start_broadcast(mine, 0, 5s);
  pending->wait(5s);
  other.join();
  EXPECT_EQ(received, (std::vector<std::uint8_t>{1, 2, 3}));
  EXPECT_EQ(std::vector<std::uint8_t>(pending->data().begin(), pending->data().end()), received);
}

TEST(InProcessCommunicator, MismatchedCollectivesAndTimeoutsThrow) {
  InProcessGroup group(2);
  auto c0 = group.communicator(0);
  auto c1 = group.communicator(1);
  std::string e0, e1;
  std::thread t([&] {
    std::array<std::uint8_t, 4> b{};
    try {
      c1->broadcast(b, 1, 2s);
    } catch (const CommError& e) {
      e1 = e.what();
    }
  });
  std::array<std::uint8_t, 4> b{};
  try {
    c0->broadcast(b, 0, 2s);
  } catch (const CommError& e) {
    e0 = e.what();
  }
  t.join();
  EXPECT_NE(e0 + e1, "");
  EXPECT_NE((e0 + e1).find("different collectives"), std::string::npos) << e0 << e1;

  InProcessGroup lonely(2);
  auto only = lonely.communicator(0);
  std::array<std::uint8_t, 4> x{};
  try {
    only->broadcast(x, 0, 50ms);
    ADD_FAILURE() << "expected a timeout";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast failed on rank 0 of 2"), std::string::npos)
        << e.what();
  }
}

TEST(InProcessCommunicator, PointToPointKeepsOrderPerTagAndChecksPeerAndSize) {
  InProcessGroup group(3);
  auto c0 = group.communicator(0), c2 = group.communicator(2);
  const std::array<std::uint8_t, 2> a{1, 2}, b{3, 4}, other{9, 9};
  c0->send(a, 2, 7, 1s);
  c0->send(other, 2, 8, 1s);
  c0->send(b, 2, 7, 1s);
  std::array<std::uint8_t, 2> got{};
  c2->recv(got, 0, 7, 1s);
  EXPECT_EQ(got, a);
  c2->recv(got, 0, 7, 1s);
  EXPECT_EQ(got, b);
  c2->recv(got, 0, 8, 1s);
  EXPECT_EQ(got, other);
  EXPECT_THROW(c2->recv(got, 0, 7, 20ms), CommError);  // nothing left: times out
  EXPECT_THROW(c0->send(a, 0, 7, 1s), CommError);      // not another rank
  EXPECT_THROW(c0->send(a, 3, 7, 1s), CommError);
  std::array<std::uint8_t, 3> wrong{};
  c0->send(a, 2, 7, 1s);
  EXPECT_THROW(c2->recv(wrong, 0, 7, 1s), CommError);  // 2 bytes sent, 3 expected
}

}  // namespace
}  // namespace lens
