// lens-train's command line: the run's shape (pipeline stages, data-parallel
// replicas, microbatches, model size) and Megatron's tracing flags.
//
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lens::train {

// The longest a metrics endpoint waits after the last step for a scrape of
// the final figures when --metrics-linger is not given (Prometheus's
// default scrape interval is 15 s).
inline constexpr double kFinalScrapeWaitS = 30;

struct TrainOptions {
  int pp = 2;            // pipeline-parallel stages
  int dp = 1;            // data-parallel replicas
  int tp = 1;            // tensor-parallel ranks per stage (a divisor of hidden)
  int microbatches = 4;  // per step and replica
  int steps = 10;
  int layers = 8;  // Linear+GELU blocks, split evenly over the stages
  int hidden = 64;
  int microbatch_size = 16;
  double lr = 3e-3;
  std::uint64_t seed = 1234;
  int timeout_s = 120;  // for every collective and p2p transfer
  // Megatron's flags; unset falls back to MEGATRON_OTEL_* in the environment.
  std::optional<bool> otel_enabled;
  std::optional<std::string> otel_span_groups;
  std::optional<std::string> otel_service_name;
  std::optional<std::string> trace_dir;
  // Model chunks per stage: 1 runs Megatron's non-interleaved 1F1B, more
  // the interleaved schedule (microbatches a multiple of pp).
  int virtual_stages = 1;
  // Post each next step's trace-context broadcast early (world scope).
  bool step_prefetch = false;
  // broadcast | derived; unset falls back to LENS_STEP_CONTEXT.
  std::optional<std::string> step_context;
  // TEST AID: this global rank (-1: none) passes every step number one
  // higher than the others do, so that the derived mode's step check can be
  // seen failing the job.
  int test_step_skew_rank = -1;
  // Fault injection: stage `slow_stage` (-1: none) computes `slow_factor`
  // times as slowly, on every replica.
  int slow_stage = -1;
  double slow_factor = 1;
  double slow_ms = 0;  // a fixed wait after each of its forwards and backwards
  int slow_replica = -1;  // -1: every replica; else only this one (one slow rank)
  // Fault injection: this one global rank (-1: none) computes slow_factor
  // times as slowly: one TP peer, or one replica's stage.
  int slow_rank = -1;
  std::int64_t slow_from_step = 0;  // the slowdown begins at this step
  // Test aid: the slowdown only at these steps (empty: from slow_from_step on).
  std::vector<std::int64_t> slow_steps;
  // Test aid: each microbatch's compute takes a seeded factor in [1, F] as
  // long, the same on every stage (work that varies by microbatch). 1: none.
  double microbatch_jitter = 1;
  double test_compute_ms = 0;  // test aid: each pass lasts at least this long (0: as it computes)
  // TEST AID: the compute on the simulated GPU named in LENS_CUDA_RUNTIME,
  // running this many times the host's compute (0: on the host).
  double test_simulated_device = 0;
  // Live metrics (docs/metrics.md): rank r serves its OpenMetrics text on
  // metrics_host:metrics_port + r (-1: off; 0: a port each rank picks,
  // printed), and keeps serving metrics_linger_s seconds after its last step
  // (-1: until the final figures are scraped once, at most
  // kFinalScrapeWaitS: a run shorter than the scrape interval is otherwise
  // never seen, nor its last steps' exemplars).
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  double metrics_linger_s = -1;
  // Rank 0 alone serves the job's metrics on metrics_port: every rank's,
  // gathered at the meetings (every live_every steps, else every 10).
  bool metrics_job = false;
  // Live stragglers (docs/metrics.md): every N steps the ranks gather their
  // compute over the last N steps and name a straggler as it happens (0: off).
  int live_every = 0;
  // TEST AID: per rank (by global rank), an offset and a drift injected into
  // that rank's span clock, so that clock alignment can be tried on one
  // host. Empty, or one value per rank.
  std::vector<double> test_clock_offsets_us;
  std::vector<double> test_clock_drift_ppm;
  // Where each rank writes its JSON report (set by the local launcher).
  std::string report_dir;
  // The arguments as given, for relaunching ranks.
  std::vector<std::string> args;

  int world() const { return pp * dp * tp; }
  // Megatron's default rank order: tensor-parallel rank fastest, then the
  // data-parallel replica, then the pipeline stage.
  int stage_of(int rank) const { return rank / (tp * dp); }
  int replica_of(int rank) const { return rank / tp % dp; }
  int tensor_of(int rank) const { return rank % tp; }
};

// Parses argv; on --help or a bad value prints the message and exits (0 for
// help, 2 for an error), naming the flag and what is accepted.
TrainOptions parse_train_options(int argc, char** argv);

}  // namespace lens::train
