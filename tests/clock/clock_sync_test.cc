// The clock part: the exchange's arithmetic, the drift fit, and the
// exchange over the in-process engine with known offsets and drift injected
// into each rank's clock (every rank shares one real clock here). The
// in-process engine's point-to-point messages are tested here too.
#include "lens/clock_sync.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "lens/in_process_communicator.h"

namespace lens {
namespace {

using namespace std::chrono_literals;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(ClockExchange, OffsetAndRoundTripFollowTheFourTimestamps) {
  // The rank's clock is 5000 ns behind the reference; 300 ns out, 500 back.
  const ClockExchange e{1000, 1000 + 300 - 5000, 1000 + 350 - 5000, 1000 + 350 + 500};
  EXPECT_EQ(e.round_trip_ns(), 800);
  // Asymmetric paths bias the estimate by half their difference, within
  // half the round trip.
  EXPECT_EQ(e.offset_ns(), 5000 + (500 - 300) / 2);
  EXPECT_LE(std::abs(e.offset_ns() - 5000), e.round_trip_ns() / 2);
}

TEST(ClockExchange, BestSampleKeepsTheLowestRoundTrip) {
  // The rank's clock is 15 µs ahead of the reference's.
  const std::vector<ClockExchange> exchanges = {
      {0, 15'000 + 900, 15'000 + 950, 2000},          // round trip 1950
      {5000, 15'000 + 5100, 15'000 + 5150, 5250},     // round trip 200
      {9000, 15'000 + 9800, 15'000 + 9810, 10'500}};  // round trip 1490
  const ClockSample s = best_sample(exchanges, 2, 0);
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.exchanges, 3);
  EXPECT_EQ(s.round_trip_ns, 200);
  EXPECT_EQ(s.uncertainty_ns, 100);
  EXPECT_EQ(s.offset_ns, -15'000);
  EXPECT_EQ(s.local_time_ns, 15'000 + 5125);
  EXPECT_THROW(best_sample({}, 1, 0), std::invalid_argument);
}

TEST(ClockExchange, ExchangesAcrossAClockStepAreDiscarded) {
  // The rank's clock is 15 µs ahead; the first exchange's reference clock
  // stepped back while the ping was out (round trip below zero, and the one
  // the lowest round trip would prefer), the second's rank clock stepped
  // back between its stamps (t3 before t2).
  const std::vector<ClockExchange> exchanges = {
      {5000, 15'000 + 5100, 15'000 + 5150, 4000},
      {7000, 15'000 + 7100, 15'000 + 6000, 7400},
      {9000, 15'000 + 9100, 15'000 + 9150, 9450}};  // round trip 400: 100 out, 300 back
  EXPECT_FALSE(exchanges[0].consistent());
  EXPECT_FALSE(exchanges[1].consistent());
  const ClockSample s = best_sample(exchanges, 1, 0);
  EXPECT_EQ(s.exchanges, 3);
  EXPECT_EQ(s.discarded, 2);
  EXPECT_TRUE(s.measured());
  EXPECT_EQ(s.round_trip_ns, 400);
  EXPECT_EQ(s.offset_ns, -15'000 + (300 - 100) / 2);  // within half the round trip
  const std::vector<ClockExchange> stepped = {exchanges[0], exchanges[1]};
  const ClockSample none = best_sample(stepped, 1, 0);
  EXPECT_FALSE(none.measured()) << "no exchange left: no sample";
  EXPECT_EQ(none.discarded, 2);
}

TEST(ClockExchange, TheReferenceRankHasNoOffset) {
  const std::vector<ClockExchange> exchanges = {{100, 0, 0, 400}, {1000, 0, 0, 1100}};
  const ClockSample s = best_sample(exchanges, 0, 0);
  EXPECT_EQ(s.offset_ns, 0);
  EXPECT_EQ(s.uncertainty_ns, 0);
  EXPECT_EQ(s.round_trip_ns, 100);
  EXPECT_EQ(s.local_time_ns, 1050);
}

TEST(ClockDriftFit, RecoversALinearDriftAndWeighsByUncertainty) {
  ClockDriftFit fit;
  EXPECT_FALSE(fit.drift_ppm());
  auto sample = [](double seconds, double offset_us, double uncertainty_us) {
    ClockSample s;
    s.local_time_ns = 1'700'000'000'000'000'000 + static_cast<std::int64_t>(seconds * 1e9);
    s.offset_ns = static_cast<std::int64_t>(offset_us * 1e3);
    s.uncertainty_ns = static_cast<std::int64_t>(uncertainty_us * 1e3);
    return s;
  };
  fit.add(sample(0, 2000, 20));
  EXPECT_FALSE(fit.drift_ppm()) << "one sample says nothing about drift";
  // 40 ppm: 40 µs more offset per second.
  for (int i = 1; i <= 10; ++i) fit.add(sample(30.0 * i, 2000 + 40 * 30.0 * i, 20));
  ASSERT_TRUE(fit.drift_ppm());
  EXPECT_NEAR(*fit.drift_ppm(), 40.0, 0.01);
  // An outlier with a large uncertainty barely moves it.
  fit.add(sample(150, 2000 + 40 * 150 + 50'000, 5000));
  EXPECT_NEAR(*fit.drift_ppm(), 40.0, 0.5);
}

TEST(ClockDriftFit, SamplesTooCloseForTheirUncertaintyGiveNoDrift) {
  ClockDriftFit fit;
  ClockSample s;
  s.uncertainty_ns = 25'000;
  fit.add(s);
  s.local_time_ns = 5'000'000;  // 5 ms later: ±25 µs says nothing about ppm
  s.offset_ns = 3'000;
  fit.add(s);
  EXPECT_FALSE(fit.drift_ppm());
  s.local_time_ns = 60'000'000'000;  // a minute later it does
  s.offset_ns = 60 * 20 * 1000;      // 20 ppm: 20 µs per second
  fit.add(s);
  ASSERT_TRUE(fit.drift_ppm());
  EXPECT_NEAR(*fit.drift_ppm(), 20.0, 1.0);
}

TEST(ClockDriftFit, SamplesAtOneTimeGiveNoDrift) {
  ClockDriftFit fit;
  ClockSample s;
  s.local_time_ns = 5;
  fit.add(s);
  s.offset_ns = 1000;
  fit.add(s);
  EXPECT_FALSE(fit.drift_ppm());
}

// A rank's injected clock: the shared clock plus an offset and a drift.
struct InjectedClock {
  std::int64_t origin_ns;
  std::int64_t offset_ns;
  double drift_ppm;
  std::int64_t at(std::int64_t true_ns) const {
    return true_ns + offset_ns +
           static_cast<std::int64_t>(drift_ppm * 1e-6 * static_cast<double>(true_ns - origin_ns));
  }
};

struct Measured {
  ClockSample sample;
  std::array<std::uint8_t, kClockSyncSharedBytes> shared{};
};

std::vector<Measured> measure_on_threads(const std::vector<InjectedClock>& clocks,
                                         const ClockSyncOptions& options) {
  const int n = static_cast<int>(clocks.size());
  InProcessGroup group(n);
  std::vector<Measured> out(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      auto& m = out[static_cast<std::size_t>(r)];
      if (r == 0)
        for (std::size_t i = 0; i < m.shared.size(); ++i)
          m.shared[i] = static_cast<std::uint8_t>(i + 1);
      const InjectedClock& clock = clocks[static_cast<std::size_t>(r)];
      m.sample = measure_clock_offset(
          *comm, [&] { return clock.at(steady_ns()); }, m.shared, options);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The true reference-minus-local offset of rank r at its local time t.
std::int64_t true_offset(const std::vector<InjectedClock>& clocks, std::size_t r,
                         std::int64_t local_ns) {
  // Invert rank r's clock (drift is tiny: one fixed-point step is exact to
  // well under a nanosecond per second of run).
  const InjectedClock& c = clocks[r];
  std::int64_t true_ns = local_ns - c.offset_ns;
  true_ns = local_ns - (c.at(true_ns) - true_ns);
  return clocks[0].at(true_ns) - local_ns;
}

TEST(MeasureClockOffset, FindsInjectedOffsetsOnFourRanksWithinTheirUncertainty) {
  const std::int64_t origin = steady_ns();
  const std::vector<InjectedClock> clocks = {{origin, 1'500'000, 20},
                                             {origin, -4'200'000, -35},
                                             {origin, 7'000'000, 50},
                                             {origin, 250'000, 0}};
  const auto measured = measure_on_threads(clocks, {.exchanges = 8, .timeout = 10s});
  for (std::size_t r = 0; r < clocks.size(); ++r) {
    const ClockSample& s = measured[r].sample;
    EXPECT_EQ(s.rank, static_cast<int>(r));
    EXPECT_EQ(s.reference_rank, 0);
    EXPECT_EQ(s.exchanges, 8);
    if (r > 0) {
      EXPECT_GT(s.round_trip_ns, 0);
    }
    const std::int64_t truth = true_offset(clocks, r, s.local_time_ns);
    const std::int64_t bound = std::max<std::int64_t>(50'000, s.uncertainty_ns);
    EXPECT_LE(std::abs(s.offset_ns - truth), bound)
        << "rank " << r << ": measured " << s.offset_ns << " ns, injected " << truth
        << " ns, uncertainty " << s.uncertainty_ns << " ns";
    // Rank 0's shared bytes reach every rank.
    EXPECT_EQ(measured[r].shared, measured[0].shared);
  }
  EXPECT_EQ(measured[0].sample.offset_ns, 0);
  EXPECT_EQ(measured[0].sample.uncertainty_ns, 0);
  EXPECT_EQ(measured[1].shared[5], 6);
}

TEST(MeasureClockOffset, RejectsExchangeCountsOutOfRange) {
  InProcessGroup group(1);
  auto comm = group.communicator(0);
  std::array<std::uint8_t, kClockSyncSharedBytes> shared{};
  EXPECT_THROW(measure_clock_offset(*comm, steady_ns, shared, {.exchanges = 0}),
               std::invalid_argument);
  EXPECT_THROW(measure_clock_offset(*comm, steady_ns, shared, {.exchanges = 65}),
               std::invalid_argument);
  EXPECT_EQ(measure_clock_offset(*comm, steady_ns, shared, {.exchanges = 2}).offset_ns, 0);
}

TEST(MeasureClockOffset, AnAnswerThatIsNotTheExchangesFailsIt) {
  // Rank 1 answers rank 0's ping with bytes of the answer's size that are
  // not an answer.
  InProcessGroup group(2);
  std::string failure;
  std::thread other([&] {
    auto comm = group.communicator(1);
    std::vector<std::uint8_t> ping(8), answer(24, 0xee);
    comm->recv(ping, 0, kClockSyncTag, 5s);
    comm->send(answer, 0, kClockSyncTag, 5s);
  });
  auto comm = group.communicator(0);
  std::array<std::uint8_t, kClockSyncSharedBytes> shared{};
  try {
    measure_clock_offset(*comm, steady_ns, shared, {.exchanges = 3, .timeout = 5s});
  } catch (const CommError& e) {
    failure = e.what();
  }
  other.join();
  EXPECT_NE(failure.find("rank 1's answer in round 0 is not this exchange's"), std::string::npos)
      << failure;
}

TEST(MeasureClockOffset, ARankThatNeverAnswersTimesOut) {
  InProcessGroup group(2);
  auto comm = group.communicator(0);
  std::array<std::uint8_t, kClockSyncSharedBytes> shared{};
  EXPECT_THROW(measure_clock_offset(*comm, steady_ns, shared, {.exchanges = 2, .timeout = 50ms}),
               CommError);
}

}  // namespace
}  // namespace lens
