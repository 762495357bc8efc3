// lens-example: traces a few nested spans of a toy training loop and writes
// them as OTLP JSON lines, then says where they are.
//
//   build/bin/lens-example [steps]
//
// Tracing is on here unless MEGATRON_OTEL_ENABLED says otherwise; groups
// default to per_step,microbatch for this example (MEGATRON_OTEL_SPAN_GROUPS overrides).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "lens/error.h"
#include "lens/telemetry.h"

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  if (steps <= 0 || steps > 100000) {
    std::fprintf(stderr, "usage: lens-example [steps]  (steps: 1..100000)\n");
    return 2;
  }
  lens::TelemetryOptions options;
  if (std::getenv("MEGATRON_OTEL_ENABLED") == nullptr) options.enabled = true;
  if (std::getenv("MEGATRON_OTEL_SPAN_GROUPS") == nullptr) options.span_groups = "per_step,microbatch";
  lens::Telemetry* telemetry = nullptr;
  try {
    telemetry = lens::init(options);
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "lens-example: %s\n", e.what());
    return 2;
  }
  if (telemetry == nullptr) {
    std::printf("telemetry is disabled (MEGATRON_OTEL_ENABLED=0); nothing traced\n");
    return 0;
  }
  lens::Tracer tracer = telemetry->tracer("lens.example");
  {
    lens::Span job = tracer.start_span(lens::SpanGroup::kJob, "megatron.job");
    lens::CurrentSpanScope job_scope(job);
    double loss = 2.0;
    for (int step = 0; step < steps; ++step) {
      lens::Span step_span = tracer.start_span(lens::SpanGroup::kStep, "megatron.train_step");
      lens::CurrentSpanScope step_scope(step_span);
      step_span.set_attribute("dl.step", step);
      for (int mb = 0; mb < 2; ++mb) {
        lens::Span fwd = tracer.start_span(lens::SpanGroup::kMicrobatch,
                                           "megatron.microbatch.forward");
        fwd.set_attribute("dl.microbatch_id", mb);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      {
        lens::Span opt = tracer.start_span(lens::SpanGroup::kOptimizer, "megatron.optimizer.step");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      loss *= 0.9;
      step_span.set_attribute("dl.loss", loss);
      step_span.add_event("step.done", {{"dl.loss", loss}});
    }
  }
  const std::string file = telemetry->trace_file();
  lens::shutdown_telemetry();
  std::printf("traced %d steps; spans written to %s\n", steps,
              file.empty() ? "(console)" : file.c_str());
  return 0;
}
