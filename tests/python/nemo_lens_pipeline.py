"""A 1F1B pipeline instrumented as Megatron-LM upstream instruments its
training loop, through the real nemo-lens package (PyPI): setup_telemetry
with Megatron's resource dict (dl.rank, dl.world_size, dl.*_parallel.size,
nemo.lens.run_uuid, broadcast from rank 0), and upstream's spans opened with
nemo-lens's helpers: megatron.train.iteration (megatron.iteration) >
megatron.train.iteration.forward_backward > megatron.microbatch.forward /
.backward (trace_fn) and megatron.p2p.{recv,send}_{forward,backward}
(trace_fn), then megatron.train.iteration.optimizer. Nothing of lens is
imported: the provider is whatever the environment selects.

    nemo_lens_pipeline.py --world 4 --steps 6 --microbatches 4 --out DIR
        [--sdk-log] [--seed-links] [--slow-stage S] [--combined-untraced]

launches --world ranks as torchrun does (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), one pipeline stage each, over torch.distributed with Gloo;
nemo-lens reads its settings (MEGATRON_OTEL_*) from the environment.
--sdk-log gives setup_telemetry a console exporter writing one JSON span a
line to DIR/sdk-rank-R.log, among lines of the rank's own output.
--seed-links applies the seed page's integration
(shared/reference/pipeline-parallel-trace-correlation.txt): nemo-lens's
broadcast_trace_context and set_pp_trace_carrier before the iteration span
opens, and create_linked_span(..., "megatron.pp.recv_forward.linked",
remote_carrier=...) around the warmup and pre-1F1B recv_forward.
--slow-stage S holds stage S's forward and backward 12 ms longer each.
--combined-untraced runs the steady state as upstream does: a forward's
send with the next backward's receive, and a backward's send with the next
forward's receive, each a combined call without a span.

nemo-lens declares Python >= 3.13; this pipeline needs Debian's torch
(Python 3.11). NEMO_LENS_PATH names a copy of the package made loadable
under 3.11 (nemo_lens_wheel.py), put first on the ranks' path.
"""

import argparse
import os
import sys
import time

from pipeline_ranks import launch as launch_ranks
from pipeline_ranks import BATCH, HIDDEN, schedule_1f1b, stage_model


def launch(args):
    return launch_ranks(__file__, args.world, args.timeout,
                        lambda rank: {"NEMO_LENS_PIPELINE_RANK": "1"})


def run_rank(args):
    import torch
    import torch.distributed as dist
    from nemo.lens import (NemoLensConfig, SpanGroup, broadcast_trace_context, create_linked_span,
                           managed_span, setup_telemetry, trace_fn)
    from nemo.lens.state import get_pp_trace_carrier, is_span_group_enabled, set_pp_trace_carrier
    from opentelemetry import trace

    class MegatronSpanGroup(SpanGroup):
        """Megatron's groups beyond nemo-lens's shared ones, as Megatron
        subclasses SpanGroup."""

        MICROBATCH = "microbatch"
        COMMUNICATION = "communication"
        ALL_GROUPS = SpanGroup.ALL_GROUPS | {MICROBATCH, COMMUNICATION}
        _PRESETS = dict(SpanGroup._PRESETS, all=ALL_GROUPS)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    # Megatron's run id: made on rank 0, shared with every rank.
    run_uuid = [os.urandom(8).hex() if rank == 0 else None]
    dist.broadcast_object_list(run_uuid, src=0)

    config = NemoLensConfig.from_env(prefix="MEGATRON_OTEL", fallback_prefix="NEMO_LENS",
                                     span_group_cls=MegatronSpanGroup)
    exporter, log = None, None
    if args.sdk_log:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        log = open(os.path.join(args.out, f"sdk-rank-{rank}.log"), "w", buffering=1)
        exporter = ConsoleSpanExporter(out=log,
                                       formatter=lambda span: span.to_json(indent=None) + "\n")
    resource = {"dl.rank": rank, "dl.world_size": world, "dl.tensor_parallel.size": 1,
                "dl.pipeline_parallel.size": world, "dl.data_parallel.size": 1,
                "nemo.lens.run_uuid": run_uuid[0]}
    handle = setup_telemetry(config, rank, world, resource_attributes=resource,
                             span_exporter=exporter)
    tracer = handle.tracer

    stage, stages = rank, world
    first, last = stage == 0, stage == stages - 1
    hidden, batch = HIDDEN, BATCH
    model, optimizer, inputs = stage_model(stage, args.microbatches)

    def slow():
        if stage == args.slow_stage:
            time.sleep(0.012)

    @trace_fn("microbatch", "megatron.microbatch.forward")
    def forward_step(x):
        y = model(x)
        slow()
        return y

    @trace_fn("microbatch", "megatron.microbatch.backward")
    def backward_step(out, grad):
        out.backward() if grad is None else out.backward(grad)
        slow()

    @trace_fn("communication", "megatron.p2p.recv_forward")
    def recv_forward():
        x = torch.empty(batch, hidden)
        dist.recv(x, src=rank - 1)
        return x

    @trace_fn("communication", "megatron.p2p.send_forward")
    def send_forward(y):
        return dist.isend(y, dst=rank + 1)

    @trace_fn("communication", "megatron.p2p.recv_backward")
    def recv_backward(shape):
        grad = torch.empty(shape)
        dist.recv(grad, src=rank + 1)
        return grad

    @trace_fn("communication", "megatron.p2p.send_backward")
    def send_backward(grad):
        return dist.isend(grad, dst=rank - 1)

    def untraced(function):
        return getattr(function, "__wrapped__", function)

    for iteration in range(args.steps):
        if log is not None:  # the process's own output, between the spans
            log.write(f"[rank {rank}] iteration {iteration} starts\n")
        if args.seed_links and world > 1:
            # The seed page's broadcast, just before the iteration span opens.
            set_pp_trace_carrier(broadcast_trace_context(rank=rank, src_rank=0))
        with managed_span("step", "megatron.train.iteration", tracer,
                          **{"megatron.iteration": iteration}):
            optimizer.zero_grad()
            saved, sends = {}, []
            with managed_span("forward_backward", "megatron.train.iteration.forward_backward",
                              tracer):
                order = schedule_1f1b(stage, stages, args.microbatches)
                combined = set()
                for i in range(len(order) - 1):
                    if args.combined_untraced and order[i][0] != order[i + 1][0]:
                        combined.update({("send", i), ("recv", i + 1)})
                warmup_receives = stages - stage  # the warmup's and the pre-1F1B one
                received = 0
                for i, (kind, mb) in enumerate(order):
                    if kind == "F":
                        if first:
                            x = inputs[mb]
                        else:
                            link = None
                            if (args.seed_links and received < warmup_receives
                                    and is_span_group_enabled("communication")
                                    and get_pp_trace_carrier() is not None):
                                link = create_linked_span(
                                    trace.get_tracer("nemo.lens"),
                                    "megatron.pp.recv_forward.linked",
                                    remote_carrier=get_pp_trace_carrier(),
                                    **{"dl.pipeline_parallel.rank": stage,
                                       "dl.microbatch_id": mb})
                            receive = untraced(recv_forward) if ("recv", i) in combined \
                                else recv_forward
                            x = receive()
                            received += 1
                            if link is not None:
                                link.end()
                            x.requires_grad_(True)
                        y = forward_step(x)
                        saved[mb] = (x, y.pow(2).mean() if last else y)
                        if not last:
                            send = untraced(send_forward) if ("send", i) in combined \
                                else send_forward
                            sends.append(send(y.detach()))
                    else:
                        x, out = saved.pop(mb)
                        grad = None
                        if not last:
                            receive = untraced(recv_backward) if ("recv", i) in combined \
                                else recv_backward
                            grad = receive(out.shape)
                        backward_step(out, grad)
                        if not first:
                            send = untraced(send_backward) if ("send", i) in combined \
                                else send_backward
                            sends.append(send(x.grad))
                for work in sends:
                    work.wait()
            with managed_span("optimizer", "megatron.train.iteration.optimizer", tracer):
                optimizer.step()
    dist.barrier()
    dist.destroy_process_group()
    handle.shutdown()
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sdk-log", action="store_true")
    parser.add_argument("--seed-links", action="store_true")
    parser.add_argument("--slow-stage", type=int, default=-1)
    parser.add_argument("--combined-untraced", action="store_true")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    if os.environ.get("NEMO_LENS_PIPELINE_RANK"):
        path = os.environ.get("NEMO_LENS_PATH")
        if path:
            sys.path.insert(0, path)
        return run_rank(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
