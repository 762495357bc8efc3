"""A generated Megatron-LM upstream run of TP2 x PP4 x DP2 (16 ranks), written
by the real OpenTelemetry SDK as upstream writes it: every rank's own
TracerProvider (resource dl.rank, dl.world_size, dl.*_parallel.size), every
iteration a trace of its own, upstream's span names and nesting, no
attributes on the microbatch and p2p spans, the steady state's combined
calls untraced; the spans' times come from a simulated 1F1B schedule (the
SDK takes explicit start and end times), so no 16 processes need to run.

    megatron_layout_run.py OUT [--steps 4] [--microbatches 8] [--slow-stage 2]

writes OUT/traces.pb as an OpenTelemetry Collector's file exporter does
(format proto; otel_pipeline.collector_file_exporter). Rank r's place is
Megatron's default order tp-cp-ep-dp-pp (tp fastest): tp = r % 2,
dp = r // 2 % 2, pp = r // 4. The slowed stage computes 3x as long.
"""

import argparse
import os
import sys

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import set_span_in_context

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from otel_pipeline import collector_file_exporter, schedule_1f1b  # noqa: E402

TP, PP, DP = 2, 4, 2
US = 1000  # ns


def simulate(stages, microbatches, slow_stage, start_ns):
    """When each stage's forward and backward of each microbatch run in one
    1F1B step starting at start_ns: {(stage, kind, mb): (start, end)}, and
    when each stage became free before each op (for its receive span)."""
    forward = [100 * US * (3 if s == slow_stage else 1) for s in range(stages)]
    backward = [2 * f for f in forward]
    latency = 20 * US
    order = [schedule_1f1b(s, stages, microbatches) for s in range(stages)]
    at = [0] * stages
    free = [start_ns] * stages
    done, waited_from = {}, {}
    while any(at[s] < len(order[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if at[s] == len(order[s]):
                continue
            kind, mb = order[s][at[s]]
            if kind == "F":
                dep = None if s == 0 else (s - 1, "F", mb)
            else:
                dep = None if s == stages - 1 else (s + 1, "B", mb)
            if dep is not None and dep not in done:
                continue
            ready = free[s] if dep is None else max(free[s], done[dep][1] + latency)
            cost = forward[s] if kind == "F" else backward[s]
            waited_from[(s, kind, mb)] = free[s]
            done[(s, kind, mb)] = (ready, ready + cost)
            free[s] = ready + cost + 5 * US  # the send after it
            at[s] += 1
            progressed = True
        assert progressed, "the schedule cannot progress"
    return done, waited_from, max(free)


class Shared(SpanExporter):
    """One file exporter for every rank's provider: a provider's shutdown
    leaves it open."""

    def __init__(self, inner):
        self.inner = inner

    def export(self, spans):
        return self.inner.export(spans)

    def shutdown(self):
        pass


def write_rank(rank, exporter, args, timeline, step_starts):
    tp, dp, pp = rank % TP, rank // TP % DP, rank // (TP * DP)
    provider = TracerProvider(resource=Resource.create({
        "dl.rank": rank, "dl.world_size": TP * PP * DP, "dl.tensor_parallel.size": TP,
        "dl.pipeline_parallel.size": PP, "dl.data_parallel.size": DP,
        "nemo.lens.run_uuid": "generated-tp2-pp4-dp2"}))
    provider.add_span_processor(SimpleSpanProcessor(Shared(exporter)))
    tracer = provider.get_tracer("megatron.training")
    first, last = pp == 0, pp == PP - 1
    for step, (start, end) in enumerate(step_starts):
        done, waited_from = timeline[step]
        it = tracer.start_span("megatron.train.iteration", start_time=start,
                               attributes={"megatron.iteration": step})
        fb = tracer.start_span("megatron.train.iteration.forward_backward",
                               context=set_span_in_context(it), start_time=start)
        inside = set_span_in_context(fb)

        def span(name, t0, t1):
            tracer.start_span(name, context=inside, start_time=t0).end(end_time=t1)

        order = schedule_1f1b(pp, PP, args.microbatches)
        for i, (kind, mb) in enumerate(order):
            t0, t1 = done[(pp, kind, mb)]
            # Upstream's combined calls (a switch of direction) are untraced.
            switch_before = i > 0 and order[i - 1][0] != kind
            switch_after = i + 1 < len(order) and order[i + 1][0] != kind
            receives = (kind == "F" and not first) or (kind == "B" and not last)
            sends = (kind == "F" and not last) or (kind == "B" and not first)
            direction = "forward" if kind == "F" else "backward"
            if receives and not switch_before:
                span(f"megatron.p2p.recv_{direction}", waited_from[(pp, kind, mb)], t0)
            span(f"megatron.microbatch.{direction}", t0, t1)
            if sends and not switch_after:
                span(f"megatron.p2p.send_{direction}", t1, t1 + 5 * US)
        fb.end(end_time=end - 50 * US)
        span_opt = tracer.start_span("megatron.train.iteration.optimizer", context=set_span_in_context(it),
                                     start_time=end - 50 * US)
        span_opt.end(end_time=end)
        it.end(end_time=end)
    provider.shutdown()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--slow-stage", type=int, default=2)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    timeline, step_starts = [], []
    start = 1_796_000_000_000_000_000
    for _ in range(args.steps):
        done, waited_from, finish = simulate(PP, args.microbatches, args.slow_stage, start)
        timeline.append((done, waited_from))
        end = finish + 100 * US  # the optimizer
        step_starts.append((start, end))
        start = end + 200 * US
    exporter = collector_file_exporter(os.path.join(args.out, "traces.pb"),
                                       os.path.join(args.out, "traces.json.txt"))
    for rank in range(TP * PP * DP):
        write_rank(rank, exporter, args, timeline, step_starts)
    exporter.shutdown()
    os.remove(os.path.join(args.out, "traces.json.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
