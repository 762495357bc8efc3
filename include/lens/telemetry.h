/// \file
/// Telemetry: the one object per process that lens users initialise.
///
/// It holds the resource (service.name, nemo.run.id, dl.rank, ...), the span
/// group switches, the batch processor and the exporter chosen by the
/// configuration, and hands out Tracers. Telemetry::create builds one from
/// TelemetryOptions and the environment; it returns nullptr when telemetry is
/// disabled (MEGATRON_OTEL_ENABLED unset or 0, or OTEL_SDK_DISABLED=true), so
/// "is telemetry initialised" is a null check that is the same on every rank
/// of a job. lens::init installs a process-wide instance that get_telemetry()
/// returns, as the original's get_telemetry() does.
///
/// Thread safety: all methods may be called from any thread. Tracers and
/// Spans must not outlive their Telemetry, except that a Span still open at
/// shutdown is ended by the shutdown (exported with nemo.span.truncated=true)
/// and its handle may be destroyed later.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lens/batch_options.h"
#include "lens/config.h"
#include "lens/device_stats.h"
#include "lens/exporter.h"
#include "lens/resource.h"
#include "lens/span_groups.h"
#include "lens/tracer.h"
#include "lens/version.h"

namespace lens {

inline constexpr std::string_view kDefaultTracerName = "nemo.lens";
inline constexpr std::string_view kLensVersion = LENS_VERSION_STRING;

struct TelemetryStats {
  ProcessorStats processor;
  std::uint64_t spans_truncated = 0;  ///< open at shutdown, ended by it
  int stop_signal = 0;                ///< note_stop_signal's, or 0
  /// The exporter's delivery counters (requests, retries, spooled, ...),
  /// when it delivers over a network (an OTLP endpoint).
  std::optional<DeliveryStats> delivery;
  /// Device-timed spans, once a span asked for a device.
  std::optional<DeviceStats> device;
  /// Tail selection's hold, when on.
  std::optional<StepHoldStats> hold;
};

/// Where every span ended went, in the words of the end-of-run report:
/// ended = exported + spooled + not_selected + dropped(), once shut down.
struct SpanAccount {
  std::uint64_t ended = 0;
  std::uint64_t exported = 0;  ///< delivered to the backend, or written to the trace file
  std::uint64_t spooled = 0;   ///< kept in the spool, for `lens upload`
  std::string spool_path;      ///< where (empty: no spool)
  std::uint64_t dropped_queue_full = 0;
  std::uint64_t dropped_shutdown = 0;      ///< not delivered by the shutdown's deadline
  std::uint64_t dropped_export_error = 0;  ///< failed, and no spool kept them
  std::uint64_t dropped_forked_child = 0;  ///< ended in a fork's child
  std::uint64_t dropped_hold_full = 0;     ///< tail selection: no room in the hold
  /// Tail selection: of steps the ranks chose not to keep. A choice, not a
  /// loss: not in dropped().
  std::uint64_t not_selected = 0;
  std::uint64_t truncated = 0;  ///< of the ended, still open at shutdown
  std::string truncated_by;     ///< the signal that stopped the process ("SIGTERM")

  std::uint64_t dropped() const {
    return dropped_queue_full + dropped_shutdown + dropped_export_error + dropped_forked_child +
           dropped_hold_full;
  }
  /// Sums two accounts (the spool path kept when they agree).
  void add(const SpanAccount& other);
  /// "1258 spans: 0 exported, 1258 spooled (to DIR/spool-rank-0.otlp.jsonl),
  /// 0 dropped (0 queue full, 0 shutdown, 0 export error), 3 truncated"
  /// (", 3 truncated by SIGTERM" when a signal stopped the process)
  std::string describe() const;
  static SpanAccount of(const TelemetryStats& stats);
};

class Telemetry {
 public:
  /// Builds telemetry from options over the environment. Returns nullptr when
  /// disabled. Throws ConfigError on an invalid setting or an unwritable trace
  /// directory.
  static std::unique_ptr<Telemetry> create(const TelemetryOptions& options = {},
                                           const EnvLookup& env = process_environment());
  ~Telemetry();
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  /// A tracer for an instrumentation scope; the same name gives the same scope.
  Tracer tracer(std::string_view name = kDefaultTracerName, std::string_view version = {});

  bool enabled(SpanGroup group) const;
  /// The groups being recorded: none on a rank the export filter leaves out.
  SpanGroupSet span_groups() const;
  /// Switches groups at run time (ignored on a rank the filter leaves out).
  void set_span_groups(SpanGroupSet groups);
  /// False on a rank the export filter (LENS_EXPORT_FILTER) leaves out.
  bool exporting() const { return config().exporting; }

  const Config& config() const;
  const Sampler& sampler() const { return config().sampler; }
  const Resource& resource() const;
  /// The trace file this process writes, or empty if it writes none.
  const std::string& trace_file() const;

  /// Exports everything ended so far. Returns false on timeout.
  bool flush(std::chrono::milliseconds timeout);
  /// Ends open spans (truncated), exports what is queued within the timeout
  /// and stops the exporter; past the timeout the request in progress is
  /// abandoned and what is left goes to the spool (LENS_SPOOL_DIR), if one
  /// is set, within a second more, or is dropped and counted. When not
  /// every span was exported, prints the account (SpanAccount::describe) to
  /// stderr. Idempotent. Returns false if the timeout expired.
  bool shutdown(std::chrono::milliseconds timeout);
  /// The same, within the configured bound: OTEL_BSP_EXPORT_TIMEOUT
  /// (Config::batch.export_timeout, default 30 s).
  bool shutdown();

  /// Says the process is stopping on signal `signo` (SIGTERM, SIGINT): the
  /// spans a following shutdown ends are marked lens.stopped_by (the
  /// signal's name, e.g. SIGTERM) and
  /// its account says they were ended by it. Async-signal-safe.
  void note_stop_signal(int signo);
  /// The signal the process is stopping on: note_stop_signal's, else the
  /// watched one received (termination_signal), else 0.
  int stop_signal() const;

  TelemetryStats stats() const;

  /// Tail selection (docs/tail-selection.md; Config::tail_selection): true
  /// when this rank holds its steps' spans until the ranks choose.
  bool holds_steps() const;
  /// The spans of `step`, whose step span is `step_span` (sampled), wait in
  /// the hold from now on. Nothing when not holding.
  void hold_step(std::uint64_t step, const SpanContext& step_span);
  /// The ranks' choice: the kept steps' spans are exported (and those that
  /// end later), the others' released and counted not selected. The export
  /// thread does the work.
  void settle_steps(const std::vector<std::uint64_t>& keep, const std::vector<std::uint64_t>& drop);

  /// A number no other Telemetry of this process had or will have (its
  /// address may be reused by a later one): what caches keyed on "this
  /// telemetry" compare.
  std::uint64_t instance() const;

  /// The clock this telemetry stamps spans with, now, in Unix ns: the
  /// system clock (with the test aid's skew, when a test sets one). What the
  /// clock sync measures.
  std::int64_t now_unix_ns() const;

  /// For a failure that ends the job (a collective that timed out, a lost
  /// peer): adds an event named `event` with attribute lens.detail=`detail` to
  /// every span still open, and returns one line per open span, oldest first
  /// ("megatron.train_step dl.step=12 ... (open 3051 ms)"), for the log. A
  /// following shutdown() exports them, truncated. Other threads may go on
  /// changing their spans meanwhile: each open span is read while its owner
  /// is kept out (a span whose owner stays inside a change for 200 ms is
  /// skipped, with a line saying so).
  std::vector<std::string> mark_open_spans(std::string_view event, std::string_view detail);

 private:
  struct Impl;
  explicit Telemetry(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The failure record a rank leaves when a collective or transfer fails:
/// mark_open_spans("lens.failure", detail), then on stderr one line per open
/// span, "<who> was in: <span>", and "<who>: last span ended: <span>".
/// Nothing in a process that received a termination signal
/// (termination_signal()): its peers failing then is its own stop.
void write_failure_record(Telemetry& telemetry, std::string_view who, std::string_view detail);

/// Creates the process-wide telemetry (replacing any earlier one, which is
/// shut down first). Returns nullptr when disabled. Throws ConfigError.
Telemetry* init(const TelemetryOptions& options = {});
/// The process-wide telemetry, or nullptr if not initialised or disabled.
Telemetry* get_telemetry();
/// Shuts the process-wide telemetry down and destroys it.
bool shutdown_telemetry(std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace lens
