/// \file
/// ClockSchedule: when the ranks' clocks are measured, and the
/// lens.clock_sync span each sample leaves in the trace
/// (docs/clock-alignment.md). StepTrace runs one; loops that cannot use
/// StepTrace (the Python package) run their own.
///
/// A sample is a collective over the world communicator, so when one is due
/// must be decided alike on every rank: at the first step, at the end, and
/// in between at the step global rank 0 chose at the previous sample (every
/// N steps, or every T seconds turned into a step count from the steps'
/// pace so far; Config::clock_sync_steps, clock_sync_seconds) and sent with
/// it.
///
/// Thread safety: one thread (the training loop's).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "lens/clock_sync.h"
#include "lens/communicator.h"
#include "lens/telemetry.h"
#include "lens/tracer.h"

namespace lens {

class ClockSchedule {
 public:
  /// `world` spans every rank, global rank 0 its rank 0; both must outlive
  /// the schedule.
  ClockSchedule(Telemetry& telemetry, Communicator& world, Tracer tracer,
                std::chrono::milliseconds timeout);

  /// True when a sample is due before `step` (the first step always).
  bool due(std::uint64_t step) const { return !started_ || (next_step_ && step >= *next_step_); }
  /// Measures, records the lens.clock_sync span and learns the next step.
  /// A collective; throws CommError as measure_clock_offset does. `step` is
  /// the step about to start (none at the end).
  void sync(std::optional<std::uint64_t> step);

 private:
  std::optional<std::uint64_t> choose_next(std::uint64_t step, std::int64_t now_ns) const;

  Telemetry& telemetry_;
  Communicator& world_;
  Tracer tracer_;
  ClockSyncOptions options_;
  std::uint32_t every_steps_;
  std::uint32_t every_seconds_;
  bool started_ = false;
  std::optional<std::uint64_t> next_step_;
  ClockDriftFit drift_;
  // Global rank 0's pace: the step and time of the previous sample.
  std::uint64_t last_step_ = 0;
  std::int64_t last_time_ns_ = 0;
};

}  // namespace lens
