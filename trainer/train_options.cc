#include "train_options.h"

#include <CLI/CLI.hpp>

namespace lens::train {

namespace {

// The job's layout, its model and its run: pp x dp x tp ranks, the schedule,
// the synthetic model and data.
void add_layout_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--pp", o.pp, "pipeline-parallel stages")->check(CLI::Range(1, 64));
  app.add_option("--dp", o.dp, "data-parallel replicas")->check(CLI::Range(1, 64));
  app.add_option("--tp", o.tp,
                 "tensor-parallel ranks per stage (Megatron's column- and row-parallel layers; a "
                 "divisor of --hidden); ranks in Megatron's order, TP fastest, then DP, then PP")
      ->check(CLI::Range(1, 64));
  app.add_option("--virtual-stages", o.virtual_stages,
                 "model chunks per stage: 1 runs Megatron's 1F1B, 2 or more its interleaved "
                 "schedule (--microbatches a multiple of --pp; --layers at least pp x V)")
      ->check(CLI::Range(1, 16));
  app.add_option("--microbatches", o.microbatches, "microbatches per step")
      ->check(CLI::Range(1, 4096));
  app.add_option("--steps", o.steps, "training steps")->check(CLI::Range(1, 10000000));
  app.add_option("--layers", o.layers, "Linear+GELU blocks in the model (at least --pp)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--hidden", o.hidden, "hidden size")->check(CLI::Range(1, 65536));
  app.add_option("--microbatch-size", o.microbatch_size, "samples per microbatch")
      ->check(CLI::Range(1, 65536));
  app.add_option("--lr", o.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of the synthetic data and the initial weights");
  app.add_option("--timeout-s", o.timeout_s, "timeout of every collective and p2p transfer")
      ->check(CLI::Range(1, 86400));
}

// How the run is traced (each over its lens variable) and where the
// launcher's ranks write.
void add_telemetry_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--otel-enabled", o.otel_enabled,
                 "trace (true/false); default: MEGATRON_OTEL_ENABLED, else off");
  app.add_option("--otel-span-groups", o.otel_span_groups,
                 "span groups, e.g. per_step or default,microbatch; default: "
                 "MEGATRON_OTEL_SPAN_GROUPS, else default");
  app.add_option("--otel-service-name", o.otel_service_name,
                 "service.name; default: OTEL_SERVICE_NAME, else megatron-lm");
  app.add_option("--trace-dir", o.trace_dir,
                 "where rank-<r>.otlp.jsonl files go (under <dir>/<run-id>/); default: "
                 "LENS_TRACE_DIR, else lens-traces");
  app.add_option("--step-prefetch", o.step_prefetch,
                 "post each next step's trace-context broadcast as soon as a step's has arrived, "
                 "so its latency hides behind the step (world scope; true/false)")
      ->default_val(false);
  app.add_option("--step-context", o.step_context,
                 "how every rank learns a step's trace context: broadcast (one broadcast per "
                 "step) or derived (no per-step collective; docs/derived-step-context.md); "
                 "default: LENS_STEP_CONTEXT, else broadcast")
      ->check(CLI::IsMember({"broadcast", "derived"}));
  app.add_option("--report-dir", o.report_dir, "(set by the launcher) where ranks write reports");
}

// Live metrics: the endpoints Prometheus scrapes, and the meeting that
// names stragglers as they happen.
void add_metrics_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--metrics-port", o.metrics_port,
                 "serve live metrics for Prometheus: rank r on --metrics-host:PORT+r, /metrics "
                 "(0: a port each rank picks, printed; default off)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-host", o.metrics_host,
                 "the IPv4 address the metrics endpoints listen on; default 127.0.0.1");
  app.add_option("--metrics-linger", o.metrics_linger_s,
                 "seconds each rank keeps serving its metrics after its last step; default: "
                 "until the final figures are scraped once, at most 30 s (0: stop at once)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_flag("--metrics-job", o.metrics_job,
               "with --metrics-port: rank 0 alone serves the job's metrics, every rank's step "
               "metrics under its labels, gathered at each meeting (--live-every, else every 10 "
               "steps: one all-gather)");
  app.add_option("--live-every", o.live_every,
                 "every N steps the ranks gather their compute over the last N steps and rank 0 "
                 "names a straggler as it happens (one all-gather every N steps; default off)")
      ->check(CLI::Range(0, 1 << 20));
}

// Fault injection (a slow stage, rank or replica) and the test aids.
void add_faults_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--slow-stage", o.slow_stage,
                 "fault injection: this stage's forward and backward take --slow-factor times "
                 "as long (a wait after each)")
      ->check(CLI::Range(0, 63));
  app.add_option("--slow-factor", o.slow_factor,
                 "how much slower --slow-stage or --slow-rank computes")
      ->check(CLI::Range(1.0, 100.0));
  app.add_option("--slow-ms", o.slow_ms,
                 "fault injection: --slow-stage or --slow-rank waits this many milliseconds more "
                 "after each forward and backward (a fixed delay: a small model's passes are too "
                 "short for --slow-factor to stand out of the run's noise)")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--slow-replica", o.slow_replica,
                 "fault injection: slow --slow-stage only in this data-parallel replica (one "
                 "slow rank); default: in every replica")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--slow-rank", o.slow_rank,
                 "fault injection: this one global rank computes --slow-factor times as slowly "
                 "(one TP peer, or one replica's stage)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--slow-from-step", o.slow_from_step,
                 "fault injection: --slow-stage is slow from this step on (a slowdown that begins "
                 "mid-run); default 0")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--slow-steps", o.slow_steps,
                 "TEST AID: --slow-stage (or --slow-rank) is slow only at these steps (a comma "
                 "list), so that a test knows which steps are slow")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  app.add_option("--microbatch-jitter", o.microbatch_jitter,
                 "TEST AID: each microbatch's forward and backward take a factor in [1, F] as "
                 "long, drawn from --seed, the step, the replica and the microbatch: the same on "
                 "every stage, as work that varies by microbatch (sequence lengths) is; default 1")
      ->check(CLI::Range(1.0, 100.0));
  app.add_option("--test-step-skew-rank", o.test_step_skew_rank,
                 "TEST AID: this rank numbers its steps one higher than the others")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--test-simulated-device", o.test_simulated_device,
                 "TEST AID: run each forward and backward on the simulated GPU named in "
                 "LENS_CUDA_RUNTIME, F times as long as the host's compute, its spans timed on "
                 "the device (docs/device-time.md)")
      ->check(CLI::Range(1.0, 100.0));
  app.add_option("--test-compute-ms", o.test_compute_ms,
                 "TEST AID: each forward and backward lasts at least this many milliseconds (the "
                 "rest of it a sleep): a model whose passes take a known time, which other "
                 "processes on the machine do not stretch the way they stretch computing")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--test-clock-offsets-us", o.test_clock_offsets_us,
                 "TEST AID: one clock offset per rank, in µs, injected into each rank's span "
                 "clock (comma-separated, rank 0 first)")
      ->delimiter(',')
      ->check(CLI::Range(-3.6e9, 3.6e9));
  app.add_option("--test-clock-drift-ppm", o.test_clock_drift_ppm,
                 "TEST AID: one clock drift per rank, in ppm, injected like the offsets")
      ->delimiter(',')
      ->check(CLI::Range(-1e5, 1e5));
}

// What no one layout flag can check alone: the layers, the virtual stages
// and the hidden size against the ranks. Each refusal exits with 2.
void check_layout(const TrainOptions& o) {
  if (o.layers < o.pp) {
    std::fprintf(stderr, "lens-train: --layers %d is less than --pp %d; accepted: layers >= pp\n",
                 o.layers, o.pp);
    std::exit(2);
  }
  if (o.virtual_stages > 1 &&
      (o.pp < 2 || o.microbatches % o.pp != 0 || o.layers < o.pp * o.virtual_stages)) {
    std::fprintf(stderr,
                 "lens-train: --virtual-stages %d needs --pp 2 or more (have %d), --microbatches "
                 "a multiple of --pp (have %d) and --layers at least pp x V = %d (have %d)\n",
                 o.virtual_stages, o.pp, o.microbatches, o.pp * o.virtual_stages, o.layers);
    std::exit(2);
  }
  if (o.hidden % o.tp != 0) {
    std::fprintf(stderr,
                 "lens-train: --tp %d does not divide --hidden %d; accepted: a divisor of the "
                 "hidden size\n",
                 o.tp, o.hidden);
    std::exit(2);
  }
}

// The metrics flags with each other and with the ports there are.
void check_metrics(const TrainOptions& o) {
  if (o.metrics_job && o.metrics_port < 0) {
    std::fprintf(stderr,
                 "lens-train: --metrics-job is set without --metrics-port; accepted: both (rank 0 "
                 "serves the job's metrics on that port)\n");
    std::exit(2);
  }
  if (o.metrics_port > 0 && !o.metrics_job && o.metrics_port + o.world() - 1 > 65535) {
    std::fprintf(stderr,
                 "lens-train: --metrics-port %d leaves no port for rank %d; accepted: 0, or 1 to "
                 "%d\n",
                 o.metrics_port, o.world() - 1, 65536 - o.world());
    std::exit(2);
  }
}

// Where a fault is injected: a stage, rank or replica of this layout, and
// something that slows it.
void check_faults(const TrainOptions& o) {
  if (o.slow_stage >= o.pp) {
    std::fprintf(stderr,
                 "lens-train: --slow-stage %d is not a stage of --pp %d; accepted: 0 to %d\n",
                 o.slow_stage, o.pp, o.pp - 1);
    std::exit(2);
  }
  if (o.slow_rank >= o.world()) {
    std::fprintf(stderr,
                 "lens-train: --slow-rank %d is not a rank of pp x dp x tp = %d; accepted: 0 to "
                 "%d\n",
                 o.slow_rank, o.world(), o.world() - 1);
    std::exit(2);
  }
  if (o.slow_rank >= 0 && (o.slow_stage >= 0 || o.slow_replica >= 0)) {
    std::fprintf(stderr,
                 "lens-train: --slow-rank names one rank; accepted: it, or --slow-stage (with "
                 "--slow-replica), not both\n");
    std::exit(2);
  }
  if (o.slow_replica >= o.dp) {
    std::fprintf(stderr,
                 "lens-train: --slow-replica %d is not a replica of --dp %d; accepted: 0 to %d\n",
                 o.slow_replica, o.dp, o.dp - 1);
    std::exit(2);
  }
  const bool slow_target = o.slow_stage >= 0 || o.slow_rank >= 0;
  if (slow_target && o.slow_factor <= 1 && o.slow_ms <= 0) {
    std::fprintf(stderr,
                 "lens-train: --slow-stage or --slow-rank is set but nothing slows it; accepted: "
                 "--slow-factor above 1, or --slow-ms above 0\n");
    std::exit(2);
  }
  if (!slow_target && (o.slow_factor > 1 || o.slow_ms > 0 || !o.slow_steps.empty() ||
                       o.slow_replica >= 0)) {
    std::fprintf(stderr,
                 "lens-train: --slow-factor, --slow-ms, --slow-steps and --slow-replica need "
                 "what to slow; accepted: with --slow-stage S or --slow-rank R\n");
    std::exit(2);
  }
  if (o.test_step_skew_rank >= o.world()) {
    std::fprintf(stderr,
                 "lens-train: --test-step-skew-rank %d is not a rank of pp x dp x tp = %d; "
                 "accepted: 0 to %d\n",
                 o.test_step_skew_rank, o.world(), o.world() - 1);
    std::exit(2);
  }
  for (const auto* list : {&o.test_clock_offsets_us, &o.test_clock_drift_ppm}) {
    if (!list->empty() && static_cast<int>(list->size()) != o.world()) {
      std::fprintf(
          stderr,
          "lens-train: %s has %zu values for %d ranks; accepted: one per rank (pp x dp x tp)\n",
          list == &o.test_clock_offsets_us ? "--test-clock-offsets-us" : "--test-clock-drift-ppm",
          list->size(), o.world());
      std::exit(2);
    }
  }
}

}  // namespace

TrainOptions parse_train_options(int argc, char** argv) {
  TrainOptions o;
  CLI::App app{
      "lens-train: a pipeline-parallel trainer on libtorch (Megatron's 1F1B schedule), traced "
      "with lens.\nWithout RANK in the environment it starts its own pp x dp x tp ranks on this "
      "machine; under torchrun it runs as the one rank torchrun says."};
  add_layout_options(app, o);
  add_telemetry_options(app, o);
  add_metrics_options(app, o);
  add_faults_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; the exit status is ours: 0 for --help, 2
    // for a bad flag (its own codes, e.g. 105 for a value out of range,
    // would say nothing to a launcher).
    const int code = app.exit(e);
    std::exit(code == 0 ? 0 : 2);
  }
  check_layout(o);
  check_metrics(o);
  check_faults(o);
  for (int i = 1; i < argc; ++i) o.args.emplace_back(argv[i]);
  return o;
}

}  // namespace lens::train
