"""The nemo-lens helpers' call shapes, over lens (docs/opentelemetry-python.md).

Code written against nemo-lens 0.1.0's helpers runs on lens by swapping one
import (``from nemo.lens... import managed_span`` becomes ``from lens.nemo
import managed_span``): the same names, the same parameter order
(``managed_span(group, name, ...)``, where lens's own is ``managed_span(name,
group)``). Spans go through the OpenTelemetry tracer given (default: the
global provider's ``nemo.lens`` tracer, lens's when it is installed); a group
that is off (MEGATRON_OTEL_SPAN_GROUPS) costs one set lookup and yields the
API's invalid span.

Thread safety: as the OpenTelemetry API.
"""

import contextlib
import functools
import inspect

from opentelemetry import propagate as _propagate
from opentelemetry import trace as _trace
from opentelemetry.trace import INVALID_SPAN, Link, NonRecordingSpan

import lens as _package
from . import _lens
from . import distributed as _distributed
from . import otel as _otel

__all__ = ["broadcast_trace_context", "create_linked_span", "is_span_group_enabled",
           "managed_span", "safe_set_span_attributes", "span_cm", "trace_fn"]

_TRACER_NAME = "nemo.lens"


def _tracer(tracer):
    return tracer if tracer is not None else _trace.get_tracer(_TRACER_NAME)


def is_span_group_enabled(group):
    """Whether spans of ``group`` are recorded ("step", "communication", ...).
    An unknown name raises ValueError listing the valid ones."""
    if group not in _package._KNOWN_GROUPS:
        raise ValueError(f"lens: unknown span group {group!r} "
                         f"(valid: {', '.join(sorted(_package._KNOWN_GROUPS))})")
    if not _lens.is_initialized() and isinstance(_trace.get_tracer_provider(), _otel.TracerProvider):
        _otel._setup()
    return group in _package._enabled


def safe_set_span_attributes(span, attributes=None, **more):
    """Sets attributes on ``span`` (None, a finished or a non-recording span
    included), never raising: telemetry must not break training."""
    if span is None:
        return
    try:
        if attributes:
            span.set_attributes(dict(attributes))
        if more:
            span.set_attributes(more)
    except Exception:  # a bad value is dropped, as the SDK drops it
        pass


def _start(tracer, group, name, attributes, record_exception=True):
    if group is not None and not is_span_group_enabled(group):
        return contextlib.nullcontext(INVALID_SPAN)
    return _tracer(tracer).start_as_current_span(name, attributes=attributes or None,
                                                 record_exception=record_exception)


def managed_span(group, name, tracer=None, **attrs):
    """A span of ``group`` named ``name``, current inside the ``with`` block
    and ended on exit; an exception leaving the block is recorded and sets
    the status to error."""
    return _start(tracer, group, name, attrs)


def span_cm(name, tracer=None, record_exception=True, **attrs):
    """A span named ``name`` whatever the groups, as managed_span."""
    return _start(tracer, None, name, attrs, record_exception)


def trace_fn(group, name, tracer=None):
    """Decorates a function (sync or async) so each call is a span of
    ``group``."""
    def wrap(function):
        if inspect.iscoroutinefunction(function):
            @functools.wraps(function)
            async def traced_async(*args, **kwargs):
                with _start(tracer, group, name, None):
                    return await function(*args, **kwargs)
            return traced_async

        @functools.wraps(function)
        def traced(*args, **kwargs):
            with _start(tracer, group, name, None):
                return function(*args, **kwargs)
        return traced
    return wrap


def broadcast_trace_context(rank, src_rank=0):
    """The step's context from ``src_rank`` to every rank: a collective, as
    lens.distributed.broadcast_trace_context (one 256-byte frame)."""
    return _distributed.broadcast_trace_context(rank, src_rank=src_rank)


def _remote_span_context(remote_context, remote_carrier):
    """The API's SpanContext to link to, from what the caller has."""
    if remote_carrier is not None:
        if isinstance(remote_carrier, _lens.Carrier):
            return _otel._otel_context(remote_carrier.context, remote=True)
        if isinstance(remote_carrier, dict):  # W3C headers, as propagate.inject writes them
            remote_context = _propagate.extract(remote_carrier)
        else:
            raise TypeError("create_linked_span: remote_carrier takes a lens.Carrier or a dict of "
                            f"W3C headers, not {type(remote_carrier).__name__}")
    if remote_context is None:
        return None
    if isinstance(remote_context, _trace.SpanContext):
        return remote_context
    return _trace.get_current_span(remote_context).get_span_context()  # a Context


def create_linked_span(tracer, name, remote_context=None, remote_carrier=None, **attrs):
    """A started span (end() it after the receive), child of the current
    span, with one Link to the remote context (a SpanContext, a Context, a
    lens.Carrier or W3C headers). Off unless the ``communication`` group is
    on; without a valid remote context, a span without a link."""
    if not is_span_group_enabled("communication"):
        return NonRecordingSpan(_trace.get_current_span().get_span_context())
    remote = _remote_span_context(remote_context, remote_carrier)
    links = [Link(remote)] if remote is not None and remote.is_valid else None
    return _tracer(tracer).start_span(name, attributes=attrs or None, links=links)
