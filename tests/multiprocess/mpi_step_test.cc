// The step protocol over real MPI: run with mpirun, e.g.
//   mpirun -np 4 build/bin/lens_mpi_step_test OUT_DIR [steps]
// Each rank traces `steps` steps of a toy 1F1B warmup (P = world size,
// M = 2 microbatches) into OUT_DIR. Rank 0 then reads every rank's file and
// checks the invariants. Exit 0 when they hold; 1 when not; 3 on a start-up
// configuration error (the message names the setting).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "lens/error.h"
#include "lens/mpi_communicator.h"
#include "lens/startup_agreement.h"
#include "lens/step_trace.h"
#include "trace_files.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: lens_mpi_step_test OUT_DIR [steps]\n");
    MPI_Finalize();
    return 2;
  }
  const std::string out_dir = argv[1];
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3;
  constexpr int kMicrobatches = 2;
  lens::MpiCommunicator comm(MPI_COMM_WORLD);
  const int pp = comm.size();

  std::unique_ptr<lens::Telemetry> telemetry;
  try {
    lens::TelemetryOptions opts;
    opts.trace_dir = out_dir;
    if (!std::getenv("MEGATRON_OTEL_SPAN_GROUPS")) opts.span_groups = "per_step";
    // A test hook: post each next step's broadcast early (MPI_Ibcast).
    opts.step_prefetch = std::getenv("LENS_TEST_PREFETCH") != nullptr;
    // A test hook: skewed clocks for the clock sync to find.
    if (std::getenv("LENS_TEST_CLOCK_SKEW") != nullptr) {
      const auto skew = lens::testing::test_clock_skew();
      opts.test_clock_offset_ns =
          static_cast<std::int64_t>(skew.offset_us[static_cast<std::size_t>(comm.rank())] * 1e3);
      opts.test_clock_drift_ppm = skew.drift_ppm[static_cast<std::size_t>(comm.rank())];
    }
    telemetry = lens::create_distributed_telemetry(comm, pp, opts);
  } catch (const lens::ConfigError& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    MPI_Finalize();
    return 3;
  }
  std::string run_dir = telemetry ? out_dir + "/" + telemetry->config().run_id : "";
  {
    lens::StepTraceOptions so;
    so.pipeline_parallel_size = pp;
    lens::StepTrace trace(telemetry.get(), &comm, so);
    for (int step = 0; step < steps; ++step) {
      lens::StepScope scope(trace, static_cast<std::uint64_t>(step));
      const int warmup = std::min(pp - comm.rank() - 1, kMicrobatches);
      for (int mb = 0; mb < warmup + (kMicrobatches > warmup ? 1 : 0); ++mb) {
        lens::Span link = trace.recv_forward_linked(mb);
      }
    }
    trace.finish();
  }
  if (telemetry) telemetry->shutdown(std::chrono::seconds(30));
  MPI_Barrier(MPI_COMM_WORLD);

  int failed = 0;
  if (comm.rank() == 0) {
    if (!telemetry) {
      std::fprintf(stderr, "telemetry is disabled; run with MEGATRON_OTEL_ENABLED=1\n");
      failed = 1;
    } else {
      auto spans = lens::testing::read_run(run_dir);
      lens::testing::CorrelationExpectation expect;
      expect.ranks = pp;
      expect.steps = steps;
      expect.linked_per_step = [&](int stage) {
        if (stage == 0) return 0;
        const int warmup = std::min(pp - stage - 1, kMicrobatches);
        return warmup + (kMicrobatches > warmup ? 1 : 0);
      };
      auto problems = lens::testing::check_correlation(spans, expect);
      if (std::getenv("LENS_TEST_CLOCK_SKEW") != nullptr)
        for (auto& p :
             lens::testing::check_clock_samples(spans, lens::testing::test_clock_skew(), pp))
          problems.push_back(p);
      for (const auto& p : problems) std::fprintf(stderr, "violation: %s\n", p.c_str());
      std::printf("checked %zu spans from %d ranks, %d steps: %zu violations\n", spans.size(), pp,
                  steps, problems.size());
      failed = problems.empty() ? 0 : 1;
    }
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
