"""lens: pipeline-parallel trace correlation for OpenTelemetry, from Python.

The same core as lens's C++ library (one telemetry per process, shared with
any C++ code of the process that links liblens.so), with the names of the
reference integration:

    import lens
    lens.init()                      # from MEGATRON_OTEL_* / OTEL_* variables
    if lens.get_telemetry() is not None and pp_size > 1:
        carrier = lens.distributed.broadcast_trace_context(rank=dist.get_rank(), src_rank=0)
        lens.state.set_pp_trace_carrier(carrier)
    with lens.managed_span("megatron.train_step", group="step", **{"dl.step": step}):
        ...

A span of the ``step`` group opened after ``set_pp_trace_carrier`` joins
that step's shared trace: on the source rank it takes the span id the source
broadcast, so every later stage's linked span resolves to it.

``managed_span`` costs one set lookup when its group is off. The enabled
groups are read from the core at ``init``, ``set_span_groups`` and
``shutdown``; call ``refresh()`` after C++ code of the process changes them.
"""

from time import monotonic_ns as _monotonic_ns

from . import _lens
from ._lens import Carrier, CommError, ConfigError, Span, SpanContext, StepCheckError, __version__
# Live metrics and stragglers (docs/metrics.md).
from ._lens import LiveStragglerRule, MetricRegistry, MetricsEndpoint, StepMetrics
from ._lens import take_step_figures
# Tail selection (docs/tail-selection.md).
from ._lens import TailSelector, hold_step, holds_steps, settle_steps

__all__ = [
    "Carrier", "CommError", "ConfigError", "Span", "SpanContext", "StepCheckError", "Telemetry",
    "__version__",
    "LiveStragglerRule", "MetricRegistry", "MetricsEndpoint", "StepMetrics",
    "metrics_exporter_from_environment", "set_step_figures", "take_step_figures",
    "TailSelector", "hold_step", "holds_steps", "settle_steps",
    "current_span_context", "distributed", "flush", "get_telemetry", "init",
    "managed_span", "refresh", "set_span_groups", "settings", "shutdown", "state",
]

_KNOWN_GROUPS = frozenset(_lens.group_names())
_enabled = frozenset()
_telemetry = None
# Step figures (docs/metrics.md): while on, a span of a group that is off
# still times its figure; a group's figure when the span names none.
_figures = False
_GROUP_FIGURES = _lens.group_step_figures()
_FIGURES = frozenset(_lens.step_figure_names())


class Telemetry:
    """The process's telemetry, as ``get_telemetry()`` returns it while initialised."""

    __slots__ = ()

    def enabled(self, group):
        if group not in _KNOWN_GROUPS:
            raise ValueError(f"lens: unknown span group {group!r}")
        return group in _enabled

    @property
    def span_groups(self):
        return sorted(_enabled)

    @property
    def trace_file(self):
        """The OTLP JSON lines file this process writes, or '' if none."""
        return _lens.trace_file()

    @property
    def config(self):
        return _lens.config()

    def stats(self):
        return _lens.stats()

    def flush(self, timeout=30.0):
        return _lens.flush(timeout)

    def __repr__(self):
        return f"<lens.Telemetry groups={','.join(self.span_groups)} file={self.trace_file!r}>"


def refresh():
    """Re-reads whether telemetry is initialised and which groups are on."""
    global _enabled, _telemetry, _figures
    _enabled = frozenset(_lens.enabled_groups())
    _figures = _lens.step_figures_on()
    _telemetry = Telemetry() if _lens.is_initialized() else None


def init(**options):
    """Initialises the process's telemetry from the environment and options.

    Options (all keyword, all optional, each overriding its variable; None
    leaves it to the variable): every setting of lens's settings table that
    code can give, by its name (``lens.settings()`` lists them with their
    variables and what they accept): enabled, span_groups, exporter, run_id,
    service_name, rank, world_size, trace_dir, trace_file, collective_timeout
    (durations in seconds), trace_scope, step_context, the tail selection's
    and the clock sync's settings, and more. Besides them: coordinates (this
    rank's (pp, dp, tp), which LENS_EXPORT_FILTER selects on; a rank it
    leaves out records nothing but still takes part in broadcasts),
    test_clock_offset_us and test_clock_drift_ppm (a TEST AID that skews this
    process's span clock, so that clock alignment can be tried on one host:
    docs/clock-alignment.md). With
    LENS_TRACE_SCOPE=pipeline, pass each pipeline group to
    broadcast_trace_context (src_rank: its first stage's global rank): each
    replica's step spans then share a trace, linked to global rank 0's. Returns the Telemetry,
    or None when telemetry is disabled. Raises ConfigError (a ValueError) on
    an invalid setting, naming the setting and what it accepts, and
    TypeError on a keyword that is no setting.
    """
    try:
        _lens.init(**options)
    finally:
        refresh()
    return _telemetry


def settings():
    """The settings table: one dict per setting, with its ``option`` (the
    keyword lens.init takes; None for a variable only), its ``variables``
    (the first one set wins), its ``kind``, what it ``accepted`` and whether
    it is ``job_wide`` (agreed at start-up by lens.distributed.init)."""
    return _lens.settings()


def get_telemetry():
    """The Telemetry, or None when not initialised or disabled: the same on every rank."""
    return _telemetry


def set_span_groups(spec):
    """Switches span groups at run time, e.g. "per_step,microbatch"."""
    _lens.set_span_groups(spec)
    refresh()


def flush(timeout=30.0):
    return _lens.flush(timeout)


def shutdown(timeout=None):
    """Ends open spans (truncated), exports what is queued and stops export.

    Within ``timeout`` seconds (default: OTEL_BSP_EXPORT_TIMEOUT, 30 s);
    past it, what is left goes to the spool (LENS_SPOOL_DIR) or is dropped
    and counted. Each rank says on stderr where every span went when not
    every one was exported (stats()["account"] says it too).
    """
    try:
        return _lens.shutdown(timeout)
    finally:
        refresh()


def watch_termination(then="exit", signals=(), shutdown_timeout=None):
    """Opt-in: SIGTERM and SIGINT (or ``signals``) become a flush of telemetry.

    The C++ helper (lens/termination.h): its handler only records the signal
    and wakes a thread of lens, which does the work, and chains to the
    handler that was there (Python's own SIGINT handler still raises
    KeyboardInterrupt). ``then="exit"``: for a signal left at its default
    action, the thread shuts telemetry down (open spans end truncated,
    marked lens.stopped_by) and the process ends as the signal would (exit
    status 143 for SIGTERM). ``then="continue"``: it flushes, and the
    program reads termination_signal() at a safe point, stops and shuts
    down. A second signal ends the process at once. Install it after the
    program's own signal.signal() calls (a later one replaces it). Returns
    False if a watch is already installed.
    """
    return _lens.watch_termination(then, list(signals), shutdown_timeout)


def unwatch_termination():
    """Restores the signal handlers watch_termination replaced."""
    _lens.unwatch_termination()


def termination_signal():
    """The first watched signal received (0: none): a step loop's stop test."""
    return _lens.termination_signal()


def current_span_context():
    """The current span's SpanContext on this thread, or None."""
    return _lens.current_span_context()


class _NoSpan:
    """What managed_span gives for a group that is off: every call is a no-op."""

    __slots__ = ()
    recording = False
    context = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set_attribute(self, key, value):
        pass

    def add_event(self, name, attributes=None):
        pass

    def add_link(self, context, attributes=None):
        pass

    def set_status(self, code, message=""):
        pass

    def end(self):
        pass


_NO_SPAN = _NoSpan()


class _TimedSpan(_NoSpan):
    """A span of a group that is off, timed for its step figure (two clock reads)."""

    __slots__ = ("_figure", "_started")

    def __init__(self, figure):
        self._figure = figure
        self._started = None

    def __enter__(self):
        self._started = _monotonic_ns()
        return self

    def __exit__(self, *exc):
        self.end()
        return False

    def end(self):
        if self._started is not None:
            _lens.add_step_figure(self._figure, _monotonic_ns() - self._started)
            self._started = None


def set_step_figures(on):
    """Step figures on or off for the process (docs/metrics.md): while on, every span
    that counts toward a figure (compute, p2p_wait, p2p_send, all_reduce, optimizer)
    adds its time to its thread's totals, recorded or not; ``take_step_figures()``
    returns them (``{"compute": {"seconds": s, "spans": n}, ...}``) and starts again."""
    global _figures
    _lens.set_step_figures(bool(on))
    _figures = bool(on)


def metrics_exporter_from_environment(registry):
    """With OTEL_METRICS_EXPORTER=otlp, an exporter sending ``registry`` to
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/metrics)
    every OTEL_METRIC_EXPORT_INTERVAL ms, with the telemetry's resource; call its
    ``shutdown()`` at the end for the last totals. Otherwise None."""
    return _lens.metrics_exporter_from_environment(registry)


def _stream_handle(stream):
    """A CUDA stream's handle: a torch.cuda.Stream's ``cuda_stream``, or an int."""
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"lens: stream= takes a torch.cuda.Stream or a stream handle (int), "
                        f"not {type(stream).__name__}")
    return handle


def managed_span(name, group, stream=None, figure=None, **attributes):
    """A span as a context manager: current inside the block, ended on exit.

    ``group`` is a span group name ("step", "forward_backward",
    "communication", ...). When the group is off (or telemetry is not
    initialised) this returns a shared no-op object. An exception leaving the
    block is recorded on the span (an "exception" event, status error) and
    propagates.

    ``stream`` (a ``torch.cuda.Stream``, e.g. ``torch.cuda.current_stream()``,
    or a raw stream handle) times the span on the device: its start and end
    are where the GPU reached them on that stream, not when Python launched
    the work (docs/device-time.md). Without a CUDA runtime it is timed on
    the host, as without it.

    ``figure`` names the step figure the span counts toward while step
    figures are on (``set_step_figures``): "p2p_wait", "p2p_send",
    "all_reduce", ...; unset, a ``microbatch`` span's is "compute" and an
    ``optimizer`` span's "optimizer". A span of a group that is off is then
    still timed.
    """
    if figure is not None and figure not in _FIGURES:
        raise ValueError(f"lens: unknown step figure {figure!r} (valid: {', '.join(sorted(_FIGURES))})")
    if group in _enabled:
        join = state._take_step_carrier() if group == "step" else None
        if stream is None and figure is None:
            return _lens.start_span(name, group, attributes, join)
        return _lens.start_span(name, group, attributes, join,
                                None if stream is None else _stream_handle(stream), figure)
    if group in _KNOWN_GROUPS:
        if _figures:
            counted = figure or _GROUP_FIGURES.get(group)
            if counted is not None:
                return _TimedSpan(counted)
        return _NO_SPAN
    raise ValueError(f"lens: unknown span group {group!r} (valid: {', '.join(sorted(_KNOWN_GROUPS))})")


from . import distributed, state  # noqa: E402  (they import this module)

refresh()
