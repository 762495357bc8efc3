// The step check of derived step contexts (step_check.h).
#include "lens/step_check.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "byte_order.h"
#include "pipeline_counters.h"
#include "rank_list.h"

namespace lens {
namespace {

using detail::rank_list;

// One rank's record, little-endian:
//    0  4  magic "LNSC"      16  4  pipeline (-1: none)
//    4  2  version (2)       20  4  0
//    6  1  sampled           24 16  trace id
//    7  1  0                 40  8  budget rate
//    8  8  step
constexpr std::uint8_t kMagic[4] = {'L', 'N', 'S', 'C'};
constexpr std::uint16_t kRecordVersion = 2;

[[noreturn]] void fail(int my_rank, const std::string& what) {
  throw StepCheckError("lens: step check failed on rank " + std::to_string(my_rank) + ": " + what);
}

}  // namespace

std::array<std::uint8_t, kStepCheckRecordBytes> encode_step_check(const StepCheckRecord& record) {
  std::array<std::uint8_t, kStepCheckRecordBytes> r{};
  std::memcpy(r.data(), kMagic, 4);
  detail::put_le16(r.data() + 4, kRecordVersion);
  r[6] = record.sampled ? 1 : 0;
  detail::put_le64(r.data() + 8, record.step);
  detail::put_le32(r.data() + 16, static_cast<std::uint32_t>(record.pipeline));
  std::memcpy(r.data() + 24, record.trace_id.bytes().data(), TraceId::kSize);
  detail::put_le64(r.data() + 40, record.budget_rate);
  return r;
}

std::vector<StepCheckRecord> compare_step_checks(int my_rank,
                                                 std::span<const std::uint8_t> records) {
  if (records.empty() || records.size() % kStepCheckRecordBytes != 0)
    fail(my_rank, std::to_string(records.size()) + " bytes of step check records; accepted: a " +
                      "whole number of " + std::to_string(kStepCheckRecordBytes) + "-byte records");
  std::vector<StepCheckRecord> out;
  std::vector<int> foreign;
  for (std::size_t at = 0; at < records.size(); at += kStepCheckRecordBytes) {
    const std::uint8_t* r = records.data() + at;
    const int rank = static_cast<int>(at / kStepCheckRecordBytes);
    if (std::memcmp(r, kMagic, 4) != 0 || detail::get_le16(r + 4) != kRecordVersion) {
      foreign.push_back(rank);
      out.emplace_back();
      continue;
    }
    StepCheckRecord rec;
    rec.sampled = r[6] != 0;
    rec.step = detail::get_le64(r + 8);
    rec.pipeline = static_cast<int>(detail::get_le32(r + 16));
    std::array<std::uint8_t, TraceId::kSize> id{};
    std::memcpy(id.data(), r + 24, TraceId::kSize);
    rec.trace_id = TraceId(id);
    rec.budget_rate = detail::get_le64(r + 40);
    out.push_back(rec);
  }
  if (!foreign.empty())
    fail(my_rank, "rank(s) " + rank_list(foreign) +
                      " sent something that is not a lens step check record (another version of "
                      "lens, or the ranks' collectives are out of order)");
  // Step numbers: every rank at the same step, or every group named.
  std::map<std::uint64_t, std::vector<int>> by_step;
  for (std::size_t r = 0; r < out.size(); ++r) by_step[out[r].step].push_back(static_cast<int>(r));
  if (by_step.size() > 1) {
    std::string groups;
    for (const auto& [step, ranks] : by_step)
      groups += (groups.empty() ? "" : "; ") + std::string("rank(s) ") + rank_list(ranks) +
                " at step " + std::to_string(step);
    fail(my_rank, "the ranks are not at the same step: " + groups +
                      ". LENS_STEP_CONTEXT=derived derives each step's trace from the step "
                      "number: every rank must pass the same one to StepScope");
  }
  // One pipeline, one trace; one sampling decision for the whole job (it is
  // taken on global rank 0's trace id). A record without a trace (the
  // `broadcast` mode's, which only shares the step budget) is not compared.
  std::map<int, std::size_t> first_of;  // pipeline -> its first record
  std::optional<std::size_t> first_decided;
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (!out[r].trace_id.valid()) continue;
    auto describe = [&](std::size_t i) {
      return "rank " + std::to_string(i) + " (trace " + out[i].trace_id.to_hex() + ", sampled " +
             (out[i].sampled ? "1" : "0") + ")";
    };
    if (!first_decided) first_decided = r;
    if (out[*first_decided].sampled != out[r].sampled)
      fail(my_rank, "the ranks decided step " + std::to_string(out[r].step) +
                        "'s sampling differently: " + describe(*first_decided) + " vs " +
                        describe(r) + "; their sampler or step budget differ");
    const auto [it, fresh] = first_of.try_emplace(out[r].pipeline, r);
    if (!fresh && out[it->second].trace_id != out[r].trace_id)
      fail(my_rank, "two ranks of one pipeline derived different traces for step " +
                        std::to_string(out[r].step) + ": " + describe(it->second) + " vs " +
                        describe(r) + "; their run key or run id differ");
  }
  return out;
}

StepCheckRecord StepCheckSchedule::record(std::uint64_t step,
                                          const std::optional<StepCarrier>& derived,
                                          std::optional<int> pipeline, int check_rank,
                                          const StepBudget& budget, std::int64_t now_ns) {
  StepCheckRecord mine;
  mine.step = step;
  if (derived) {
    mine.trace_id = derived->context.trace_id;
    mine.sampled = derived->context.sampled();
  }
  if (pipeline) mine.pipeline = *pipeline;
  if (check_rank == 0 && window_start_ns_ >= 0)
    mine.budget_rate = StepBudget::rate_for(budget.per_minute(), opened_ - window_start_,
                                            now_ns - window_start_ns_);
  window_start_ns_ = now_ns;
  window_start_ = opened_;
  return mine;
}

void StepCheckSchedule::accept(const std::vector<StepCheckRecord>& all, StepBudget& budget) {
  detail::count(detail::pipeline_counters().step_checks);
  if (!all.empty() && all.front().budget_rate != 0) budget.set_shared_rate(all.front().budget_rate);
}

std::vector<StepCheckRecord> run_step_check(Communicator& comm, const StepCheckRecord& mine,
                                            std::chrono::milliseconds timeout) {
  const auto record = encode_step_check(mine);
  std::vector<std::uint8_t> all(kStepCheckRecordBytes * static_cast<std::size_t>(comm.size()));
  comm.all_gather(record, all, timeout);
  return compare_step_checks(comm.rank(), all);
}

void StepCheckSchedule::check(Communicator& comm, std::uint64_t step,
                              const std::optional<StepCarrier>& derived,
                              std::optional<int> pipeline, StepBudget& budget,
                              std::chrono::milliseconds timeout) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  const StepCheckRecord mine = record(step, derived, pipeline, comm.rank(), budget, now);
  accept(run_step_check(comm, mine, timeout), budget);
}

}  // namespace lens
