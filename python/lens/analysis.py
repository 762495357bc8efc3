"""A run's traces as pandas DataFrames, for notebooks.

Read and analysed by the `lens` command's own C++ (the extension
``lens._analysis``): the same reader, clock alignment and step analysis as
``lens analyze``, so every figure here equals ``lens analyze --json``'s.
Needs pandas (the `analysis` extra: ``pip install ".[analysis]"``; Debian:
python3-pandas).

    import lens.analysis as la
    spans = la.read_run("lens-traces/<run-id>")
    run = la.analyze("lens-traces/<run-id>")
    run.steps.plot(x="step", y="step_ms")
    run.stage_steps.pivot(index="step", columns="stage", values="late_sender_ms")

Times are nanoseconds since the epoch on the reference rank's clock (rank
0's) unless ``raw_clock=True``; durations are milliseconds.
"""

import json
import warnings as _warnings

from . import _analysis

__all__ = ["ReadError", "RunAnalysis", "analyze", "read_run", "set_threads"]

ReadError = _analysis.ReadError


def set_threads(threads):
    """The threads read_run and analyze read with, as ``lens --threads N``:
    0 (the default) the machine's cores, 1 everything on the caller's
    thread. The results are the same for any number."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"lens.analysis.set_threads: {threads!r} is not a number of threads "
                         "(0: the machine's cores, or 1 or more)")
    _analysis.set_read_threads(threads)


def _pandas():
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError(
            "lens.analysis needs pandas: pip install pandas (Debian: apt-get install "
            "python3-pandas)") from e
    return pandas


def _warn(messages):
    for m in messages:
        _warnings.warn(m, stacklevel=3)


def _nullable(values):
    """An int64 array with -1 (none) as <NA>: pandas's Int64, on the same array."""
    return _pandas().arrays.IntegerArray(values, values < 0)


def read_run(run_dir, raw_clock=False, attributes=()):
    """Every span of the run, one row each.

    Columns: rank, replica, tensor, stage (the rank's pipeline stage; <NA>
    outside a step), step, microbatch, chunk (the interleaved schedule's model
    chunk; <NA> where none), name, kind (step, forward, backward, p2p,
    linked, collective, optimizer, ...), start_ns, end_ns, duration_ms,
    aligned (on the reference clock), trace_id, span_id, parent_span_id
    (empty for a root), links (how many), status_code; then a column per
    span attribute named in `attributes` (its value as an int, float, bool or
    str; None where a span has none).

    Built from the reader's columns (numbers as arrays, each name and kind
    once), not from an object per span.
    """
    pd = _pandas()
    import numpy as np

    columns, attribute_columns, messages = _analysis.read_span_table(
        str(run_dir), raw_clock, [str(a) for a in attributes])
    _warn(messages)
    data = {}
    for key, value in columns.items():
        if type(value) is tuple:  # codes into a dictionary of texts
            codes, texts = value
            data[key] = np.array(texts + [""], dtype=object)[codes]
        else:
            data[key] = value
    data["aligned"] = data["aligned"].astype(bool)
    for key in ("stage", "step", "microbatch", "chunk"):
        data[key] = _nullable(data[key])
    for key, codes, values in attribute_columns:
        data[key] = np.array(values + [None], dtype=object)[codes]  # -1: the None
    frame = pd.DataFrame(data, copy=False)
    frame.insert(frame.columns.get_loc("end_ns") + 1, "duration_ms",
                 (frame["end_ns"] - frame["start_ns"]) / 1e6)
    return frame


def _leading(frame, first):
    """The columns in `first` first (those present), then the others."""
    first = [c for c in first if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]


class RunAnalysis:
    """``lens analyze`` of a run, as DataFrames.

    - ``steps``: one row per step: step_ms, critical_path_ms and its parts
      (critical_compute_ms, critical_transfer_ms, critical_all_reduce_ms),
      bubble, and the replica (and tensor rank) that set the step.
    - ``stage_steps``: one row per step and rank: the stage's columns
      (stage_step_ms = compute_ms + late_sender_ms + late_receiver_ms +
      transfer_ms + collective_wait_ms + sync_wait_ms + rest_ms), idle_ms,
      critical_share and the what-ifs (slack_ms, gain_at_baseline_ms,
      gain_at_median_ms).
    - ``stages``: one row per rank: the table of ``lens analyze``.
    - ``critical_path``: each step's critical path, one row per segment
      (kind forward, backward, transfer, all_reduce or optimizer; rank,
      stage, microbatch, start_ns, end_ns, start_ms and end_ms from the
      step's window).
    - ``stragglers`` and ``imbalance``: the verdicts, one row each.
    - ``summary``: the run's figures (step p50 and p95, bubble, thresholds,
      the clock report, ...) as a dict; ``json``: the whole document.
    """

    def __init__(self, document):
        pd = _pandas()
        self.json = document
        self.steps = pd.DataFrame(document["set_by"],
                                  columns=["step", "step_ms", "critical_path_ms",
                                           "critical_compute_ms", "critical_transfer_ms",
                                           "critical_all_reduce_ms", "bubble", "replica",
                                           "tensor"])
        self.stage_steps = _leading(pd.DataFrame(document["what_if"]),
                                    ["step", "rank", "stage", "replica", "tensor", "step_ms",
                                     "stage_step_ms", "compute_ms", "late_sender_ms",
                                     "late_receiver_ms", "transfer_ms", "collective_wait_ms",
                                     "sync_wait_ms", "rest_ms"])
        self.stages = _leading(pd.DataFrame(document["stages"]),
                               ["rank", "stage", "replica", "tensor", "steps"])
        self.critical_path = pd.DataFrame(
            document.get("critical_path", []),
            columns=["step", "kind", "rank", "stage", "microbatch", "start_ns", "end_ns",
                     "start_ms", "end_ms"])
        self.critical_path["duration_ms"] = self.critical_path["end_ms"] - \
            self.critical_path["start_ms"]
        self.stragglers = pd.DataFrame(
            document["stragglers"],
            columns=["rank", "stage", "replica", "tensor", "since_step", "ratio", "against",
                     "critical_share_p50", "gain_ms", "gain_share", "others_sync_wait_ms",
                     "others_sync_wait_at", "peers_collective_wait_ms"])
        self.imbalance = pd.DataFrame(
            document["imbalance"], columns=["stage", "ranks", "ratio", "gain_ms", "gain_share"])
        tables = {"set_by", "what_if", "stages", "critical_path", "stragglers", "imbalance"}
        self.summary = {k: v for k, v in document.items() if k not in tables}

    def __repr__(self):
        s = self.summary
        return (f"<RunAnalysis: {s['steps']} steps, {s['pipeline_stages']} stages x "
                f"{s['replicas']} replicas x {s['tensor_parallel']} tensor ranks; step p50 "
                f"{s['step_p50_ms']:.2f} ms; {len(self.stragglers)} stragglers>")


def analyze(run_dir, raw_clock=False, critical_path=True):
    """The run explained as ``lens analyze --json`` explains it: a RunAnalysis.

    ``critical_path=False`` leaves out the per-step path (one row per
    segment: O(steps x microbatches x stages)).
    """
    text, messages = _analysis.analyze_json(str(run_dir), raw_clock, critical_path)
    _warn(messages)
    return RunAnalysis(json.loads(text))
