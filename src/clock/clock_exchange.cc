// measure_clock_offset and best_sample: the four-timestamp exchange between
// rank 0 and each other rank, point to point (clock_sync.h).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "byte_order.h"
#include "lens/clock_sync.h"

namespace lens {
namespace {

// Rank 0's ping (magic, round), each rank's answer (magic, round, t2, t3),
// and rank 0's result for that rank (magic, exchanges, then the sample's
// offset, uncertainty, round trip, local time and discarded exchanges, then
// the shared bytes); all little-endian.
constexpr std::size_t kPingBytes = 8;
constexpr std::size_t kAnswerBytes = 24;
constexpr std::size_t kResultBytes = 48 + kClockSyncSharedBytes;
constexpr std::uint8_t kMagic[4] = {'L', 'N', 'C', 'K'};

void put_header(std::uint8_t* p, std::uint32_t round) {
  std::memcpy(p, kMagic, 4);
  detail::put_le32(p + 4, round);
}

bool header_is(const std::uint8_t* p, std::uint32_t round) {
  return std::memcmp(p, kMagic, 4) == 0 && detail::get_le32(p + 4) == round;
}

std::int64_t get_i64(const std::uint8_t* p) {
  return static_cast<std::int64_t>(detail::get_le64(p));
}
void put_i64(std::uint8_t* p, std::int64_t v) {
  detail::put_le64(p, static_cast<std::uint64_t>(v));
}

[[noreturn]] void out_of_step(const Communicator& comm, std::uint32_t round,
                              const std::string& what) {
  throw CommError(comm.describe_failure(
      "clock sync", what + " in round " + std::to_string(round) +
                        " is not this exchange's: the ranks did not run the same exchange"));
}

}  // namespace

ClockSample best_sample(std::span<const ClockExchange> exchanges, int rank, int reference_rank) {
  if (exchanges.empty()) throw std::invalid_argument("best_sample: no exchange");
  ClockSample s;
  s.rank = rank;
  s.reference_rank = reference_rank;
  s.exchanges = static_cast<int>(exchanges.size());
  const ClockExchange* best = nullptr;
  for (const auto& e : exchanges) {
    if (!e.consistent())
      ++s.discarded;
    else if (best == nullptr || e.round_trip_ns() < best->round_trip_ns())
      best = &e;
  }
  if (best == nullptr) {
    s.uncertainty_ns = -1;
    return s;
  }
  s.round_trip_ns = best->round_trip_ns();
  if (rank == reference_rank) {
    s.local_time_ns = best->t1 + (best->t4 - best->t1) / 2;
    return s;
  }
  s.local_time_ns = best->t2 + (best->t3 - best->t2) / 2;
  s.offset_ns = best->offset_ns();
  s.uncertainty_ns = (s.round_trip_ns + 1) / 2;
  return s;
}

ClockSample measure_clock_offset(Communicator& comm, const ClockReading& now,
                                 std::span<std::uint8_t, kClockSyncSharedBytes> shared,
                                 const ClockSyncOptions& options) {
  if (options.exchanges < 1 || options.exchanges > 64)
    throw std::invalid_argument("clock sync: " + std::to_string(options.exchanges) +
                                " exchanges; accepted: 1 to 64");
  const auto rounds = static_cast<std::uint32_t>(options.exchanges);
  const auto timeout = options.timeout;
  std::array<std::uint8_t, kPingBytes> ping{};
  std::array<std::uint8_t, kAnswerBytes> answer{};
  std::array<std::uint8_t, kResultBytes> result{};

  if (comm.rank() != 0) {
    for (std::uint32_t k = 0; k < rounds; ++k) {
      comm.recv(ping, 0, kClockSyncTag, timeout);
      const std::int64_t t2 = now();
      if (!header_is(ping.data(), k)) out_of_step(comm, k, "rank 0's ping");
      put_header(answer.data(), k);
      put_i64(answer.data() + 8, t2);
      put_i64(answer.data() + 16, now());
      comm.send(answer, 0, kClockSyncTag, timeout);
    }
    comm.recv(result, 0, kClockSyncTag, timeout);
    if (!header_is(result.data(), rounds)) out_of_step(comm, rounds, "rank 0's result");
    ClockSample s;
    s.rank = comm.rank();
    s.exchanges = static_cast<int>(rounds);
    s.offset_ns = get_i64(result.data() + 8);
    s.uncertainty_ns = get_i64(result.data() + 16);
    s.round_trip_ns = get_i64(result.data() + 24);
    s.local_time_ns = get_i64(result.data() + 32);
    s.discarded =
        static_cast<int>(std::clamp<std::int64_t>(get_i64(result.data() + 40), 0, rounds));
    std::memcpy(shared.data(), result.data() + 48, shared.size());
    return s;
  }

  // Rank 0: each other rank in turn, so that only two ranks take part in an
  // exchange and its round trip is one message each way.
  ClockSample mine;
  mine.exchanges = static_cast<int>(rounds);
  mine.local_time_ns = now();
  std::vector<ClockExchange> exchanges(rounds);
  for (int peer = 1; peer < comm.size(); ++peer) {
    for (std::uint32_t k = 0; k < rounds; ++k) {
      put_header(ping.data(), k);
      exchanges[k].t1 = now();
      comm.send(ping, peer, kClockSyncTag, timeout);
      comm.recv(answer, peer, kClockSyncTag, timeout);
      exchanges[k].t4 = now();
      if (!header_is(answer.data(), k))
        out_of_step(comm, k, "rank " + std::to_string(peer) + "'s answer");
      exchanges[k].t2 = get_i64(answer.data() + 8);
      exchanges[k].t3 = get_i64(answer.data() + 16);
    }
    const ClockSample s = best_sample(exchanges, peer, 0);
    put_header(result.data(), rounds);
    put_i64(result.data() + 8, s.offset_ns);
    put_i64(result.data() + 16, s.uncertainty_ns);
    put_i64(result.data() + 24, s.round_trip_ns);
    put_i64(result.data() + 32, s.local_time_ns);
    put_i64(result.data() + 40, s.discarded);
    std::memcpy(result.data() + 48, shared.data(), shared.size());
    comm.send(result, peer, kClockSyncTag, timeout);
  }
  return mine;
}

}  // namespace lens
