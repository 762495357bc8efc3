// measure_clock_offset and best_sample: the four-timestamp exchange over a
// broadcast and an all-gather (clock_sync.h).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "byte_order.h"
#include "lens/clock_sync.h"

namespace lens {
namespace {

// Rank 0's frame, little-endian:
//   0  4  magic "LNCK"     16  8  t4 of the previous round (0 in round 0)
//   4  4  round            24 32  the shared bytes
//   8  8  t1 (0 in the closing frame)
constexpr std::size_t kFrameBytes = 24 + kClockSyncSharedBytes;
// Every rank's answer in the all-gather: magic and round.
constexpr std::size_t kAnswerBytes = 8;
constexpr std::uint8_t kMagic[4] = {'L', 'N', 'C', 'K'};

void put_header(std::uint8_t* p, std::uint32_t round) {
  std::memcpy(p, kMagic, 4);
  detail::put_le32(p + 4, round);
}

bool header_is(const std::uint8_t* p, std::uint32_t round) {
  return std::memcmp(p, kMagic, 4) == 0 && detail::get_le32(p + 4) == round;
}

[[noreturn]] void out_of_step(const Communicator& comm, std::uint32_t round, const char* what) {
  throw CommError(comm.describe_failure(
      "clock sync", std::string(what) + " in round " + std::to_string(round) +
                        " is not this exchange's: the ranks did not call the same collective"));
}

}  // namespace

ClockSample best_sample(std::span<const ClockExchange> exchanges, int rank, int reference_rank) {
  if (exchanges.empty()) throw std::invalid_argument("best_sample: no exchange");
  const auto best = std::min_element(
      exchanges.begin(), exchanges.end(),
      [](const ClockExchange& a, const ClockExchange& b) { return a.round_trip_ns() < b.round_trip_ns(); });
  ClockSample s;
  s.rank = rank;
  s.reference_rank = reference_rank;
  s.exchanges = static_cast<int>(exchanges.size());
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
  const bool reference = comm.rank() == 0;
  std::vector<ClockExchange> exchanges(rounds);
  std::array<std::uint8_t, kFrameBytes> frame{};
  std::array<std::uint8_t, kAnswerBytes> answer{};
  std::vector<std::uint8_t> answers(kAnswerBytes * static_cast<std::size_t>(comm.size()));

  // Round `rounds` is the closing frame: it carries the last t4 only.
  for (std::uint32_t k = 0; k <= rounds; ++k) {
    if (reference) {
      put_header(frame.data(), k);
      detail::put_le64(frame.data() + 16,
                       static_cast<std::uint64_t>(k > 0 ? exchanges[k - 1].t4 : 0));
      std::memcpy(frame.data() + 24, shared.data(), shared.size());
      const std::int64_t t1 = k < rounds ? now() : 0;
      detail::put_le64(frame.data() + 8, static_cast<std::uint64_t>(t1));
      if (k < rounds) exchanges[k].t1 = t1;
      comm.broadcast(frame, 0, options.timeout);
    } else {
      comm.broadcast(frame, 0, options.timeout);
      const std::int64_t t2 = now();
      if (!header_is(frame.data(), k)) out_of_step(comm, k, "rank 0's frame");
      if (k > 0)
        exchanges[k - 1].t4 = static_cast<std::int64_t>(detail::get_le64(frame.data() + 16));
      if (k < rounds) {
        exchanges[k].t1 = static_cast<std::int64_t>(detail::get_le64(frame.data() + 8));
        exchanges[k].t2 = t2;
      }
    }
    if (k == rounds) break;
    put_header(answer.data(), k);
    if (!reference) exchanges[k].t3 = now();
    comm.all_gather(answer, answers, options.timeout);
    if (reference) exchanges[k].t4 = now();
    for (int r = 0; r < comm.size(); ++r)
      if (!header_is(answers.data() + static_cast<std::size_t>(r) * kAnswerBytes, k))
        out_of_step(comm, k, ("rank " + std::to_string(r) + "'s answer").c_str());
  }
  if (!reference) std::memcpy(shared.data(), frame.data() + 24, shared.size());
  return best_sample(exchanges, comm.rank(), 0);
}

}  // namespace lens
