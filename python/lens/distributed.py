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
import threading

from . import _lens

_package = importlib.import_module(__package__)
_broadcast_count = itertools.count()
_count_lock = threading.Lock()
# This rank's place as init was told it (lens.otel reads it): rank,
# world_size, pp_size, pp, dp, tp, pipeline_source; None before init.
_layout = None


def _layout_of(rank, world_size, pp_size, coordinates):
    """The layout init records: with coordinates (pp, dp, tp) as given, else
    by Megatron's default order (the analysis part's rule, rank_order.h),
    the ranks of a stage as its data-parallel ones; pipeline stages the
    slowest dimension either way."""
    per_stage = world_size // pp_size
    if coordinates is None:
        from . import _analysis

        return _analysis.place_rank(rank, world_size, [1, 1, 1, per_stage, pp_size])
    pp, dp, tp = coordinates
    return {"rank": rank, "world_size": world_size, "pp_size": pp_size, "pp": pp, "dp": dp,
            "tp": tp, "pipeline_source": rank - pp * per_stage}


def _frame_device(group):
    import torch
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _global_rank(group, group_rank):
    """The global rank of ``group_rank`` in ``group`` (torch names ranks
    globally in its calls)."""
    import torch.distributed as dist

    if group is None:
        return group_rank
    if hasattr(dist, "get_global_rank"):  # torch 2
        return dist.get_global_rank(group, group_rank)
    return dist.distributed_c10d._get_global_rank(group, group_rank)  # torch 1.13


class _TorchGroup:
    """A torch.distributed group as lens's C++ core calls it: a broadcast,
    an all-gather and messages of bytes, ranks in the group, timeouts in
    seconds. Each call is one torch.distributed call of a uint8 tensor on
    the device the backend needs; one that fails or outlives its timeout
    raises, which the core reports as a failed collective."""

    def __init__(self, group=None):
        import torch.distributed as dist

        self._group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.engine = "torch.distributed/" + str(dist.get_backend(group))
        self._device = _frame_device(group)
        self._global = [_global_rank(group, r) for r in range(self.size)]

    def _tensor(self, data):
        import torch

        return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self._device)

    @staticmethod
    def _wait(work, timeout):
        work.wait(timeout=datetime.timedelta(seconds=timeout))

    def index_of(self, global_rank):
        """The group rank of a global rank of this group."""
        try:
            return self._global.index(global_rank)
        except ValueError:
            raise ValueError(f"rank {global_rank} is not in the group (its ranks: "
                             f"{self._global})") from None

    def broadcast(self, data, root, timeout):
        import torch.distributed as dist

        tensor = self._tensor(data)
        self._wait(dist.broadcast(tensor, src=self._global[root], group=self._group, async_op=True),
                   timeout)
        return bytes(tensor.cpu().tolist())

    def all_gather(self, data, timeout):
        import torch
        import torch.distributed as dist

        tensor = self._tensor(data)
        out = [torch.empty(len(data), dtype=torch.uint8, device=self._device)
               for _ in range(self.size)]
        self._wait(dist.all_gather(out, tensor, group=self._group, async_op=True), timeout)
        return b"".join(bytes(t.cpu().tolist()) for t in out)

    def send(self, data, peer, tag, timeout):
        import torch.distributed as dist

        self._wait(dist.isend(self._tensor(data), dst=self._global[peer], group=self._group,
                              tag=tag), timeout)

    def recv(self, size, peer, tag, timeout):
        import torch
        import torch.distributed as dist

        tensor = torch.empty(size, dtype=torch.uint8, device=self._device)
        self._wait(dist.irecv(tensor, src=self._global[peer], group=self._group, tag=tag),
                   timeout)
        return bytes(tensor.cpu().tolist())


_torch_groups = {}  # (group, the world's group) -> its _TorchGroup, made once
_torch_groups_lock = threading.Lock()


def _torch_group(group):
    """The _TorchGroup of ``group`` (None: the world), made once per group
    and default group (a process that makes its world again gets new ones)."""
    from torch.distributed import distributed_c10d

    key = (group, distributed_c10d._get_default_group())
    with _torch_groups_lock:
        made = _torch_groups.get(key)
        if made is None:
            made = _torch_groups[key] = _TorchGroup(group)
        return made


class StepTrace:
    """The step protocol of lens's C++ core (lens/step_trace.h, the one
    lens-train runs) over torch.distributed: every step of every rank in one
    trace, linked receives, step checks and clock samples.

    ``group`` is the pipeline's group (default: the world) and
    ``pipeline_parallel_size`` the job's PP size (required: 1 never runs a
    collective); ``src_rank`` is the source's rank in ``group`` (its first
    stage); ``job_group`` the group of every rank of the job, where it is
    not ``group`` (pipeline scope: clock samples and step checks run over
    it). Make it on every rank after lens.distributed.init, enabled or not:
    the protocol runs only where telemetry is on, the same on every rank.

        trace = lens.distributed.StepTrace(pipeline_parallel_size=P)
        trace.set_job_span(job)            # each step span links to it
        for step in range(steps):
            with trace.step(step) as step_span:   # the collective, then the span
                ... link = trace.recv_forward_linked(mb); recv; link.end() ...
        trace.finish()                     # the closing clock sample

    ``step(n)`` is a ``with`` block: on entry every rank agrees on step n's
    context (the broadcast, or the derivation and its periodic check, as
    LENS_STEP_CONTEXT says; a clock sample when one is due) and the
    ``megatron.train_step`` span opens, current inside; a rank at another
    step raises lens.StepCheckError on every rank, a failed collective
    lens.CommError (both RuntimeError). An exception leaving the block
    while the process stops on a signal marks the step as stopped by it.
    """

    def __init__(self, pipeline_parallel_size, group=None, job_group=None, src_rank=0,
                 pipeline_rank=None, timeout=None):
        self._trace = _lens.StepTrace(_TorchGroup(group),
                                      None if job_group is None else _TorchGroup(job_group),
                                      int(pipeline_parallel_size), int(src_rank), pipeline_rank,
                                      timeout)

    def step(self, step):
        """Step ``step``'s ``with`` block; ``as`` gives the step span (its
        set_attribute, add_event, context, recording and carrier)."""
        return self._trace.step(int(step))

    @property
    def gated(self):
        """True when steps run the protocol (the same on every rank)."""
        return self._trace.gated

    def recv_forward_linked(self, microbatch_id):
        """The linked span of a warmup or pre-1F1B recv_forward on a
        non-first stage (child of the step span, linked to the source's):
        start it before the receive, end() it after. A no-op span on the
        first stage or with the ``communication`` group off."""
        return self._trace.recv_forward_linked(int(microbatch_id))

    def set_job_span(self, job):
        """Each step span started after this links to ``job`` (job_span's)."""
        self._trace.set_job_span(job)

    def finish(self):
        """After the last step, on every rank: the closing clock sample."""
        self._trace.finish()


class StepMeeting:
    """lens's step meeting (lens/step_meeting.h) over torch.distributed:
    every few steps one all-gather over ``group`` (default: the world), and
    every rank reaches the same verdicts: live stragglers (``live_every``
    steps, ``ranks`` every rank's (rank, stage, replica, tensor) place,
    rank 0 putting a ``lens.straggler`` event on its step span) and tail
    selection (LENS_TAIL_SELECTION: the same steps kept on every rank).

        meeting = lens.distributed.StepMeeting(live_every=5, ranks=places)
        with trace.step(step) as step_span:
            ...
            if meeting.step_done(step, compute_ms, step_seconds):
                verdict = meeting.meet(step, step_span)
        meeting.finish(last_step)

    meet and finish return {"stragglers": [...], "scores": [...]}, the same on
    every rank (finish: None when no meeting was needed).
    """

    def __init__(self, live_every=0, ranks=(), group=None, timeout=None, who=""):
        self._meeting = _lens.StepMeeting(_TorchGroup(group), int(live_every), list(ranks),
                                          timeout, who)

    @property
    def every(self):
        """Steps between meetings (0: it never meets)."""
        return self._meeting.every

    @property
    def tail_selection(self):
        """True when steps are held (lens.hold_step) and chosen at meetings."""
        return self._meeting.tail_selection

    def hold_warning(self):
        """A line to print when the hold keeps fewer steps than a window has."""
        return self._meeting.hold_warning()

    def step_done(self, step, compute_ms, step_seconds):
        """True when a meeting is due now, on every rank."""
        return self._meeting.step_done(int(step), float(compute_ms), float(step_seconds))

    def meet(self, step, step_span=None):
        """The meeting (a collective) ending the window at ``step``."""
        return self._meeting.meet(int(step), step_span)

    def finish(self, last_step):
        """After the last step: the last, partial window."""
        return self._meeting.finish(int(last_step))


def init(group=None, pipeline_parallel_size=None, **options):
    """lens.init for a torch.distributed job, with lens's start-up check.

    Every rank of ``group`` (default: the world) must call it, enabled or
    not: one all_gather_object of each rank's start-up record (the bytes
    lens's C++ start-up agreement exchanges) and the same comparison as in
    C++: whether telemetry is enabled, the pipeline-parallel size
    (``pipeline_parallel_size``, required: the group's size is not the PP
    size of a job with data parallelism), the span groups, the trace scope,
    the step budget, the step prefetch, the protocol and carrier frame
    versions must match, and every rank takes rank 0's run id and run key. A
    mismatch, or a rank whose configuration does not resolve, raises
    lens.ConfigError on every rank alike, naming the setting and the ranks,
    instead of a deadlock at the first step. Then every rank creates its
    telemetry and a second all_gather_object says whether each one started:
    one rank that cannot (say, an unwritable trace directory) fails every
    rank here, not the others' first broadcast later. ``rank`` and
    ``world_size`` default to torch.distributed's. Returns what lens.init
    returns.
    """
    import torch.distributed as dist

    if pipeline_parallel_size is None:
        raise _lens.ConfigError(
            "lens.distributed.init needs pipeline_parallel_size: the job's pipeline-parallel "
            "size (1 never broadcasts)")
    pp_size = int(pipeline_parallel_size)
    record, error = _lens.startup_record(pp_size, **options)
    size = dist.get_world_size(group)
    gathered = [None] * size
    dist.all_gather_object(gathered, record, group=group)
    if error:
        raise _lens.ConfigError(error)
    run_id, run_key = _lens.compare_startup_records(dist.get_rank(group), gathered)
    options = dict(options, run_id=run_id, run_key=run_key)
    options.setdefault("rank", dist.get_rank())
    options.setdefault("world_size", dist.get_world_size())
    failure = None
    try:
        telemetry = _package.init(**options)
    except Exception as caught:  # reported to every rank before it is raised here
        failure = caught
        telemetry = None
    started = [None] * size
    dist.all_gather_object(started, failure is not None, group=group)
    if failure is not None:
        raise failure
    _lens.compare_telemetry_start(dist.get_rank(group), started)
    global _layout
    _layout = _layout_of(options["rank"], options["world_size"], pp_size,
                         options.get("coordinates"))
    return telemetry


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
    event on this rank's open spans, logs them, and raises lens.CommError
    naming the call: a broken group cannot be papered over without
    deadlocking later collectives. The steps are lens's C++ core's, over the
    group as a _TorchGroup (the same ones lens.distributed.StepTrace runs). In
    pipeline scope with LENS_STEP_BUDGET, every LENS_STEP_VERIFY_STEPS calls
    also all-gather a step check over the world group (the budget's rate,
    renewed for every replica alike).
    """
    with _count_lock:
        count = next(_broadcast_count)
    step = count if step is None else int(step)
    # The protocol's steps in lens's C++ core (reserve, broadcast, accept,
    # the step check when due), over this group as a _TorchGroup; the step
    # check over the world group (records without a trace).
    torch_group = _torch_group(group)
    return _lens.step_context(step, False, int(rank), int(src_rank), torch_group,
                              torch_group.index_of(int(src_rank)), _torch_group(None))


def step_trace_context(step, rank, src_rank=0, group=None, check_group=None):
    """This step's trace context on every rank, as LENS_STEP_CONTEXT says.

    ``broadcast`` (the default): broadcast_trace_context(rank, src_rank,
    group, step). ``derived`` (docs/derived-step-context.md): no collective
    per step; every rank derives the step's context from the step number and
    what lens.distributed.init agreed (run key, run id, scope, sampler), and
    every LENS_STEP_VERIFY_STEPS calls the ranks of ``check_group`` (default:
    the world) compare their step numbers and contexts in one all-gather of
    48-byte records; a rank at another step makes every rank raise
    lens.StepCheckError (a RuntimeError) naming the ranks and their steps. Call it
    on every rank, once per step, with the same step numbers, under the same
    gate as broadcast_trace_context. ``src_rank`` is the global rank of the
    pipeline's first stage: in pipeline scope each pipeline's trace is derived
    from it, so every pipeline of any layout has its own. Returns the
    lens.Carrier.
    """
    if _lens.config().get("step_context") != "derived":
        return broadcast_trace_context(rank, src_rank=src_rank, group=group, step=step)
    # In pipeline scope each pipeline's trace is derived from its source's
    # global rank (src_rank: torch.distributed names ranks globally).
    return _lens.step_context(int(step), True, int(rank), int(src_rank), None, 0,
                              _torch_group(check_group), pipeline_source=int(src_rank))


def sync_clocks(step=None):
    """One clock sample: every rank's clock against global rank 0's.

    Run by every rank of the world group (like a collective), under the same
    gate as broadcast_trace_context: at the first step (before its
    broadcast), whenever clock_sync_due(step) says so, and once after the
    last step with step=None. Rank 0 exchanges timestamps with each rank in
    turn over dist.isend / dist.irecv of byte tensors (_TorchGroup); lens's C++ core runs
    the exchange, keeps the lowest round trip, fits the drift and records a
    ``lens.clock_sync`` span on every rank, which ``lens`` views align by
    (docs/clock-alignment.md). Does nothing when telemetry is not
    initialised or LENS_CLOCK_SYNC is off (both agreed at start-up, so alike
    on every rank). A failed or timed-out exchange raises.
    """
    if not _lens.is_initialized() or not _lens.config().get("clock_sync", True):
        return
    _lens.sync_clocks(_TorchGroup(), None if step is None else int(step))


def clock_sync_due(step):
    """True when a clock sample is due before ``step``: the first time, then
    at the steps global rank 0 chose from LENS_CLOCK_SYNC_STEPS / _SECONDS
    (the same answer on every rank)."""
    return _lens.clock_sync_due(int(step))


def job_span(rank, **attributes):
    """The rank's ``megatron.job`` span, started now: a lens.Span to end()
    after the training loop. It is not made current (a step span joining
    the step's trace is a root of it; a ``with`` block would make the
    job the parent of the spans inside, as Python nesting does).

    Every rank's job span is in the job's one trace, whose ids come from the
    run key lens.distributed.init agreed: rank 0's is the one the others
    link to, and every step span started while it is open links to its
    rank's job span, so a viewer can go from any step to its job. ``rank``
    is the global rank. A no-op span when the "job" group is off.
    """
    return _lens.start_job_span(int(rank), attributes)


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
