"""lens as an OpenTelemetry Python API provider (docs/opentelemetry-python.md).

Code instrumented with the OpenTelemetry API (``opentelemetry.trace``), as
Megatron-LM's is, records its spans through lens's C++ core, unchanged:

    OTEL_PYTHON_TRACER_PROVIDER=lens python train.py
    # or, in code, before anything sets a provider:
    import lens.otel; lens.otel.install()

With the variable set, the package's start-up hook (lens-otel.pth, in
site-packages beside it) installs lens before user code runs, so that a
provider set later (nemo-lens's setup_telemetry sets the SDK's) is refused by
the API, its resource taken into lens's and said once on stderr (_refuse).

Spans are current through ``opentelemetry.context``, so ``get_current_span``,
``use_span`` and the W3C propagator work with them; a span that is not
recorded (telemetry off, its group off, sampled out) is the API's own
``NonRecordingSpan`` with its context.

In a pipeline-parallel job the provider correlates the stages with no change
at the call sites: the step span (``megatron.train.iteration``, with
``megatron.iteration``; ``megatron.train_step``; or LENS_STEP_SPAN) opens in
the step's shared trace on every rank, its context derived from the step
number and a run key every rank holds (no collective); the warmup and
pre-1F1B receives of a later stage (its first P - s
``megatron.p2p.recv_forward`` of a step, or LENS_RECV_FORWARD_SPAN) link to
the source's step span, each wrapped in a ``megatron.pp.recv_forward.linked``
span as lens's own receives are; microbatch and p2p spans get the microbatch
ids and peers the schedule implies (1F1B is FIFO per direction).

The layout, first found: Megatron's resource attributes (``dl.rank``,
``dl.world_size``, ``dl.{tensor,context,expert,data,pipeline}_parallel.size``,
from a refused provider's resource, ``OTEL_RESOURCE_ATTRIBUTES`` or
``TracerProvider(resource=...)``) in Megatron's default rank order
tp-cp-ep-dp-pp (tp fastest); ``megatron.core.parallel_state`` when loaded;
``lens.distributed.init``'s, which wins when it was called. The run key is
the one ``lens.distributed.init`` agreed, else one derived from a run id
every rank holds (MEGATRON_OTEL_RUN_ID, NEMO_LENS_RUN_ID, SLURM_JOB_ID,
TORCHELASTIC_RUN_ID, or nemo.lens.run_uuid on the resource).

No call of the API raises into the caller or blocks it: a configuration
that cannot be set up is said once on stderr and leaves every span
non-recording; invalid attribute keys and values are dropped with the API's
warnings; a context that cannot be detached is logged, as the API logs it; a
forked child records nothing and says so once; the provider's locks are new
in a forked child.

Thread safety: spans may be started and ended from any thread; the per-step
counters of the schedule hand each caller a number of its own (their order is
the order the spans start in).
"""

import functools
import hashlib
import itertools
from urllib.parse import unquote as _unquote
import inspect
import logging
import os
import re
import sys
import threading

from opentelemetry import context as _context
from opentelemetry import trace as _trace
from opentelemetry.context import Context as _Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import (INVALID_SPAN, NonRecordingSpan, SpanKind, Status, StatusCode,
                                 TraceFlags, TraceState)
from opentelemetry.trace import SpanContext as OtelSpanContext
from opentelemetry.trace.propagation import _SPAN_KEY

import lens as _package
from . import _lens
from . import distributed as _distributed

__all__ = ["Span", "Tracer", "TracerProvider", "install", "layout_from_attributes"]

_logger = logging.getLogger("lens.otel")
# The API's own logger for a failed detach (opentelemetry.context).
_context_logger = logging.getLogger("opentelemetry.context")

# The span names the provider knows, as Megatron-LM upstream and the seed
# write them; the step and receive names can be set (LENS_STEP_SPAN,
# LENS_RECV_FORWARD_SPAN).
_STEP_NAMES = frozenset(filter(None, ("megatron.train.iteration", "megatron.train_step",
                                      os.environ.get("LENS_STEP_SPAN"))))
_RECV_FORWARD = os.environ.get("LENS_RECV_FORWARD_SPAN") or "megatron.p2p.recv_forward"
_LINKED_NAME = "megatron.pp.recv_forward.linked"
_ITERATION_KEYS = ("megatron.iteration", "dl.step")
_FORWARD = "megatron.microbatch.forward"
_BACKWARD = "megatron.microbatch.backward"
# p2p spans: (direction, counter, attribute, peer offset from this stage)
_P2P = {
    _RECV_FORWARD: ("forward", "recv_forward", "dl.microbatch_id.received", -1),
    "megatron.p2p.send_forward": ("forward", "send_forward", "dl.microbatch_id.sent", +1),
    "megatron.p2p.recv_backward": ("backward", "recv_backward", "dl.microbatch_id.received", +1),
    "megatron.p2p.send_backward": ("backward", "send_backward", "dl.microbatch_id.sent", -1),
}


def _group_of(name):
    """The lens span group a name belongs to (its on/off switch)."""
    if type(name) is not str:
        return "job"
    if name in _STEP_NAMES:
        return "step"
    if name.endswith("forward_backward"):
        return "forward_backward"
    if name.startswith("megatron.microbatch."):
        return "microbatch"
    if name.startswith(("megatron.p2p.", "megatron.pp.", "megatron.grads.", "megatron.tp.")):
        return "communication"
    if "optimizer" in name:
        return "optimizer"
    return "job"


_groups = {}  # name -> group, filled as names are met, up to _GROUPS_KEPT names
_GROUPS_KEPT = 4096


def _device_names(spec):
    """LENS_DEVICE_SPANS: comma-separated span names, a name ending in ``*``
    a prefix; empty: none. As (names, prefixes)."""
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    return (frozenset(e for e in entries if not e.endswith("*")),
            tuple(e[:-1] for e in entries if e.endswith("*")))


# The spans timed on the device when the process uses CUDA: Megatron's
# compute (its p2p spans stay on the host: they wait for the device).
_DEVICE_SPANS_DEFAULT = "megatron.microbatch.forward,megatron.microbatch.backward,megatron.layer.*"
_DEVICE_NAMES, _DEVICE_PREFIXES = _device_names(
    os.environ.get("LENS_DEVICE_SPANS", _DEVICE_SPANS_DEFAULT))
_device_timed = set()  # of the names met, those in LENS_DEVICE_SPANS


def _group_named(name):
    """_group_of, kept for the first _GROUPS_KEPT names met (a program that
    makes a name per call does not grow the cache without bound); a name
    LENS_DEVICE_SPANS takes is noted in _device_timed."""
    group = _group_of(name)
    if len(_groups) < _GROUPS_KEPT:
        _groups[name] = group
        if type(name) is str and (name in _DEVICE_NAMES or name.startswith(_DEVICE_PREFIXES)):
            _device_timed.add(name)
    return group


_cuda = None  # torch.cuda once the process is seen using CUDA (_note_cuda), else None


def _note_cuda():
    """Notes whether the process uses CUDA (torch.cuda initialised), until it
    does: at the provider's set-up and at every step span's start (Megatron
    initialises CUDA before its first step), so that a span outside a step
    pays nothing for it."""
    global _cuda
    if _cuda is not None or not (_DEVICE_NAMES or _DEVICE_PREFIXES):
        return
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            _cuda = torch.cuda
    except Exception:  # a torch without CUDA
        pass


def _device_stream():
    """The current CUDA stream's handle, to time a span on; None when it
    cannot be read. Callers test ``_cuda is not None and name in
    _device_timed`` first."""
    try:
        handle = _cuda.current_stream().cuda_stream
    except Exception:
        return None
    return handle if type(handle) is int and handle >= 0 else None


# ---------------------------------------------------------------- the layout


def _int_attribute(attributes, key):
    value = attributes.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _lens.ConfigError(f"lens.otel: resource attribute {key}={value!r} is not an integer")


def layout_from_attributes(attributes, order=None):
    """A rank's place from Megatron's resource attributes: a dict with rank,
    world_size, pp/dp/tp sizes, this rank's pp/dp/tp coordinates and its
    pipeline's first rank, or None when ``dl.rank`` is absent. ``order``
    lists the dimensions fastest first (None: Megatron's default tp-cp-ep-dp-pp).
    What does not fit raises lens.ConfigError naming it (the rule is the
    core's, lens/rank_order.h, as the importer of upstream traces uses it)."""
    rank = _int_attribute(attributes, "dl.rank")
    if rank is None:
        return None
    sizes = []
    for key in ("dl.tensor_parallel.size", "dl.context_parallel.size", "dl.expert_parallel.size",
                "dl.data_parallel.size", "dl.pipeline_parallel.size"):
        size = _int_attribute(attributes, key)
        sizes.append(1 if size is None else size)
    world = _int_attribute(attributes, "dl.world_size")
    from . import _analysis  # the rule's owner: the analysis part (rank_order.h)

    try:
        if order is None:
            return _analysis.place_rank(rank, -1 if world is None else world, sizes)
        return _analysis.place_rank(rank, -1 if world is None else world, sizes, order)
    except ValueError as error:
        raise _lens.ConfigError(str(error)) from None


def _resource_attributes():
    """OTEL_RESOURCE_ATTRIBUTES (values percent-decoded, as the SDK does), then
    each resource given to lens (install, TracerProvider) or taken from a
    provider it refused, later ones winning."""
    attributes = {}
    for item in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attributes[key.strip()] = _unquote(value.strip())
    for resource in _resources:
        attributes.update(resource)
    return attributes


def _attributes_of(resource):
    """A Resource's (or a dict's) attributes as a dict; {} for what has none."""
    if resource is None:
        return {}
    try:
        return dict(getattr(resource, "attributes", resource))
    except (TypeError, ValueError):
        return {}


# Run ids every rank of a job shares, first found wins: the settings nemo-lens
# reads, Slurm's job, torchrun's rendezvous (its default "none" is no id), and
# Megatron's run id on the resource (nemo.run.id is not one: nemo-lens makes a
# random one a process where none of these is set).
_RUN_ID_VARIABLES = ("MEGATRON_OTEL_RUN_ID", "NEMO_LENS_RUN_ID", "SLURM_JOB_ID",
                     "TORCHELASTIC_RUN_ID")
_RUN_UUID = "nemo.lens.run_uuid"


def _shared_run_id(attributes):
    """(run id, where it came from), or (None, None)."""
    for variable in _RUN_ID_VARIABLES:
        value = os.environ.get(variable, "").strip()
        if value and not (variable == "TORCHELASTIC_RUN_ID" and value == "none"):
            return value, variable
    value = attributes.get(_RUN_UUID)
    if value not in (None, ""):
        return str(value), _RUN_UUID
    return None, None


def _run_folder_name(run_id):
    """A run id as lens's run_id setting takes it (letters, digits, '-', '_',
    '.'): anything else becomes '-'."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in run_id)[:128]


def _layout_from_parallel_state(order):
    """This rank's place from Megatron's megatron.core.parallel_state, when the
    process loaded it and its groups are made: the ground truth in a Megatron
    process. None otherwise."""
    import sys

    state = sys.modules.get("megatron.core.parallel_state")
    if state is None:
        return None
    try:
        if not state.model_parallel_is_initialized():
            return None
        import torch.distributed as dist

        attributes = {
            "dl.rank": dist.get_rank(),
            "dl.world_size": dist.get_world_size(),
            "dl.tensor_parallel.size": state.get_tensor_model_parallel_world_size(),
            "dl.pipeline_parallel.size": state.get_pipeline_model_parallel_world_size(),
            "dl.data_parallel.size": state.get_data_parallel_world_size(),
        }
        for key, getter in (("dl.context_parallel.size", "get_context_parallel_world_size"),
                            ("dl.expert_parallel.size", "get_expert_model_parallel_world_size")):
            if hasattr(state, getter):
                attributes[key] = getattr(state, getter)()
        layout = layout_from_attributes(attributes, order)
        stage = state.get_pipeline_model_parallel_rank()
    except Exception as error:  # a half-made state: said, then the next source
        _say_once("parallel_state", f"lens.otel: megatron.core.parallel_state is loaded but "
                  f"its layout could not be read ({error}); not used")
        return None
    if layout is not None and layout["pp"] != stage:
        _say_once("parallel_state_order",
                  f"lens.otel: megatron.core.parallel_state puts this rank at pipeline stage "
                  f"{stage}, the rank order {order or 'tp-cp-ep-dp-pp'} at {layout['pp']}: set "
                  f"LENS_RANK_ORDER to the job's order")
    return layout


_said = set()


def _say_once(key, message):
    """One line on stderr, once a process for each key: what lens.otel
    decided that a person should know (logging may not be configured)."""
    if key in _said:
        return
    _said.add(key)
    import sys

    try:
        print(message, file=sys.stderr, flush=True)
    except Exception:
        pass


class _Rank:
    """This process's place and its step state, set up with the telemetry."""

    def __init__(self, layout, correlated):
        self.layout = layout
        self.correlated = correlated
        self.stage = layout["pp"] if layout else 0
        self.stages = layout["pp_size"] if layout else 1
        scope = _lens.config().get("trace_scope", "world")
        self.pipeline_source = layout["pipeline_source"] if layout else 0
        source = self.pipeline_source if scope == "pipeline" else 0
        self.is_source = layout is not None and layout["rank"] == source
        self.steps_started = 0
        self.step = None  # the current step's state


class _StepState:
    __slots__ = ("counters", "linked", "source_context", "application_links")

    def __init__(self, carrier):
        # The source's step span, which linked receives point at.
        self.source_context = carrier.context if carrier is not None else None
        # itertools.count: next() takes a number and moves on in one step
        # under the GIL, so a communication thread counting beside the
        # schedule's takes a number of its own.
        self.counters = {name: itertools.count() for name in (
            "forward", "backward", "recv_forward", "send_forward", "recv_backward",
            "send_backward")}
        self.linked = 0
        # The application opens linked receives itself (the seed page's
        # integration): lens links those and adds none of its own.
        self.application_links = False


_setup_lock = threading.Lock()
_setup_failure = None  # why the telemetry could not be set up, once found
_rank = None
_resources = []  # resources given to lens or taken from refused providers, in order


def _setup():
    """The telemetry and this rank's place, made at the first span (or by
    install); lens.init / lens.distributed.init called before are kept.
    The layout, first found: the resource (OTEL_RESOURCE_ATTRIBUTES, a
    resource given to lens or taken from a refused provider); Megatron's
    megatron.core.parallel_state; lens.distributed.init's."""
    global _rank, _setup_failure
    if _setup_failure is not None:
        _say_once("setup", f"lens.otel: spans are not recorded in this process: {_setup_failure}")
        return None
    with _setup_lock:
        if _rank is not None and _lens.is_initialized():
            return _rank
        if _setup_failure is not None:
            return None
        try:
            _note_cuda()
            return _set_up()
        except Exception as error:
            # Found once, said once; then every span is non-recording (the
            # API's own), never an exception in the training loop.
            _setup_failure = str(error)
            _say_once("setup", f"lens.otel: spans are not recorded in this process: {error}")
            return None


def _set_up():
    """_setup's work, under its lock."""
    global _rank
    attributes = _resource_attributes()
    order = os.environ.get("LENS_RANK_ORDER") or None
    layout = layout_from_attributes(attributes, order)
    source = "the resource" if layout is not None else None
    if layout is None:
        layout = _layout_from_parallel_state(order)
        source = "megatron.core.parallel_state" if layout is not None else None
    correlated = True
    if not _lens.is_initialized():
        options = {}
        # The provider was chosen: tracing is on unless the kill switch
        # says otherwise, and every group the code instruments is
        # recorded unless the spec narrows them.
        if not any(os.environ.get(v) for v in ("MEGATRON_OTEL_ENABLED", "NEMO_LENS_ENABLED")):
            options["enabled"] = True
        if not any(os.environ.get(v) for v in ("MEGATRON_OTEL_SPAN_GROUPS", "NEMO_LENS_SPAN_GROUPS")):
            options["span_groups"] = "all"
        # Every rank derives each step's context (no collective): the
        # run's resource says so, and lens check does not expect the
        # source's step span to open first.
        options["step_context"] = "derived"
        if layout is not None:
            options.update(rank=layout["rank"], world_size=layout["world_size"],
                           coordinates=(layout["pp"], layout["dp"], layout["tp"]))
        resource = {k: v for k, v in attributes.items()
                    if isinstance(v, (str, bool, int, float))}
        if _took_over_from_nemo_lens:
            # nemo-lens's export strategy, which records no span on the
            # ranks it leaves out: lens check names it beside them.
            resource[_EXPORT_STRATEGY_ATTRIBUTE] = next(
                (os.environ[v].strip() for v in ("MEGATRON_OTEL_EXPORT_STRATEGY",
                                                 "NEMO_LENS_EXPORT_STRATEGY")
                 if os.environ.get(v, "").strip()), "single_rank")
        if resource:
            options["resource_attributes"] = resource
        run_id, run_id_from = _shared_run_id(attributes)
        if run_id is not None:
            digest = hashlib.blake2b(run_id.encode(), digest_size=8, person=b"lens.otel").digest()
            options.update(run_id=_run_folder_name(run_id),
                           run_key=int.from_bytes(digest, "big") or 1)
        else:
            correlated = False
        _package.init(**options)
    if _distributed._layout is not None:
        layout = _distributed._layout  # with the run key lens.distributed.init agreed
        source = "lens.distributed.init"
        correlated = True
    if layout is not None and layout["pp_size"] > 1 and not correlated:
        _logger.warning(
            "lens.otel: no run id is shared by every rank (%s, or %s on the resource) and "
            "lens.distributed.init was not called: each rank's steps stay in traces of their "
            "own", ", ".join(_RUN_ID_VARIABLES), _RUN_UUID)
    if layout is None:
        _logger.info("lens.otel: no layout found (dl.rank and the parallel sizes on the resource "
                     "or in OTEL_RESOURCE_ATTRIBUTES, megatron.core.parallel_state, "
                     "lens.distributed.init): the process is traced as one stage")
    else:
        _logger.info("lens.otel: rank %d at stage %d of %d, from %s", layout["rank"],
                     layout["pp"], layout["pp_size"], source)
    _rank = _Rank(layout, correlated)
    return _rank


# ---------------------------------------------------------------- context

# The API's current context is a ContextVar holding an immutable Context
# (unless OTEL_PYTHON_CONTEXT chose another runtime): read and set it
# directly, as its own attach and detach do, a few calls fewer per span.
_runtime = _context._RUNTIME_CONTEXT
_var = _runtime._current_context if type(_runtime) is ContextVarsRuntimeContext else None


def _current_span(context=None):
    """trace.get_current_span."""
    if context is None:
        context = _var.get() if _var is not None else _context.get_current()
    span = context.get(_SPAN_KEY)
    if type(span) is Span or isinstance(span, _trace.Span):
        return span
    return INVALID_SPAN


def _attach(span):
    """context.attach(trace.set_span_in_context(span))."""
    if _var is None:
        return _context.attach(_trace.set_span_in_context(span))
    current = _var.get()
    values = dict(current)
    values[_SPAN_KEY] = span
    return _var.set(_Context(values))


def _detach(token):
    if _var is None:
        return _context.detach(token)
    try:
        _var.reset(token)
    except Exception:  # another context's token: as the API, logged, never raised
        _context.detach(token)


# ---------------------------------------------------------------- spans


def _otel_context(native, remote=False):
    """The API's SpanContext for a lens.SpanContext."""
    state = native.tracestate
    return OtelSpanContext(
        native.trace_id_int, native.span_id_int, remote,
        TraceFlags(native.trace_flags),
        TraceState.from_header([state]) if state else TraceState())


def _native_context(context):
    """A lens.SpanContext for the API's SpanContext."""
    state = context.trace_state.to_header() if context.trace_state else ""
    return _lens.SpanContext.from_ints(context.trace_id, context.span_id, int(context.trace_flags),
                                       context.is_remote, state)


_STATUS = {StatusCode.UNSET: "unset", StatusCode.OK: "ok", StatusCode.ERROR: "error"}

# ---------------------------------------------------------------- attributes
#
# Keys and values as the SDK takes them (opentelemetry.attributes): an
# invalid one is dropped with the API's warning, never raised into the
# caller. lens's core takes UTF-8: a lone surrogate (a file name decoded with
# surrogateescape) is written as U+FFFD.

_PLAIN = frozenset((str, int, float, bool))
_SURROGATE = re.compile("[\ud800-\udfff]")
_attributes_logger = logging.getLogger("opentelemetry.attributes")


def _text(text):
    """A str the core can take: lone surrogates replaced; anything else
    through str() (a name given as None, say)."""
    if type(text) is not str:
        text = "" if text is None else str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def _has_own_str(x):
    """Whether str(x) says more than object's default (the API's test for a
    key or value of a type it does not know)."""
    return type(x).__str__ is not object.__str__ or type(x).__repr__ is not object.__repr__


def _clean_value(value):
    """A value the core takes, or None when the SDK would drop it."""
    if type(value) in _PLAIN:
        return _text(value) if type(value) is str else value
    if isinstance(value, (bool, int, float)):  # subclasses (an IntEnum): their plain value
        return bool(value) if isinstance(value, bool) else (
            int(value) if isinstance(value, int) else float(value))
    if isinstance(value, str):
        return _text(str(value))
    if isinstance(value, (list, tuple)):
        items = [_clean_value(v) for v in value if v is not None]
        kinds = {bool if type(v) is bool else type(v) for v in items}
        if None in items or len(kinds) > 1 and kinds != {int, float}:
            _attributes_logger.warning(
                "Invalid type for attribute value: a sequence of mixed types; dropped")
            return None
        return items
    if not isinstance(value, (bytes, bytearray, dict)) and _has_own_str(value):
        # As the API: a type it does not know, through its own str().
        _attributes_logger.warning("Invalid type %s for attribute value; its str() is kept",
                                   type(value).__name__)
        return _text(str(value))
    _attributes_logger.warning(
        "Invalid type %s for attribute value. Expected one of bool, str, int, float or a "
        "sequence of those types; dropped (lens keeps no bytes or maps)", type(value).__name__)
    return None


def _clean_key(key):
    if isinstance(key, str) and key:
        return _text(key)
    _attributes_logger.warning("invalid key `%s`. must be non-empty string. Dropping key from "
                               "attributes.", key)
    return None


def _clean_attributes(attributes):
    """Any Mapping (a MappingProxyType, a BoundedAttributes) as a dict of
    what the core takes; {} for None or what is not a mapping."""
    if not attributes:
        return {}
    try:
        items = attributes.items()
    except Exception:
        _attributes_logger.warning("Invalid attributes %r: not a mapping; dropped",
                                   type(attributes))
        return {}
    clean = {}
    for key, value in items:
        pair = _start_pair(key, value)
        if pair is not None:
            clean[pair[0]] = pair[1]
    return clean


def _start_pair(key, value):
    """(key, value) as the SDK keeps them at a span's start, or None when it
    drops them (with the API's warning): a key that is not a str through
    str() when its type says how, as opentelemetry.attributes does. The C
    path calls this for what it does not take itself (span_binding.cc)."""
    if value is None:
        return None
    if not isinstance(key, str):
        if not key or not _has_own_str(key):
            _attributes_logger.warning("invalid attribute key `%s`. must be non-empty string. "
                                       "Dropping key from attributes.", key)
            return None
        _attributes_logger.warning("Invalid type `%s` for attribute key `%s`, must be a str.",
                                   type(key), key)
        key = str(key)
    key = _clean_key(key)
    if key is None:
        return None
    value = _clean_value(value)
    return None if value is None else (key, value)


_lens.set_attribute_cleaner(_start_pair)



def _set_attribute(native, key, value):
    key = _clean_key(key)
    value = _clean_value(value) if key is not None else None
    if value is None:
        return
    try:
        native.set_attribute(key, value)
    except Exception as error:  # an int beyond 64 bits in a list, say
        _attributes_logger.warning("attribute %s dropped: %s", key, error)


class Span(_trace.Span):
    """A recorded span of lens's core, as the API's Span.

    Its context is the core's; attributes, events, links, status and name
    go to the core's record, which is exported when the span ends."""

    # Defaults on the class: a span starts with two attributes set.
    _context_cache = None
    _native_cache = None
    _ended = False
    _status_set = False
    _on_end = None
    kind = SpanKind.INTERNAL

    def __init__(self, native, kind=SpanKind.INTERNAL, on_end=None):
        self._native = native
        if kind is not SpanKind.INTERNAL:
            self.kind = kind
        if on_end is not None:
            self._on_end = on_end

    @property
    def _native_context(self):
        if self._native_cache is None:
            self._native_cache = self._native.context
        return self._native_cache

    def get_span_context(self):
        if self._context_cache is None:
            self._context_cache = _otel_context(self._native_context)
        return self._context_cache

    def is_recording(self):
        return not self._ended

    def set_attribute(self, key, value):
        if self._ended or value is None:
            return
        if type(key) is str and key and type(value) in _PLAIN:
            try:
                self._native.set_attribute(key, value)
                return
            except Exception:
                pass  # a lone surrogate, an int beyond 64 bits: the general path
        _set_attribute(self._native, key, value)

    def set_attributes(self, attributes):
        if not self._ended:
            try:
                items = list(attributes.items())
            except Exception:
                _attributes_logger.warning("Invalid attributes %r: not a mapping; dropped",
                                           type(attributes))
                return
            for key, value in items:
                self.set_attribute(key, value)

    def add_event(self, name, attributes=None, timestamp=None):
        # The core stamps an event when it is added (a given timestamp is
        # not kept: docs/opentelemetry-python.md).
        if not self._ended:
            try:
                self._native.add_event(_text(name), _clean_attributes(attributes))
            except Exception as error:
                _logger.warning("lens.otel: event %r dropped: %s", name, error)

    def add_link(self, context, attributes=None):
        if not self._ended and context is not None and context.is_valid:
            try:
                self._native.add_link(_native_context(context), _clean_attributes(attributes))
            except Exception as error:
                _logger.warning("lens.otel: link dropped: %s", error)

    def update_name(self, name):
        if not self._ended:
            try:
                self._native.update_name(_text(name))
            except Exception as error:
                _logger.warning("lens.otel: name %r not taken: %s", name, error)

    def set_status(self, status, description=None):
        if self._ended:
            return
        if isinstance(status, Status):
            code, description = status.status_code, status.description
        else:
            code = status
        # As the SDK: OK is final; UNSET changes nothing.
        if code is StatusCode.UNSET or self._status_set:
            return
        self._native.set_status(_STATUS[code],
                                (description or "") if code is StatusCode.ERROR else "")
        self._status_set = code is StatusCode.OK

    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False):
        if self._ended:
            return
        import traceback

        event = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(
                traceback.format_exception(type(exception), exception, exception.__traceback__)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event.update(attributes)
        self._native.add_event("exception", event)

    # What `with tracer.start_span(...)` does with an exception that leaves
    # the block (record it, set ERROR), as start_span's flags said.
    _on_exception = (True, True)

    def __exit__(self, exc_type, exc_value, traceback):
        if exc_value is not None and isinstance(exc_value, Exception) and not self._ended:
            record, set_status = self._on_exception
            if record:
                self.record_exception(exc_value, escaped=True)
            if set_status:
                self.set_status(Status(StatusCode.ERROR,
                                       f"{type(exc_value).__name__}: {exc_value}"))
        self.end()

    def end(self, end_time=None):
        if self._ended:
            return
        self._ended = True
        if end_time is None:
            self._native.end()
        else:
            self._native.end_at(int(end_time))
        if self._on_end is not None:
            self._on_end()

    def __repr__(self):
        c = self._native_context
        return f"lens.otel.Span(trace_id=0x{c.trace_id}, span_id=0x{c.span_id})"


class Tracer(_trace.Tracer):
    """Starts spans in lens's core. Thread safety: any thread."""


    def __init__(self, name, version=None, schema_url=None, attributes=None):
        self.name, self.version, self.schema_url = name, version, schema_url
        self.attributes = attributes

    def start_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None, links=None,
                   start_time=None, record_exception=True, set_status_on_exception=True):
        span = self._start(name, context, kind, attributes, links, start_time, False)
        if type(span) is Span and not (record_exception and set_status_on_exception):
            span._on_exception = (record_exception, set_status_on_exception)
        return span

    def _shut_down(self):
        """After its provider's shutdown (a provider other than the installed
        one: the installed one's ends the telemetry itself), every span this
        tracer starts is non-recording: its start methods are replaced on the
        instance, so that a live tracer's cost no test."""

        def start_span(name, context=None, *args, **kwargs):
            return NonRecordingSpan(_current_span(context).get_span_context())

        def start_as_current_span(name, context=None, *args, **kwargs):
            return _trace.use_span(start_span(name, context), end_on_exit=True)

        self.start_span = start_span
        self.start_as_current_span = start_as_current_span

    def _start(self, name, context, kind, attributes, links, start_time, counted):
        """start_span; `counted`: the schedule's ids are in `attributes` already."""
        rank = _rank if _rank is not None else _setup()
        if rank is None:  # the telemetry could not be set up (said once)
            return NonRecordingSpan(_current_span(context).get_span_context())
        if type(name) is not str:
            name = _text(name)
        group = _groups.get(name)
        if group is None:
            group = _group_named(name)
        parent_span = _current_span(context)
        if type(parent_span) is Span:
            parent = parent_span._native_context
        else:
            sc = parent_span.get_span_context()
            parent = _native_context(sc) if sc.is_valid else None
        # A dict as it is (the C path converts what it holds: _start_pair);
        # any other Mapping as a cleaned copy.
        attrs = (attributes if type(attributes) is dict else _clean_attributes(attributes)) \
            if attributes else _EMPTY
        join = None
        on_end = None
        native_links = None
        if links:
            native_links = [(_native_context(l.context), dict(l.attributes) if l.attributes else None)
                            for l in links if l.context.is_valid]
        schedule = rank.step is not None and not counted and name in _SCHEDULE_NAMES
        if group == "step" or schedule:
            attrs = dict(attrs)  # the provider's attributes added to a copy
        if group == "step":
            _note_cuda()
            step = _step_number(next((attrs[k] for k in _ITERATION_KEYS if k in attrs), None))
            step = rank.steps_started if step is None else step
            rank.steps_started += 1
            carrier = None
            if rank.correlated and _lens.is_initialized():
                carrier = _lens.derive_step_carrier(step, reserved_here=rank.is_source,
                                                    pipeline_source=rank.pipeline_source)
            rank.step = _StepState(carrier)
            join, parent = carrier, None
            attrs.setdefault("dl.step", step)
            if rank.layout is not None:
                attrs.setdefault("dl.rank", rank.layout["rank"])
                attrs.setdefault("dl.pipeline_parallel.rank", rank.stage)
        elif name == _LINKED_NAME and rank.step is not None:
            # A linked receive the application opened (the seed page's
            # integration): linked to the source's step span lens derived,
            # whatever its carrier held (an empty carrier on the source, a
            # context of another provider's).
            rank.step.application_links = True
            source = rank.step.source_context
            if source is not None:
                native_links = [(source, None)]
        elif schedule:
            linked = _linked_receive(name, rank)
            microbatch = _schedule_ids(name, attrs, rank)
            if linked:
                # The warmup and pre-1F1B receive: wrapped in a linked span,
                # and linked itself, to the source's step span.
                source = rank.step.source_context
                rank.step.linked += 1
                on_end = _start(_LINKED_NAME, "communication", parent, 1,
                                {"dl.pipeline_parallel.rank": rank.stage,
                                 "dl.microbatch_id": microbatch},
                                [(source, None)], None, None).end
                native_links = (native_links or []) + [(source, None)]
        if start_time is not None and type(start_time) is not int:
            start_time = int(start_time)  # the API's is ns as an int; a float is taken too
        kind_ = 1 if kind is _INTERNAL else _KINDS[kind]
        stream = _device_stream() if _cuda is not None and name in _device_timed else None
        try:
            native = _start(name, group, parent, kind_, attrs, native_links, start_time, join,
                            stream)
        except (TypeError, ValueError):  # a name the core cannot take (a lone surrogate)
            native = _start(_text(name), group, parent, kind_, attrs, native_links, start_time,
                            join, stream)
        if not native.sampled:
            context_ = native.context
            if native.recording:
                native.end()  # sampled out: not exported, its context still passed on
            if on_end is not None:
                on_end()
            if context_ is not None:
                return NonRecordingSpan(_otel_context(context_))
            return NonRecordingSpan(parent_span.get_span_context())
        return Span(native, kind, on_end)

    def start_as_current_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None,
                              links=None, start_time=None, record_exception=True,
                              set_status_on_exception=True, end_on_exit=True):
        fast = None
        if (context is None and kind is _INTERNAL and not links and start_time is None
                and end_on_exit and _var is not None and _rank is not None
                and name not in _STEP_NAMES):
            # (a name that is not a str, attributes that are no dict: the C
            # path declines them, the general one converts them)
            group = _groups.get(name)
            if group is None:
                group = _group_named(name)
            fast = (name, group, attributes)
        return _CurrentSpan(self, (name, context, kind, attributes, links, start_time),
                            (record_exception, set_status_on_exception, end_on_exit), fast)


def _step_number(value):
    """The step a step span says (megatron.iteration, dl.step), or None when
    it says none the telemetry can use (then the steps are counted)."""
    if value is None:
        return None
    try:
        step = int(value)
    except (TypeError, ValueError):
        step = -1
    if 0 <= step < 1 << 63:
        return step
    _say_once("step_number", f"lens.otel: a step span says step {value!r}, not a number from 0 "
              f"to 2^63: its steps are counted instead")
    return None


def _linked_receive(name, rank):
    """Whether this span is a later stage's warmup or pre-1F1B receive of
    the step (its first P - s), which the provider links."""
    step = rank.step
    return (name == _RECV_FORWARD and rank.stage > 0 and step.source_context is not None
            and not step.application_links and step.linked < rank.stages - rank.stage)


def _schedule_ids(name, attrs, rank):
    """Adds the microbatch ids and peers the schedule implies to `attrs`
    (what the span says wins); returns the microbatch."""
    counters = rank.step.counters
    if name == _FORWARD or name == _BACKWARD:
        which = "forward" if name == _FORWARD else "backward"
        microbatch = next(counters[which])
        attrs.setdefault("dl.microbatch_id", microbatch)
        return microbatch
    direction, counter, key, offset = _P2P[name]
    microbatch = next(counters[counter])
    attrs.setdefault("dl.p2p.direction", direction)
    attrs.setdefault("dl.pipeline_parallel.peer_rank", rank.stage + offset)
    attrs.setdefault(key, microbatch)
    attrs.setdefault("dl.microbatch_id", microbatch)
    return microbatch


_EMPTY = {}
_start = _lens.start_otel_span
_fast_start = _lens.otel_fast_start
_fast_end = _lens.otel_fast_end
# Spans the provider adds the schedule's attributes to within a step.
_SCHEDULE_NAMES = frozenset({_FORWARD, _BACKWARD} | set(_P2P))
_KINDS = {kind: kind.value + 1 for kind in SpanKind}  # the API's kinds as OTLP's
_INTERNAL = SpanKind.INTERNAL


class _CurrentSpan:
    """start_as_current_span's result: a context manager (the span current
    inside the block) and a decorator of sync and async functions (a span
    per call). The span starts at __enter__, not before.

    The common case (a span under the current one, no links, start time or
    kind, no step or schedule name, ended on exit) starts and ends in C
    (otel_fast_start / otel_fast_end in span_binding.cc), with the same
    result as start_span and _attach; anything else, or what that path
    declines (a foreign or unsampled parent, a group off), goes through
    start_span."""

    __slots__ = ("_tracer", "_args", "_flags", "_fast", "_span", "_token", "_fast_entered")

    def __init__(self, tracer, args, flags, fast=None):
        self._tracer = tracer
        self._args = args  # start_span's (name, context, kind, attributes, links, start_time)
        self._flags = flags  # (record_exception, set_status_on_exception, end_on_exit)
        self._fast = fast  # (name, group, attributes) for the common case, else None

    def __enter__(self):
        fast = self._fast
        self._fast_entered = False
        rank = _rank
        if fast is not None and rank is None:
            fast = None  # shut down (or forked) since the span was asked for
        if fast is not None:
            name, group, attrs = fast
            counted = False
            if rank.step is not None and name in _SCHEDULE_NAMES:
                if _linked_receive(name, rank):
                    fast = None  # a linked receive: start_span wraps it
                else:
                    attrs = dict(attrs) if attrs else {}
                    _schedule_ids(name, attrs, rank)
                    counted = True
            if fast is not None:
                try:
                    got = _fast_start(name, group, attrs, _var, _SPAN_KEY, Span, _Context,
                                      _device_stream() if _cuda is not None
                                      and name in _device_timed else None)
                except Exception:  # what the C path cannot take (a lone surrogate)
                    got = None
                if got is not None:
                    self._fast_entered = True
                    self._span, self._token = got
                    return got[0]
                if counted:  # declined: the slow path, with the ids counted once
                    args = self._args
                    span = self._span = self._tracer._start(name, None, args[2], attrs, None,
                                                            None, True)
                    self._token = _attach(span)
                    return span
        span = self._span = self._tracer.start_span(*self._args)
        self._token = _attach(span)
        return span

    def __exit__(self, exc_type, exc, tb):
        span = self._span
        if exc_type is None and self._fast_entered:
            if _fast_end(_var, self._token, span) is False:
                # As the API's detach: logged, never raised into the caller.
                _context_logger.error("Failed to detach context")
            return False
        _detach(self._token)
        record, set_status, end_on_exit = self._flags
        if exc is not None and isinstance(exc, Exception) and span.is_recording():
            if record:
                span.record_exception(exc, escaped=True)
            if set_status:
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        if end_on_exit:
            span.end()
        return False

    def _again(self):
        return _CurrentSpan(self._tracer, self._args, self._flags, self._fast)

    def __call__(self, function):
        if inspect.iscoroutinefunction(function):
            @functools.wraps(function)
            async def traced_async(*args, **kwargs):
                with self._again():
                    return await function(*args, **kwargs)
            return traced_async

        @functools.wraps(function)
        def traced(*args, **kwargs):
            with self._again():
                return function(*args, **kwargs)
        return traced


class TracerProvider(_trace.TracerProvider):
    """lens's TracerProvider: what ``OTEL_PYTHON_TRACER_PROVIDER=lens`` loads.

    ``resource`` (an SDK Resource or a dict) adds Megatron's layout
    attributes to those of OTEL_RESOURCE_ATTRIBUTES. The telemetry starts
    at the first span, from the environment (docs/opentelemetry-python.md)."""

    def __init__(self, resource=None):
        attributes = _attributes_of(resource)
        if attributes:
            _resources.append(attributes)
        _guard()  # also when the API made this provider from the environment
        self._tracers = {}

    def get_tracer(self, instrumenting_module_name, instrumenting_library_version=None,
                   schema_url=None, attributes=None):
        key = (instrumenting_module_name, instrumenting_library_version, schema_url)
        tracer = self._tracers.get(key)
        if tracer is None:
            with _tracers_lock:
                tracer = self._tracers.setdefault(
                    key, Tracer(instrumenting_module_name, instrumenting_library_version,
                                schema_url, attributes))
        return tracer

    def force_flush(self, timeout_millis=30000):
        return _package.flush(timeout_millis / 1000.0)

    def shutdown(self):
        """Ends this provider. The installed one's ends the process's
        telemetry (spans after it are non-recording; nothing sets it up
        again); another's, only its own tracers."""
        global _setup_failure, _rank
        for tracer in list(self._tracers.values()):
            tracer._shut_down()
        if _trace._TRACER_PROVIDER is not self:
            return
        with _setup_lock:
            _setup_failure = "the tracer provider was shut down"
            _said.add("setup")  # as the SDK: spans after shutdown are dropped quietly
            _rank = None
        _package.shutdown()


_tracers_lock = threading.Lock()


def _after_fork_in_child():
    """A forked child starts with the locks free: a thread of the parent
    that held one at the fork does not exist in the child. It records no
    spans (the parent's telemetry, its files and its export thread, do not
    cross a fork), and says so once, at its first span."""
    global _setup_lock, _tracers_lock, _rank, _setup_failure
    _setup_lock = threading.Lock()
    _tracers_lock = threading.Lock()
    _rank = None
    if _setup_failure is None:
        _setup_failure = (f"this process is a fork of process {os.getppid()}: lens records no "
                          f"spans in a forked child (the parent's telemetry does not cross a "
                          f"fork); start the process with the spawn method to trace it")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _provider_name(provider):
    kind = type(provider)
    return f"{kind.__module__}.{kind.__qualname__}"


def _refuse(provider):
    """A provider set after lens's (nemo-lens's setup_telemetry sets the SDK's
    own): the API refuses it; lens takes its resource (Megatron's layout and
    run ids) into its own, and says so once."""
    global _took_over_from_nemo_lens
    attributes = _attributes_of(getattr(provider, "resource", None))
    name = _provider_name(provider)
    if "dl.rank" in attributes or "nemo.run.id" in attributes:
        _took_over_from_nemo_lens = True  # Megatron's resource, as nemo-lens builds it
    if attributes:
        late = _rank is not None
        if not late:
            _resources.append(attributes)
        shown = ", ".join(f"{k}={attributes[k]}" for k in sorted(attributes)
                          if k.startswith("dl.") or k in (_RUN_UUID, "nemo.run.id"))
        _say_once(("refused", name),
                  f"lens.otel: kept lens's tracer provider (OTEL_PYTHON_TRACER_PROVIDER=lens); "
                  f"refused {name}" + (
                      f" and took its resource ({shown or 'no dl.* attributes'})" if not late else
                      f"; its resource came after lens's first span and was not taken "
                      f"({shown}): set the provider up before the first span"))
    elif "NoOp" in type(provider).__name__:
        # nemo-lens's setup_telemetry sets a no-op provider, and turns every
        # span group off, on a rank its export strategy leaves out.
        _say_once(("refused", name),
                  f"lens.otel: kept lens's tracer provider; refused {name}: nemo-lens sets it "
                  f"where telemetry is off or its export strategy leaves this rank out (the "
                  f"default, single_rank, exports the last rank only), and then turns this "
                  f"rank's span groups off: set MEGATRON_OTEL_EXPORT_STRATEGY=all_ranks to "
                  f"record every rank")
    else:
        _say_once(("refused", name),
                  f"lens.otel: kept lens's tracer provider; refused {name} (it has no resource "
                  f"to take)")


_api_set_tracer_provider = _trace.set_tracer_provider
_took_over_from_nemo_lens = False
# semconv::kNemoLensExportStrategy, which lens check reads.
_EXPORT_STRATEGY_ATTRIBUTE = "lens.nemo_lens.export_strategy"


def _set_tracer_provider(tracer_provider):
    """trace.set_tracer_provider while lens is the provider: a later provider
    is refused by the API, as ever, and its resource taken into lens's."""
    current = _trace._TRACER_PROVIDER
    if (isinstance(current, TracerProvider) and tracer_provider is not current
            and not isinstance(tracer_provider, TracerProvider)):
        try:
            _refuse(tracer_provider)
        except Exception as error:  # never into the caller's set-up
            _say_once("refuse", f"lens.otel: could not read the refused provider: {error}")
    _api_set_tracer_provider(tracer_provider)


def _guard():
    """Routes the API's set_tracer_provider through _set_tracer_provider:
    callers that look it up at call time (``trace.set_tracer_provider``, as
    nemo-lens and the SDK's examples do) reach it."""
    if _trace.set_tracer_provider is not _set_tracer_provider:
        _trace.set_tracer_provider = _set_tracer_provider


def install(resource=None):
    """Makes lens the global tracer provider (trace.set_tracer_provider) and
    returns it; a provider set after it is refused, its resource taken into
    lens's (_refuse). If another provider was set first, raises RuntimeError
    naming it: the API allows one, and spans would go there instead."""
    current = _trace._TRACER_PROVIDER
    if isinstance(current, TracerProvider):
        if resource is not None:
            attributes = _attributes_of(resource)
            if attributes:
                _resources.append(attributes)
        _guard()
        return current
    if current is not None:
        raise RuntimeError(
            f"lens.otel.install: a tracer provider was set before lens's: "
            f"{_provider_name(current)}; the OpenTelemetry API "
            f"keeps the first one set. Install lens before anything calls "
            f"trace.set_tracer_provider, or set OTEL_PYTHON_TRACER_PROVIDER=lens instead")
    provider = TracerProvider(resource)
    _api_set_tracer_provider(provider)
    if _trace._TRACER_PROVIDER is not provider:
        raise RuntimeError("lens.otel.install: another tracer provider was set meanwhile: "
                           f"{type(_trace._TRACER_PROVIDER).__qualname__}")
    _guard()
    return provider


def start_up():
    """The interpreter's start-up hook (lens-otel.pth, installed with the
    package; it calls this only when OTEL_PYTHON_TRACER_PROVIDER=lens): lens
    is the provider before user code runs, so that a provider the code sets
    later (nemo-lens's setup_telemetry sets the SDK's) is refused and its
    resource taken. Never raises: a failure is one line on stderr."""
    try:
        install()
    except Exception as error:
        _say_once("start_up", f"lens.otel: OTEL_PYTHON_TRACER_PROVIDER=lens, but lens could not "
                  f"be installed at start-up: {error}")
