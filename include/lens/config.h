/// \file
/// Configuration: programmatic options over environment variables.
///
/// Every setting is a row of the settings table (lens/settings.h), from
/// which resolving, lens.init's keywords and the start-up agreement's names
/// are derived. resolve_config() merges TelemetryOptions (set in code; they win) with the
/// environment (MEGATRON_OTEL_* with NEMO_LENS_* as fallback prefix, the
/// standard OTEL_* variables, and LENS_* for what lens adds). An empty
/// variable counts as unset. A value lens cannot accept throws ConfigError
/// naming the variable, the value and the accepted values, so a bad setting
/// fails start-up instead of surfacing mid-run.
///
/// Variables read (see README for the full table):
///   MEGATRON_OTEL_ENABLED      1/0, true/false, yes/no, on/off (default off)
///   MEGATRON_OTEL_SPAN_GROUPS  group spec (default "default")
///   MEGATRON_OTEL_EXPORTER     otlp | file | console | none (default: otlp when an
///                              OTLP endpoint is set, else file)
///   OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
///   OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf, http/json),
///   OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _TIMEOUT, _COMPRESSION (gzip, none),
///   _CERTIFICATE; LENS_SPOOL_DIR (undeliverable batches go there)
///   MEGATRON_OTEL_RUN_ID       run id (else SLURM_JOB_ID, else generated)
///   OTEL_SDK_DISABLED          true/false
///   OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG (see sampler.h)
///   LENS_COLLECTIVE_TIMEOUT_MS (default 300000): step-protocol collectives
///   LENS_STEP_CONTEXT (broadcast | derived), LENS_STEP_VERIFY_STEPS
///   OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
///   OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT (ms),
///   OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE
///   OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT (or OTEL_ATTRIBUTE_COUNT_LIMIT),
///   OTEL_SPAN_EVENT_COUNT_LIMIT, OTEL_SPAN_LINK_COUNT_LIMIT,
///   OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT, OTEL_LINK_ATTRIBUTE_COUNT_LIMIT
///   LENS_TRACE_DIR (default lens-traces), LENS_TRACE_FILE (file name pattern)
///   RANK / WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK / _SIZE (mpirun)
///
/// Thread safety: pure functions over their arguments.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lens/attribute.h"
#include "lens/batch_options.h"
#include "lens/exporter.h"
#include "lens/otlp_http_options.h"
#include "lens/parallel_layout.h"
#include "lens/sampler.h"
#include "lens/span_groups.h"
#include "lens/span_record.h"

namespace lens {

/// Looks a variable up; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

/// The process environment (getenv).
EnvLookup process_environment();

/// Settings given in code. Every field that is set overrides the environment.
struct TelemetryOptions {
  std::optional<bool> enabled;
  std::optional<std::string> span_groups;  ///< a group spec
  std::optional<std::string> exporter;     ///< otlp | file | console | none
  /// Overrides OTEL_EXPORTER_OTLP_*; the endpoint is the full traces URL.
  std::optional<OtlpHttpOptions> otlp;
  std::optional<std::string> run_id;
  /// Overrides OTEL_SERVICE_NAME.
  std::optional<std::string> service_name;
  /// Used when neither service_name nor OTEL_SERVICE_NAME nor a service.name in
  /// OTEL_RESOURCE_ATTRIBUTES is given.
  std::string default_service_name = "megatron-lm";
  /// Added to (and overriding) OTEL_RESOURCE_ATTRIBUTES.
  Attributes resource_attributes;
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<std::string> trace_dir;
  /// File name pattern; {rank}, {pid} and {run_id} are replaced.
  std::optional<std::string> trace_file;
  std::optional<std::uint32_t> max_queue_size;
  std::optional<std::uint32_t> max_export_batch_size;
  std::optional<std::chrono::milliseconds> schedule_delay;
  std::optional<std::chrono::milliseconds> export_timeout;
  std::optional<SpanLimits> span_limits;
  std::optional<Sampler> sampler;
  std::optional<std::chrono::milliseconds> collective_timeout;
  std::optional<TraceScope> trace_scope;
  std::optional<ExportFilter> export_filter;
  /// At most this many sampled steps per minute (LENS_STEP_BUDGET); 0: no
  /// budget.
  std::optional<std::uint32_t> step_budget_per_minute;
  /// Post each next step's trace-context broadcast early (LENS_STEP_PREFETCH;
  /// world scope only). Agreed at start-up: a rank that prefetches posts one
  /// broadcast more than one that does not.
  std::optional<bool> step_prefetch;
  /// How every rank learns a step's context (LENS_STEP_CONTEXT, default
  /// broadcast; docs/derived-step-context.md). Agreed at start-up.
  std::optional<StepContextMode> step_context;
  /// In `derived` mode: every this many steps the ranks compare their step
  /// numbers and derived contexts in one all-gather (LENS_STEP_VERIFY_STEPS,
  /// default 100; 0: never). The step budget's shared schedule is renewed at
  /// the same steps. Agreed at start-up.
  std::optional<std::uint32_t> step_verify_steps;
  /// This rank's parallel coordinates (resource attributes
  /// dl.pipeline_parallel.rank, dl.data_parallel.rank,
  /// dl.tensor_parallel.rank; the export filter's input).
  ParallelCoordinates coordinates;
  /// The run's shared random key (agreed at start-up): with the run id and
  /// the step it derives global rank 0's step context in `pipeline` scope.
  std::optional<std::uint64_t> run_key;
  /// Clock sync (docs/clock-alignment.md): measure every rank's clock
  /// against global rank 0's at the first step, every `clock_sync_steps`
  /// steps and every `clock_sync_seconds` seconds (0: not by that measure;
  /// 300 by default, so that a run that dies without StepTrace::finish still
  /// has samples along its length), and at StepTrace::finish (LENS_CLOCK_SYNC,
  /// LENS_CLOCK_SYNC_STEPS, LENS_CLOCK_SYNC_SECONDS, LENS_CLOCK_SYNC_EXCHANGES). Agreed at
  /// start-up: the sync is a collective.
  std::optional<bool> clock_sync;
  std::optional<std::uint32_t> clock_sync_steps;
  std::optional<std::uint32_t> clock_sync_seconds;
  std::optional<int> clock_sync_exchanges;
  /// Device-timed spans (docs/device-time.md): how many may await their
  /// device at once (past it a span keeps its host times, counted;
  /// LENS_DEVICE_MAX_PENDING, 1 to 8192, default 4096: the process's
  /// events make 8192 pairs), and how often
  /// the device clock is anchored again (LENS_DEVICE_ANCHOR_MS, 100 ms to
  /// an hour, default 5000).
  std::optional<std::uint32_t> device_max_pending;
  std::optional<std::uint32_t> device_anchor_ms;
  /// Tail selection (docs/tail-selection.md): every step's spans wait in a
  /// hold of the last `tail_hold_steps` steps (LENS_TAIL_HOLD_STEPS, 1 to
  /// 4096, default 64) and `tail_hold_mb` MiB (LENS_TAIL_HOLD_MB, 1 to
  /// 65536, default 256) until the ranks choose, at their meeting, which
  /// steps to keep: the `tail_keep` slowest of each window
  /// (LENS_TAIL_KEEP, 1 to 255, default 1) and a random
  /// `tail_baseline_percent` of its steps (LENS_TAIL_BASELINE, 0 to 100,
  /// default 0). LENS_TAIL_SELECTION turns it on (off by default). On,
  /// keep and baseline agreed at start-up.
  std::optional<bool> tail_selection;
  std::optional<std::uint32_t> tail_hold_steps;
  std::optional<std::uint32_t> tail_hold_mb;
  std::optional<std::uint32_t> tail_keep;
  std::optional<std::uint32_t> tail_baseline_percent;
  /// TEST AID, never for production: skews this telemetry's span clock by a
  /// fixed offset and a drift (the clock then reads system time + offset +
  /// drift x time since the telemetry started), so that clock alignment can
  /// be tested on ranks that share one host. Off (0) unless set.
  std::int64_t test_clock_offset_ns = 0;
  double test_clock_drift_ppm = 0;
  /// An exporter to use instead of the configured kind (e.g. InMemoryExporter
  /// in tests).
  std::shared_ptr<SpanExporter> exporter_instance;
};

/// The outcome of resolving options and environment.
struct Config {
  bool enabled = false;
  SpanGroupSet span_groups;
  std::string exporter;  ///< otlp | file | console | none | custom
  OtlpHttpOptions otlp;  ///< when exporter == "otlp" (spool_path set at creation)
  std::string spool_dir;
  std::string run_id;
  bool run_id_generated = false;
  std::string service_name;
  Attributes resource_attributes;  ///< from OTEL_RESOURCE_ATTRIBUTES and options
  std::optional<int> rank;
  std::optional<int> world_size;
  std::string trace_dir = "lens-traces";
  std::string trace_file;
  BatchProcessorOptions batch;
  SpanLimits span_limits;
  Sampler sampler;
  std::chrono::milliseconds collective_timeout{300000};
  TraceScope trace_scope = TraceScope::kWorld;
  ExportFilter export_filter;
  std::uint32_t step_budget_per_minute = 0;
  bool step_prefetch = false;
  StepContextMode step_context = StepContextMode::kBroadcast;
  std::uint32_t step_verify_steps = 100;
  ParallelCoordinates coordinates;
  bool clock_sync = true;
  std::uint32_t clock_sync_steps = 0;
  std::uint32_t clock_sync_seconds = 300;
  int clock_sync_exchanges = 8;
  std::uint32_t device_max_pending = 4096;
  std::uint32_t device_anchor_ms = 5000;
  bool tail_selection = false;  ///< batch.hold is set when on
  std::uint32_t tail_hold_steps = 64;
  std::uint32_t tail_hold_mb = 256;
  std::uint32_t tail_keep = 1;
  std::uint32_t tail_baseline_percent = 0;
  std::int64_t test_clock_offset_ns = 0;  ///< the test aid (TelemetryOptions)
  double test_clock_drift_ppm = 0;
  std::uint64_t run_key = 0;  ///< random unless agreed
  /// True when the run key came from the options (the start-up agreement
  /// passes rank 0's): `pipeline` scope needs it the same on every rank.
  bool run_key_agreed = false;
  /// False on a rank the export filter leaves out: its telemetry exists (the
  /// gate stays uniform) but records and writes nothing.
  bool exporting = true;
};

Config resolve_config(const TelemetryOptions& options, const EnvLookup& env);

/// The trace file path for a resolved config: `trace_dir/run_id/<pattern>`.
std::string trace_file_path(const Config& config);

/// A fresh run id: "YYYYMMDD-HHMMSS-xxxxxx" (UTC time, 6 random hex digits).
std::string generate_run_id();

/// Where a job's metrics go by OTLP/HTTP (docs/metrics.md), from the
/// environment: OTEL_METRICS_EXPORTER (`otlp` exports; `none` or unset
/// does not), the endpoint OTEL_EXPORTER_OTLP_METRICS_ENDPOINT as is, else
/// OTEL_EXPORTER_OTLP_ENDPOINT + /v1/metrics, else
/// http://localhost:4318/v1/metrics; protocol, headers, timeout,
/// compression and certificates as for traces, each
/// OTEL_EXPORTER_OTLP_METRICS_X over OTEL_EXPORTER_OTLP_X;
/// OTEL_METRIC_EXPORT_INTERVAL in ms (default 60000);
/// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE `cumulative` only.
/// Throws ConfigError naming the setting and what it accepts.
struct MetricsExportConfig {
  bool otlp = false;
  OtlpHttpOptions options;
  std::chrono::milliseconds interval{60000};
};
MetricsExportConfig resolve_metrics_export(const EnvLookup& env = process_environment());

}  // namespace lens
