// ClockSchedule: when the clocks are measured and the span each sample
// leaves (clock_schedule.h).
#include "lens/clock_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "byte_order.h"
#include "lens/ids.h"
#include "lens/semconv.h"

namespace lens {
namespace {

// Without a pace yet (at the first step), a sample every T seconds first
// comes this many steps later, to learn the steps' pace.
constexpr std::uint64_t kPaceSteps = 16;
constexpr std::uint64_t kNoStep = ~std::uint64_t{0};

// What global rank 0 sends with a sample (kClockSyncSharedBytes):
//   0 16  the trace id of this sample's spans
//  16  8  the step of the next sample (all ones: none)
//  24  8  the reference's global rank (its dl.rank), which every rank records
}  // namespace

ClockSchedule::ClockSchedule(Telemetry& telemetry, Communicator& world, Tracer tracer,
                             std::chrono::milliseconds timeout)
    : telemetry_(telemetry),
      world_(world),
      tracer_(tracer),
      every_steps_(telemetry.config().clock_sync_steps),
      every_seconds_(telemetry.config().clock_sync_seconds) {
  options_.exchanges = telemetry.config().clock_sync_exchanges;
  options_.timeout = timeout;
}

std::optional<std::uint64_t> ClockSchedule::choose_next(std::uint64_t step,
                                                        std::int64_t now_ns) const {
  std::optional<std::uint64_t> next;
  if (every_steps_ > 0) next = step + every_steps_;
  if (every_seconds_ > 0) {
    std::uint64_t steps = kPaceSteps;
    if (started_ && step > last_step_ && now_ns > last_time_ns_) {
      const double per_step =
          static_cast<double>(now_ns - last_time_ns_) / static_cast<double>(step - last_step_);
      steps = static_cast<std::uint64_t>(
          std::clamp(std::floor(every_seconds_ * 1e9 / per_step), 1.0, 1e12));
    }
    next = std::min(next.value_or(kNoStep), step + steps);
  }
  return next;
}

void ClockSchedule::sync(std::optional<std::uint64_t> step) {
  const bool reference = world_.rank() == 0;
  const std::int64_t start = telemetry_.now_unix_ns();
  std::array<std::uint8_t, kClockSyncSharedBytes> shared{};
  if (reference) {
    const TraceId trace = IdGenerator::new_trace_id();
    std::copy(trace.bytes().begin(), trace.bytes().end(), shared.begin());
    const auto next = step ? choose_next(*step, start) : std::nullopt;
    detail::put_le64(shared.data() + 16, next.value_or(kNoStep));
    detail::put_le64(shared.data() + 24,
                     static_cast<std::uint64_t>(telemetry_.config().rank.value_or(0)));
  }
  const ClockSample sample = measure_clock_offset(
      world_, [this] { return telemetry_.now_unix_ns(); }, shared, options_);
  const bool first = !started_;
  started_ = true;
  const std::uint64_t next = detail::get_le64(shared.data() + 16);
  next_step_ = next == kNoStep ? std::nullopt : std::optional<std::uint64_t>(next);
  if (step) {
    last_step_ = *step;
    last_time_ns_ = start;
  }
  if (sample.measured()) drift_.add(sample);
  const auto reference_rank = static_cast<std::int64_t>(detail::get_le64(shared.data() + 24));

  StartOptions so;
  SpanContext context;
  std::array<std::uint8_t, TraceId::kSize> trace{};
  std::copy(shared.begin(), shared.begin() + TraceId::kSize, trace.begin());
  context.trace_id = TraceId(trace);
  context.trace_flags = TraceFlags::kSampled;  // readers need every sample
  so.context = context;
  so.start_time_unix_ns = start;
  Span span = tracer_.start_lens_span(semconv::kClockSyncSpan, so);
  if (!span.recording()) return;
  const int global_rank = telemetry_.config().rank.value_or(world_.rank());
  span.set_attribute(semconv::kRank, std::int64_t{global_rank});
  if (step) span.set_attribute(semconv::kStep, static_cast<std::int64_t>(*step));
  span.set_attribute("lens.clock.reason", step ? (first ? "start" : "interval") : "finish");
  span.set_attribute("lens.clock.reference_rank", reference_rank);
  span.set_attribute("lens.clock.exchanges", std::int64_t{sample.exchanges});
  span.set_attribute("lens.clock.discarded", std::int64_t{sample.discarded});
  span.set_attribute("lens.clock.engine", std::string_view(world_.engine()));
  if (!sample.measured()) {
    // Every exchange crossed a clock step: the span says so and carries no
    // offset, so that readers take nothing from it.
    span.set_status(StatusCode::kError, "every exchange discarded: a clock stepped");
    return;
  }
  span.set_attribute("lens.clock.local_time_ns", sample.local_time_ns);
  span.set_attribute("lens.clock.offset_ns", sample.offset_ns);
  span.set_attribute("lens.clock.uncertainty_ns", sample.uncertainty_ns);
  span.set_attribute("lens.clock.round_trip_ns", sample.round_trip_ns);
  if (auto drift = drift_.drift_ppm()) span.set_attribute("lens.clock.drift_ppm", *drift);
}

}  // namespace lens
