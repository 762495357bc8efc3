// A step's context: reserved on the source, derived anchor, the step span's
// context and the link to global rank 0 (step_context.h).
#include "lens/step_context.h"

#include <array>
#include <chrono>
#include <limits>

#include "lens/error.h"
#include "pipeline_counters.h"
#include "splitmix.h"

namespace lens {

namespace {

// A step context drawn from the run's shared key, its id, the step and a
// salt (0: the anchor): the same on every rank that has the same inputs.
// Two 64-bit states, each its own mix of every input, give the trace id's
// two halves, so two different inputs share a trace id only when both
// states collide: the birthday bound is about 2^64 derived ids, not the
// 2^32 of one 64-bit state (8,192 replicas x 500k steps is 2^32).
SpanContext derived_context(std::uint64_t run_key, std::string_view run_id, std::uint64_t step,
                            std::uint64_t salt) {
  std::uint64_t h1 = 0xcbf29ce484222325ULL;  // FNV-1a of the run id
  std::uint64_t h2 = 0x6a09e667f3bcc909ULL;  // and a second hash of it, mixed byte by byte
  for (unsigned char c : run_id) {
    h1 = (h1 ^ c) * 0x100000001b3ULL;
    h2 = detail::mix64(h2 ^ c);
  }
  std::uint64_t a = run_key ^ h1 ^ (step * 0xd1b54a32d192ed03ULL);
  std::uint64_t b =
      detail::mix64(run_key ^ 0x9e3779b97f4a7c15ULL) ^ h2 ^ (step * 0x8cb92ba72f3d8dd7ULL);
  if (salt != 0) {
    a ^= detail::mix64(salt);
    b ^= detail::mix64(salt ^ 0x5851f42d4c957f2dULL);
  }
  SpanContext c;
  do {
    std::array<std::uint8_t, TraceId::kSize> t{};
    const std::uint64_t hi = detail::splitmix64(a), lo = detail::splitmix64(b);
    for (int i = 0; i < 8; ++i) {
      t[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(hi >> (56 - 8 * i));
      t[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(lo >> (56 - 8 * i));
    }
    c.trace_id = TraceId(t);
    c.span_id = SpanId::from_word(detail::splitmix64(a) ^ detail::splitmix64(b));
  } while (!c.valid());
  return c;
}

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

SpanContext anchor_step_context(std::uint64_t run_key, std::string_view run_id,
                                std::uint64_t step) {
  return derived_context(run_key, run_id, step, 0);
}

StepCarrier derive_step_context(const Telemetry& telemetry, TraceScope scope, std::uint64_t step,
                                StepBudget& budget, std::optional<int> pipeline_source) {
  const Config& config = telemetry.config();
  const SpanContext anchor = anchor_step_context(config.run_key, config.run_id, step);
  StepCarrier derived;
  derived.step = step;
  derived.context = anchor;
  if (scope == TraceScope::kPipeline) {
    if (!pipeline_source || *pipeline_source < 0)
      throw ConfigError(
          "LENS_STEP_CONTEXT=derived in pipeline scope needs the global rank of the pipeline's "
          "first stage (" +
          (pipeline_source ? std::to_string(*pipeline_source) : std::string("none")) +
          " given): each pipeline's trace is derived from it");
    // Global rank + 1 above 2^32: never 0 (the anchor's) nor the job's.
    if (*pipeline_source != 0)
      derived.context =
          derived_context(config.run_key, config.run_id, step,
                          std::uint64_t{1} << 32 | (std::uint64_t(*pipeline_source) + 1));
  }
  const bool sampled =
      budget.decide(steady_now_ns(), telemetry.sampler().should_sample_root(anchor.trace_id));
  derived.context.trace_flags = sampled ? TraceFlags::kSampled : 0;
  detail::count(detail::pipeline_counters().derived_steps);
  return derived;
}

StepCarrier reserve_step_context(const Telemetry& telemetry, TraceScope scope, int global_rank,
                                 std::uint64_t step, StepBudget& budget) {
  // The source always reserves a valid context, even if it exports nothing
  // itself, so links on other ranks never silently vanish.
  StepCarrier reserved;
  reserved.step = step;
  reserved.context.trace_id = IdGenerator::new_trace_id();
  reserved.context.span_id = IdGenerator::new_span_id();
  TraceId decide_on = reserved.context.trace_id;
  if (scope == TraceScope::kPipeline) {
    const SpanContext anchor =
        anchor_step_context(telemetry.config().run_key, telemetry.config().run_id, step);
    decide_on = anchor.trace_id;
    if (global_rank == 0) reserved.context = anchor;
  }
  const bool sampled =
      budget.decide(steady_now_ns(), telemetry.sampler().should_sample_root(decide_on));
  reserved.context.trace_flags = sampled ? TraceFlags::kSampled : 0;
  return reserved;
}

SpanContext step_span_context(const StepCarrier& carrier, bool reserved_here) {
  SpanContext context = carrier.context;
  context.remote = false;
  if (!reserved_here) context.span_id = SpanId();
  return context;
}

std::optional<SpanLink> global_rank_zero_link(const Telemetry& telemetry,
                                              const StepCarrier& carrier) {
  SpanContext anchor =
      anchor_step_context(telemetry.config().run_key, telemetry.config().run_id, carrier.step);
  if (anchor.trace_id == carrier.context.trace_id) return std::nullopt;
  anchor.trace_flags = carrier.context.trace_flags;
  anchor.remote = true;
  return SpanLink{anchor, {{"lens.link", std::string("global_rank_0_step")}}};
}

SpanContext job_span_context(const Telemetry& telemetry) {
  // A salt no pipeline's takes: those are above 2^32.
  constexpr std::uint64_t kJobSalt = 0x6a6f62;  // "job"
  SpanContext job = derived_context(telemetry.config().run_key, telemetry.config().run_id,
                                    std::numeric_limits<std::uint64_t>::max(), kJobSalt);
  job.trace_flags = telemetry.sampler().should_sample_root(job.trace_id) ? TraceFlags::kSampled : 0;
  return job;
}

StartOptions job_span_start(const Telemetry& telemetry, int global_rank) {
  SpanContext job = job_span_context(telemetry);
  StartOptions start;
  start.root = true;
  start.context = job;
  if (global_rank != 0) {
    start.context->span_id = SpanId();
    job.remote = true;
    start.links.push_back({job, {{"lens.link", std::string("global_rank_0_job")}}});
  }
  return start;
}

bool step_budget_shared(const Config& config, TraceScope scope) {
  return config.step_context == StepContextMode::kDerived || scope == TraceScope::kPipeline;
}

std::uint32_t step_check_interval(const Config& config, TraceScope scope) {
  const bool derived = config.step_context == StepContextMode::kDerived;
  const bool spends = step_budget_shared(config, scope) && config.step_budget_per_minute > 0;
  if (spends && config.step_verify_steps == 0)
    throw ConfigError("LENS_STEP_BUDGET=" + std::to_string(config.step_budget_per_minute) +
                      " with " +
                      (derived ? "LENS_STEP_CONTEXT=derived" : "LENS_TRACE_SCOPE=pipeline") +
                      " needs LENS_STEP_VERIFY_STEPS above 0: the budget every rank spends "
                      "alike is renewed at each step check");
  return derived || spends ? config.step_verify_steps : 0;
}

void require_pipeline_scope_settings(const Config& config) {
  if (!config.run_key_agreed)
    throw ConfigError(
        "LENS_TRACE_SCOPE=pipeline needs the run key agreed at start-up: create the telemetry "
        "with create_distributed_telemetry (C++) or lens.distributed.init (Python)");
  if (!config.rank)
    throw ConfigError(
        "LENS_TRACE_SCOPE=pipeline needs this rank's global rank: set RANK (or "
        "TelemetryOptions::rank, or rank= in Python)");
}

}  // namespace lens
