#include "lens/telemetry.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <vector>

#include "lens/error.h"
#include "lens/file_exporter.h"
#include "lens/otlp_http_exporter.h"
#include "lens/termination.h"
#include "span_clock.h"
#include "span_timing.h"
#include "fork_safety.h"
#include "spin_lock.h"
#include "telemetry_core.h"
#include "lens/semconv.h"

namespace lens {
namespace {

// Accepts spans and discards them: for ranks that take part in the step
// protocol but do not export.
class DiscardExporter : public SpanExporter {
 public:
  ExportResult export_spans(const Resource&, std::span<const SpanRecord* const>) override {
    return ExportResult::kSuccess;
  }
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

Resource build_resource(const Config& c) {
  Resource r;
  r.set("host.name", host_name());
  r.set("process.pid", static_cast<std::int64_t>(::getpid()));
  // Tells this process's spans from a restart's with the same host and pid
  // (a container), for readers that key clock samples by process.
  r.set("lens.telemetry.start_unix_ns",
        static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count()));
  r.set("telemetry.sdk.name", std::string("lens"));
  r.set("telemetry.sdk.language", std::string("cpp"));
  r.set("telemetry.sdk.version", std::string(kLensVersion));
  for (const auto& a : c.resource_attributes) r.set(a.key, a.value);
  r.set("service.name", c.service_name);
  r.set(semconv::kRunId, c.run_id);
  if (c.rank) {
    r.set(semconv::kRank, static_cast<std::int64_t>(*c.rank));
    r.set("service.instance.id", c.run_id + "-rank" + std::to_string(*c.rank));
  } else {
    r.set("service.instance.id", c.run_id + "-pid" + std::to_string(::getpid()));
  }
  if (c.world_size) r.set(semconv::kWorldSize, static_cast<std::int64_t>(*c.world_size));
  if (c.coordinates.pp >= 0)
    r.set(semconv::kPipelineRank, static_cast<std::int64_t>(c.coordinates.pp));
  if (c.coordinates.dp >= 0)
    r.set(semconv::kDataRank, static_cast<std::int64_t>(c.coordinates.dp));
  if (c.coordinates.tp >= 0)
    r.set(semconv::kTensorRank, static_cast<std::int64_t>(c.coordinates.tp));
  r.set(semconv::kTraceScope, std::string(trace_scope_name(c.trace_scope)));
  // How steps get their context: what lens check needs to know which
  // orderings the run guarantees (a broadcast orders the ranks' steps; a
  // derived or prefetched context does not).
  r.set(semconv::kStepContext, std::string(step_context_mode_name(c.step_context)));
  if (c.step_prefetch && c.step_context == StepContextMode::kBroadcast &&
      c.trace_scope == TraceScope::kWorld)
    r.set(semconv::kStepPrefetch, true);
  if (!c.export_filter.empty()) r.set(semconv::kExportFilter, c.export_filter.to_string());
  return r;
}

// fork() and the telemetry's own mutexes. A thread of the parent may hold
// one of them when another forks (an init, a shutdown, a scope being named,
// a device's start): the child would inherit it locked with no thread to
// unlock it, and its first call there would wait forever. The prepare
// handler takes them all, so the fork waits until each is free (each is
// held for a bounded time); the parent and child handlers release them.
// Installed after the core's handlers (fork_safety.h), so that this prepare
// runs first: these locks come before the core's on every path (a shutdown
// takes the open-span lock while it holds its own). Installed before any of
// them is first taken: at the start of init() and of create().
std::mutex g_global_mu;

// One telemetry's mutexes, known to the fork handlers while it lives.
class TelemetryLocks {
 public:
  TelemetryLocks();
  ~TelemetryLocks();
  TelemetryLocks(const TelemetryLocks&) = delete;
  TelemetryLocks& operator=(const TelemetryLocks&) = delete;

  void set_device(device::SpanTiming* device);
  void lock_for_fork();
  void unlock_after_fork();

  std::mutex scopes_mu;
  std::mutex shutdown_mu;

 private:
  device::SpanTiming* device_ = nullptr;  // its start lock
};

struct LiveTelemetries {
  std::mutex mu;
  std::vector<TelemetryLocks*> all;
};

// Never destroyed: a telemetry may be destroyed during static destruction.
LiveTelemetries& live_telemetries() {
  static auto* l = new LiveTelemetries;
  return *l;
}

void before_fork() {
  g_global_mu.lock();
  LiveTelemetries& l = live_telemetries();
  l.mu.lock();
  for (TelemetryLocks* t : l.all) t->lock_for_fork();
}

void after_fork() {
  LiveTelemetries& l = live_telemetries();
  for (auto it = l.all.rbegin(); it != l.all.rend(); ++it) (*it)->unlock_after_fork();
  l.mu.unlock();
  g_global_mu.unlock();
}

TelemetryLocks::TelemetryLocks() {
  LiveTelemetries& l = live_telemetries();
  std::lock_guard<std::mutex> lock(l.mu);
  l.all.push_back(this);
}

TelemetryLocks::~TelemetryLocks() {
  LiveTelemetries& l = live_telemetries();
  std::lock_guard<std::mutex> lock(l.mu);
  l.all.erase(std::find(l.all.begin(), l.all.end(), this));
}

void TelemetryLocks::set_device(device::SpanTiming* device) {
  std::lock_guard<std::mutex> lock(live_telemetries().mu);
  device_ = device;
}

void TelemetryLocks::lock_for_fork() {
  shutdown_mu.lock();  // a shutdown holds it while it takes the device's
  scopes_mu.lock();
  if (device_ != nullptr) device_->lock_for_fork();
}

void TelemetryLocks::unlock_after_fork() {
  if (device_ != nullptr) device_->unlock_after_fork();
  scopes_mu.unlock();
  shutdown_mu.unlock();
}

// Once a process, after the core's.
void install_fork_handlers() {
  static const bool installed = [] {
    detail::install_fork_handlers();
    ::pthread_atfork(&before_fork, &after_fork, &after_fork);
    return true;
  }();
  static_cast<void>(installed);
}

}  // namespace

struct Telemetry::Impl {
  const std::uint64_t instance = [] {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1);
  }();
  Config config;
  std::atomic<int> stop_signal{0};  // note_stop_signal's

  // The watch's thread notes the signal on the telemetry; a program that
  // saw it first (termination_signal) may shut down before that: the
  // process received it all the same.
  int stop_signal_received() const {
    const int noted = stop_signal.load();
    return noted != 0 ? noted : termination_signal();
  }
  Resource resource;
  std::string trace_file;
  std::shared_ptr<SpanExporter> exporter;
  detail::TelemetryCore core;
  // Device-timed spans; idle until a span asks for a device.
  std::unique_ptr<device::SpanTiming> device_timing;
  // Stable addresses; shared with the processor, whose thread may outlive
  // this object if an exporter hangs past the shutdown timeout.
  std::shared_ptr<std::deque<InstrumentationScope>> scopes =
      std::make_shared<std::deque<InstrumentationScope>>();
  bool shut_down = false;
  // Destroyed before the device timing it names.
  TelemetryLocks locks;
};

std::unique_ptr<Telemetry> Telemetry::create(const TelemetryOptions& options,
                                             const EnvLookup& env) {
  Config config = resolve_config(options, env);
  if (!config.enabled) return nullptr;
  install_fork_handlers();

  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  const Config& c = impl->config;
  impl->resource = build_resource(c);
  if (!c.exporting) {
    // Left out by the export filter: no file, no connection, no spans.
    impl->exporter = std::make_shared<DiscardExporter>();
  } else if (options.exporter_instance) {
    impl->exporter = options.exporter_instance;
  } else if (c.exporter == "file") {
    impl->trace_file = trace_file_path(c);
    impl->exporter = std::make_shared<OtlpJsonFileExporter>(impl->trace_file);
  } else if (c.exporter == "otlp") {
    OtlpHttpOptions otlp = c.otlp;
    if (!c.spool_dir.empty() && otlp.spool_path.empty()) {
      otlp.spool_path =
          c.spool_dir + "/" + c.run_id + "/spool-" +
          (c.rank ? "rank-" + std::to_string(*c.rank) : "pid-" + std::to_string(::getpid())) +
          ".otlp.jsonl";
    }
    // One export, every attempt and wait included, ends within
    // OTEL_BSP_EXPORT_TIMEOUT (0: no bound beyond the retry deadline).
    if (c.batch.export_timeout.count() > 0)
      otlp.retry_deadline = std::min(otlp.retry_deadline, c.batch.export_timeout);
    impl->exporter = std::make_shared<OtlpHttpExporter>(std::move(otlp));
  } else if (c.exporter == "console") {
    impl->exporter = OtlpJsonFileExporter::for_descriptor(STDOUT_FILENO, "stdout");
  } else {
    impl->exporter = std::make_shared<DiscardExporter>();
  }
  detail::refresh_clock_offset();
  impl->core.limits = c.span_limits;
  impl->core.sampler = c.sampler;
  impl->core.clock_skew = {c.test_clock_offset_ns, c.test_clock_drift_ppm * 1e-6,
                           detail::steady_now_ns()};
  impl->core.switches.bits.store(c.exporting ? c.span_groups.bits() : 0u,
                                 std::memory_order_relaxed);
  impl->core.processor =
      std::make_unique<BatchProcessor>(impl->exporter, impl->resource, c.batch, impl->scopes);
  impl->device_timing = std::make_unique<device::SpanTiming>(
      impl->core, device::SpanTimingOptions{c.device_max_pending, std::chrono::microseconds(500),
                                            std::chrono::milliseconds(c.device_anchor_ms)});
  impl->core.device = impl->device_timing.get();
  impl->locks.set_device(impl->device_timing.get());
  return std::unique_ptr<Telemetry>(new Telemetry(std::move(impl)));
}

Telemetry::Telemetry(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Telemetry::~Telemetry() { shutdown(); }

Tracer Telemetry::tracer(std::string_view name, std::string_view version) {
  std::lock_guard<std::mutex> lock(impl_->locks.scopes_mu);
  auto& scopes = *impl_->scopes;
  for (const auto& s : scopes)
    if (s.name == name && s.version == version)
      return Tracer(&impl_->core, &impl_->core.switches, &s);
  scopes.push_back({std::string(name), std::string(version)});
  return Tracer(&impl_->core, &impl_->core.switches, &scopes.back());
}

bool Telemetry::enabled(SpanGroup group) const { return span_groups().contains(group); }

SpanGroupSet Telemetry::span_groups() const {
  return SpanGroupSet(impl_->core.switches.bits.load(std::memory_order_relaxed));
}

void Telemetry::set_span_groups(SpanGroupSet groups) {
  if (!impl_->config.exporting) return;  // the export filter leaves this rank out
  impl_->core.switches.bits.store(groups.bits(), std::memory_order_relaxed);
}

std::uint64_t Telemetry::instance() const { return impl_->instance; }

std::int64_t Telemetry::now_unix_ns() const {
  return impl_->core.clock_skew.unix_ns(detail::steady_now_ns());
}

const Config& Telemetry::config() const { return impl_->config; }
const Resource& Telemetry::resource() const { return impl_->resource; }
const std::string& Telemetry::trace_file() const { return impl_->trace_file; }

bool Telemetry::flush(std::chrono::milliseconds timeout) {
  return impl_->core.processor->force_flush(timeout);
}

bool Telemetry::shutdown(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(impl_->locks.shutdown_mu);
  if (impl_->shut_down) return true;
  impl_->shut_down = true;
  // New spans from here on are not recorded.
  impl_->core.switches.bits.store(0, std::memory_order_relaxed);
  // A fork's child exports nothing (its spans open are the parent's too) and
  // does not wait for an export thread it does not have.
  if (impl_->core.processor->in_forked_child()) {
    impl_->core.device = nullptr;  // no lock: the parent's threads are not here
    return true;
  }
  const int stop_signal = impl_->stop_signal_received();
  impl_->core.truncate_open_spans(stop_signal ? signal_name(stop_signal) : std::string_view());
  // Device-timed spans still waiting for their device go to the processor
  // before it shuts down: resolved if the device gets there within a
  // share of the timeout, else with their host times, truncated.
  const auto started = std::chrono::steady_clock::now();
  impl_->device_timing->shutdown(std::min(timeout / 4, std::chrono::milliseconds(2000)));
  {
    std::lock_guard<detail::SpinLock> lock(detail::open_spans_lock());
    impl_->core.device = nullptr;
  }
  const auto left = std::max(std::chrono::milliseconds(0),
                             timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - started));
  const bool in_time = impl_->core.processor->shutdown(left);
  const SpanAccount account = SpanAccount::of(stats());
  if (account.exported != account.ended || account.truncated > 0) {
    const std::string who =
        impl_->config.rank ? "rank " + std::to_string(*impl_->config.rank) + ": " : "";
    std::fprintf(stderr, "lens: %sshutdown: %s\n", who.c_str(), account.describe().c_str());
  }
  return in_time;
}

bool Telemetry::shutdown() {
  // 0 (no export deadline) still ends: a shutdown never waits unbounded.
  const auto bound = impl_->config.batch.export_timeout;
  return shutdown(bound.count() > 0 ? bound : std::chrono::milliseconds(30000));
}

void Telemetry::note_stop_signal(int signo) { impl_->stop_signal.store(signo); }

int Telemetry::stop_signal() const { return impl_->stop_signal_received(); }

void SpanAccount::add(const SpanAccount& o) {
  ended += o.ended;
  exported += o.exported;
  spooled += o.spooled;
  if (spool_path.empty()) spool_path = o.spool_path;
  dropped_queue_full += o.dropped_queue_full;
  dropped_shutdown += o.dropped_shutdown;
  dropped_export_error += o.dropped_export_error;
  dropped_forked_child += o.dropped_forked_child;
  dropped_hold_full += o.dropped_hold_full;
  not_selected += o.not_selected;
  truncated += o.truncated;
  if (truncated_by.empty()) truncated_by = o.truncated_by;
}

std::string SpanAccount::describe() const {
  const auto n = [](std::uint64_t v) { return std::to_string(v); };
  std::string out = n(ended) + " spans: " + n(exported) + " exported, " + n(spooled) + " spooled";
  if (!spool_path.empty()) out += " (to " + spool_path + ")";
  if (not_selected > 0) out += ", " + n(not_selected) + " not selected (tail selection)";
  out += ", " + n(dropped()) + " dropped (" + n(dropped_queue_full) + " queue full, " +
         n(dropped_shutdown) + " shutdown, " + n(dropped_export_error) + " export error";
  if (dropped_forked_child > 0) out += ", " + n(dropped_forked_child) + " in a forked child";
  if (dropped_hold_full > 0) out += ", " + n(dropped_hold_full) + " no room in the hold";
  out += "), " + n(truncated) + " truncated";
  if (truncated > 0 && !truncated_by.empty()) out += " by " + truncated_by;
  return out;
}

SpanAccount SpanAccount::of(const TelemetryStats& s) {
  SpanAccount a;
  const ProcessorStats& p = s.processor;
  a.ended = p.ended();
  a.exported = p.exported;
  a.spooled = p.spooled;
  a.dropped_queue_full = p.dropped_queue_full;
  a.dropped_shutdown = p.dropped_at_shutdown;
  a.dropped_export_error = p.export_failed;
  a.dropped_forked_child = p.dropped_in_forked_child;
  a.dropped_hold_full = p.dropped_hold_full;
  a.not_selected = p.not_selected;
  a.truncated = s.spans_truncated;
  if (s.stop_signal != 0) a.truncated_by = signal_name(s.stop_signal);
  if (s.delivery) a.spool_path = s.delivery->spool_path;
  return a;
}

std::vector<std::string> Telemetry::mark_open_spans(std::string_view event,
                                                    std::string_view detail) {
  return impl_->core.mark_open_spans(event, detail);
}

void write_failure_record(Telemetry& telemetry, std::string_view who, std::string_view detail) {
  // Stopping on a signal, a process sees its peers stop too (a transfer or
  // collective fails): that is the stop, not a failure. Shutdown marks what
  // is open with the signal, and the program's stop line says the rest.
  if (termination_signal() != 0) return;
  const std::string prefix(who);
  for (const auto& line : telemetry.mark_open_spans("lens.failure", detail)) {
    const char* joint = line.starts_with("last span ended") ? ":" : " was in:";
    std::fprintf(stderr, "%s%s %s\n", prefix.c_str(), joint, line.c_str());
  }
}

TelemetryStats Telemetry::stats() const {
  TelemetryStats s;
  s.processor = impl_->core.processor->stats();
  s.spans_truncated = impl_->core.spans_truncated.load(std::memory_order_relaxed);
  s.stop_signal = impl_->stop_signal_received();
  s.delivery = impl_->exporter->delivery_stats();
  s.device = impl_->device_timing->stats();
  s.hold = impl_->core.processor->hold_stats();
  return s;
}

bool Telemetry::holds_steps() const { return config().tail_selection && config().exporting; }

void Telemetry::hold_step(std::uint64_t step, const SpanContext& step_span) {
  if (holds_steps() && step_span.valid() && step_span.sampled())
    impl_->core.processor->hold_step(step, step_span.trace_id);
}

void Telemetry::settle_steps(const std::vector<std::uint64_t>& keep,
                             const std::vector<std::uint64_t>& drop) {
  if (holds_steps()) impl_->core.processor->settle_steps(keep, drop);
}

namespace {
std::unique_ptr<Telemetry> g_global;
std::atomic<Telemetry*> g_global_ptr{nullptr};
}  // namespace

Telemetry* init(const TelemetryOptions& options) {
  install_fork_handlers();
  std::lock_guard<std::mutex> lock(g_global_mu);
  if (g_global) {
    g_global_ptr.store(nullptr);
    g_global.reset();
  }
  g_global = Telemetry::create(options);
  g_global_ptr.store(g_global.get());
  return g_global.get();
}

Telemetry* get_telemetry() { return g_global_ptr.load(std::memory_order_acquire); }

bool shutdown_telemetry(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(g_global_mu);
  if (!g_global) return true;
  g_global_ptr.store(nullptr);
  bool ok = g_global->shutdown(timeout);
  g_global.reset();
  return ok;
}

}  // namespace lens
