/// \file
/// Span: a RAII, move-only handle to a span being recorded.
///
/// A Span is obtained from Tracer::start_span. A default-constructed Span, or
/// one started for a disabled group, records nothing and every call on it is a
/// cheap no-op, so instrumentation never needs its own "if enabled" around
/// attribute calls. end() (or the destructor) timestamps the span and hands it
/// to the telemetry's processor; after that the handle is empty.
///
/// CurrentSpanScope makes a span the thread's current span: spans started on that thread
/// without an explicit parent become its children.
///
/// Thread safety: a Span is used by one thread at a time (it may move between
/// threads). Spans still open when their Telemetry shuts down are ended by the
/// shutdown and exported with nemo.span.truncated=true; the handle then only
/// releases its memory. Their owners may go on changing them while another
/// thread shuts the Telemetry down or writes a failure record: those read
/// each open span while its owner is kept out (a change waits for that
/// read, which takes microseconds).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "lens/attribute.h"
#include "lens/span_context.h"
#include "lens/span_record.h"
#include "lens/step_figures.h"

namespace lens {

namespace detail {
struct LiveSpan;
}

/// How a span starts. The defaults give an INTERNAL span whose parent is the
/// thread's current span (see CurrentSpanScope), or a new trace if there is none.
struct StartOptions {
  SpanKind kind = SpanKind::kInternal;
  /// Explicit parent (local or remote). Takes precedence over the current span.
  std::optional<SpanContext> parent;
  /// Start a root span: ignore the current span.
  bool root = false;
  /// A root span in a context decided before it opened (the step protocol
  /// opens every rank's step span in the step's shared context this way): its
  /// trace id (a fresh one when invalid), its trace flags as they are (the
  /// sampler is not asked), its tracestate, and its span id when valid (the
  /// source rank's step span takes the id it reserved and broadcast), else a
  /// fresh one. Implies `root`. Without it a root span gets fresh ids and the
  /// sampler's decision; a child inherits its parent's flags (with a
  /// parent-based sampler) and tracestate.
  std::optional<SpanContext> context;
  /// Links known at start (the sampler of a later version may read them).
  std::vector<SpanLink> links;
  /// A start in the past, on the span clock (Telemetry::now_unix_ns): for a
  /// span whose ids are known only after what it covers began (the clock
  /// sync's). Unset: now.
  std::optional<std::int64_t> start_time_unix_ns;
  /// Time the span on a device (docs/device-time.md): the CUDA stream
  /// (cudaStream_t; nullptr is the legacy default stream) its work is
  /// launched on. Its start and end are then where the device reached them
  /// on that stream, put on the span clock once the device has got there
  /// (the span is exported then, not when it ends), with the host's launch
  /// times kept as lens.host.start_unix_ns and lens.host.end_unix_ns. No
  /// CUDA runtime, an unsampled span, or no free event: timed on the host,
  /// as without it.
  std::optional<void*> device_stream;
  /// The step figure the span counts toward (step_figures.h); unset: its
  /// group's (default_step_figure).
  std::optional<StepFigure> figure;
};

class Span {
 public:
  Span() noexcept = default;
  Span(Span&& other) noexcept
      : live_(std::exchange(other.live_, nullptr)), metered_(std::exchange(other.metered_, 0)) {}
  Span& operator=(Span&& other) noexcept {
    if (this != &other) {
      end();
      live_ = std::exchange(other.live_, nullptr);
      metered_ = std::exchange(other.metered_, 0);
    }
    return *this;
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { end(); }

  /// True while the span is being recorded (started for an enabled group and
  /// not yet ended).
  bool recording() const noexcept { return live_ != nullptr; }

  /// The span's context; an invalid (all-zero) context when not recording.
  SpanContext context() const;

  /// Sets (or replaces) an attribute. Past the attribute limit new keys are
  /// dropped and counted.
  void set_attribute(std::string_view key, bool value) {
    if (live_) set_bool(key, value);
  }
  template <typename T>
  requires(std::is_integral_v<T> &&
           !std::is_same_v<T, bool>) void set_attribute(std::string_view key, T value) {
    if (live_) set_int(key, static_cast<std::int64_t>(value));
  }
  void set_attribute(std::string_view key, double value) {
    if (live_) set_double(key, value);
  }
  void set_attribute(std::string_view key, std::string_view value) {
    if (live_) set_string(key, value);
  }
  void set_attribute(std::string_view key, const char* value) {
    if (live_) set_string(key, value);
  }
  void set_attribute(std::string_view key, const std::string& value) {
    if (live_) set_string(key, value);
  }
  void set_attribute(std::string_view key, AttributeValue value) {
    if (live_) set_value(key, std::move(value));
  }

  /// Adds a timestamped event. Past the event limit events are dropped and
  /// counted.
  void add_event(std::string_view name, Attributes attributes = {});

  /// Adds a link to another span's context. An invalid context is ignored.
  void add_link(const SpanContext& context, Attributes attributes);
  void add_link(const SpanContext& context) {
    if (live_) add_bare_link(context);
  }

  void set_status(StatusCode code, std::string_view message = {});
  void update_name(std::string_view name);

  /// Ends the span at `end_unix_ns`, a time on the span clock
  /// (Telemetry::now_unix_ns) no earlier than its start (an earlier one
  /// ends it at its start). Not for device-timed spans (their end is where
  /// the device got to). Further calls are no-ops.
  void end_at(std::int64_t end_unix_ns);

  /// Ends the span now. Further calls are no-ops.
  void end() {
    if (live_)
      end_recording();
    else if (metered_) [[unlikely]]
      end_metering();
  }

 private:
  friend class Tracer;
  friend class CurrentSpanScope;
  explicit Span(detail::LiveSpan* live) noexcept : live_(live) {}
  // A span that is not recorded: timed for its step figure when step
  // figures are on and it counts toward one, else nothing at all.
  static Span unrecorded(StepFigure figure) noexcept {
    Span s;
    if (figure != StepFigure::kNone && detail::g_step_figures.load(std::memory_order_relaxed))
        [[unlikely]]
      s.metered_ = start_metering(figure);
    return s;
  }
  static std::uint64_t start_metering(StepFigure figure) noexcept;
  void end_metering() noexcept;

  void set_bool(std::string_view key, bool value);
  void set_int(std::string_view key, std::int64_t value);
  void set_double(std::string_view key, double value);
  void set_string(std::string_view key, std::string_view value);
  void set_value(std::string_view key, AttributeValue value);
  void add_bare_link(const SpanContext& context);
  void end_recording();

  detail::LiveSpan* live_ = nullptr;
  // A span timed only for its step figure: its start on the monotonic clock
  // (ns) shifted left by 3, the figure in the low bits; 0: not timed.
  std::uint64_t metered_ = 0;
};

/// Makes a span the current span of this thread until the scope object is
/// destroyed. They nest; destroy them in reverse order of creation. One over
/// an empty Span leaves the current span unchanged. (Not to be confused with
/// StepScope, which opens a pipeline step, or InstrumentationScope, the OTLP
/// name of a tracer.)
class CurrentSpanScope {
 public:
  explicit CurrentSpanScope(const Span& span);
  ~CurrentSpanScope();
  CurrentSpanScope(const CurrentSpanScope&) = delete;
  CurrentSpanScope& operator=(const CurrentSpanScope&) = delete;

 private:
  std::optional<SpanContext> previous_;
  bool active_ = false;
};

/// The current span's context on this thread, or an invalid context.
SpanContext current_span_context();

}  // namespace lens
