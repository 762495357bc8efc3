// lens-mpi-pipeline: the smallest complete pipeline-parallel program traced
// with lens, over MPI. Every rank is a stage; each step pushes M microbatch
// "activations" (a few floats) from stage to stage with MPI_Send/MPI_Recv in
// a GPipe-style forward pass, and lens puts the whole step into one trace.
//
//   MEGATRON_OTEL_ENABLED=1 mpirun -np 4 build/bin/lens-mpi-pipeline [steps] [microbatches]
//   build/bin/lens check lens-traces/<run-id>
//
// docs/integrating.md walks through it.
#include <mpi.h>

#include <array>
#include <cstdio>
#include <cstdlib>

#include "lens/error.h"
#include "lens/mpi_communicator.h"
#include "lens/startup_agreement.h"
#include "lens/step_trace.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  const int microbatches = argc > 2 ? std::atoi(argv[2]) : 4;

  // 1. A communicator over the group the step context is broadcast in (here
  //    the world; with data parallelism, still the world as in Megatron).
  lens::MpiCommunicator world(MPI_COMM_WORLD);
  const int stage = world.rank(), stages = world.size();

  // 2. Telemetry, created on EVERY rank (the start-up check is collective).
  std::unique_ptr<lens::Telemetry> telemetry;
  try {
    lens::TelemetryOptions options;
    options.span_groups =
        "per_step";  // a default; MEGATRON_OTEL_SPAN_GROUPS is ignored when set here
    telemetry = lens::create_distributed_telemetry(world, stages, options);
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "rank %d: %s\n", stage, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  // 3. The step protocol. Its gate (telemetry on AND pp > 1) is the same on
  //    every rank, so the per-step broadcast never deadlocks.
  lens::StepTrace step_trace(telemetry.get(), &world,
                             {.pipeline_parallel_size = stages, .pipeline_rank = stage});
  const lens::Tracer& tracer = step_trace.tracer();

  for (int step = 0; step < steps; ++step) {
    lens::StepScope scope(step_trace, static_cast<std::uint64_t>(step));  // one broadcast
    for (int mb = 0; mb < microbatches; ++mb) {
      std::array<float, 16> activation{};
      if (stage > 0) {
        // 4. The first receives of a step on later stages carry a Link to the
        //    source rank's step span. (In 1F1B: the warmup and pre-1F1B ones.)
        lens::Span linked;
        if (mb < stages - stage) linked = step_trace.recv_forward_linked(mb);
        lens::Span recv =
            tracer.start_span(lens::SpanGroup::kCommunication, "megatron.p2p.recv_forward");
        MPI_Recv(activation.data(), 16, MPI_FLOAT, stage - 1, mb, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      }
      {
        lens::Span forward =
            tracer.start_span(lens::SpanGroup::kMicrobatch, "megatron.microbatch.forward");
        forward.set_attribute("dl.microbatch_id", mb);
        for (auto& x : activation) x = x * 0.5f + 1.0f;
      }
      if (stage < stages - 1) {
        lens::Span send =
            tracer.start_span(lens::SpanGroup::kCommunication, "megatron.p2p.send_forward");
        MPI_Send(activation.data(), 16, MPI_FLOAT, stage + 1, mb, MPI_COMM_WORLD);
      }
    }
  }

  // 5. Shut down before MPI_Finalize: flushes what is queued, ends open spans.
  if (telemetry) {
    if (stage == 0) std::printf("traces in %s\n", telemetry->trace_file().c_str());
    telemetry->shutdown(std::chrono::seconds(30));
  }
  MPI_Finalize();
  return 0;
}
