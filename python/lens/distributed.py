"""The step protocol's collectives over torch.distributed.

broadcast_trace_context is a collective: every rank of the group calls it,
once per step, in the same order relative to the group's other collectives.
Gate it on something that is the same on every rank (``lens.get_telemetry()
is not None`` and the pipeline-parallel size), never on whether a rank
exports.
"""

import datetime
import importlib
import itertools
import sys
import threading

from . import _lens

_package = importlib.import_module(__package__)
_broadcast_count = itertools.count()
_count_lock = threading.Lock()


def _frame_device(group):
    import torch
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_trace_context(rank, src_rank=0, group=None, step=None):
    """Broadcasts the source rank's step context to every rank of ``group``.

    rank and src_rank are global ranks, as torch.distributed.broadcast takes
    them. On the source, lens reserves the step's context (a fresh trace id,
    the span id its step span will take, the sampler's decision); ONE
    broadcast of the fixed 256-byte frame, as a uint8 tensor on the device the
    backend needs, carries it. ``step`` is the step number carried in the
    frame (default: how many broadcasts this process made before, the same
    on every rank).

    Returns the decoded lens.Carrier on every rank, or None when the frame
    says "no context" (the source has no telemetry) or does not decode
    (counted and warned about). A broadcast that fails or outlives the
    collective timeout (LENS_COLLECTIVE_TIMEOUT_MS) leaves a ``lens.failure``
    event on this rank's open spans, logs them, and raises: a broken group
    cannot be papered over without deadlocking later collectives.
    """
    import torch
    import torch.distributed as dist

    with _count_lock:
        count = next(_broadcast_count)
    step = count if step is None else int(step)
    source = rank == src_rank
    local = _lens.reserve_step_carrier(step) if source and _lens.is_initialized() else None
    frame = _lens.encode_carrier(local)
    tensor = torch.frombuffer(bytearray(frame), dtype=torch.uint8).to(_frame_device(group))
    timeout = _lens.config().get("collective_timeout", 300.0)
    try:
        work = dist.broadcast(tensor, src=src_rank, group=group, async_op=True)
        work.wait(timeout=datetime.timedelta(seconds=timeout))
    except Exception as error:
        detail = f"broadcast_trace_context (step {step}, source rank {src_rank}) failed: {error}"
        for line in _lens.mark_open_spans("lens.failure", detail):
            where = "" if line.startswith("last span ended") else " was in"
            print(f"lens: rank {rank}{where}: {line}", file=sys.stderr)
        raise
    received = bytes(tensor.cpu().tolist())
    return _lens.accept_carrier_frame(received, expected_step=step, reserved_here=source)


def create_linked_span(name, remote_carrier=None, **attributes):
    """A started span, child of the current span, with one Link to the carrier's context.

    For the warmup and pre-1F1B recv_forward of non-first stages: start it
    before the receive and end() it after (or use it in a ``with`` block). It
    belongs to the ``communication`` group: when that group is off this
    returns a no-op span. Without a valid carrier the span is still created,
    without a link, and counted.
    """
    if "communication" not in _package._enabled:
        return _package._NO_SPAN
    return _lens.create_linked_span(name, remote_carrier, attributes)
