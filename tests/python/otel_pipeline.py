"""A 1F1B pipeline instrumented only with the OpenTelemetry API, as Megatron-LM
upstream instruments its training loop: the names and nesting
train.iteration (megatron.iteration) > train.iteration.forward_backward >
megatron.microbatch.forward/backward and megatron.p2p.{recv,send}_{forward,
backward}, no attributes on the microbatch and p2p spans, and the layout in
the resource (dl.rank, dl.world_size, dl.*_parallel.size). Nothing of lens is
imported: the tracer provider is whatever the environment selects.

    otel_pipeline.py --world 4 --steps 6 --microbatches 4 --out DIR [--sdk]

launches --world ranks as torchrun does (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), one pipeline stage each, over torch.distributed with Gloo.
With --sdk each rank sets the OpenTelemetry SDK's provider with a
ConsoleSpanExporter writing one JSON span per line to DIR/sdk-rank-R.log,
among lines of its own output (upstream Megatron's shape: every rank's
iteration in a trace of its own).
--slow-stage S holds stage S's forward and backward 12 ms longer each.
"""

import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    port = free_port()
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OTEL_PIPELINE_RANK="1",
                   OTEL_RESOURCE_ATTRIBUTES=(
                       f"dl.rank={rank},dl.world_size={args.world},dl.tensor_parallel.size=1,"
                       f"dl.pipeline_parallel.size={args.world},dl.data_parallel.size=1"))
        procs.append(subprocess.Popen([sys.executable, __file__] + sys.argv[1:], env=env))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=args.timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print("otel_pipeline: ranks did not finish in time", file=sys.stderr)
            return 3
    return max(abs(c) for c in codes)


def schedule_1f1b(stage, stages, microbatches):
    warmup = min(stages - stage - 1, microbatches)
    order = [("F", i) for i in range(warmup)]
    for j in range(microbatches - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", j) for j in range(microbatches - warmup, microbatches)]
    return order


def run_rank(args):
    import torch
    import torch.distributed as dist
    from opentelemetry import trace

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.sdk:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        log = open(os.path.join(args.out, f"sdk-rank-{rank}.log"), "w", buffering=1)
        provider = TracerProvider(resource=Resource.create({"dl.rank": rank}))
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(
            out=log, formatter=lambda span: span.to_json(indent=None) + "\n")))
        trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("megatron.training")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    stage, stages = rank, world
    first, last = stage == 0, stage == stages - 1
    torch.manual_seed(7 + stage)
    hidden, batch = 32, 8
    model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.Tanh())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = [torch.randn(batch, hidden) for _ in range(args.microbatches)]

    def slow():
        if stage == args.slow_stage:
            time.sleep(0.012)

    for iteration in range(args.steps):
        if args.sdk:  # the process's own output, between the spans
            log.write(f"[rank {rank}] iteration {iteration} starts\n")
        with tracer.start_as_current_span("train.iteration",
                                          attributes={"megatron.iteration": iteration}):
            optimizer.zero_grad()
            saved, sends = {}, []
            with tracer.start_as_current_span("train.iteration.forward_backward"):
                for kind, mb in schedule_1f1b(stage, stages, args.microbatches):
                    if kind == "F":
                        if first:
                            x = inputs[mb]
                        else:
                            x = torch.empty(batch, hidden)
                            with tracer.start_as_current_span("megatron.p2p.recv_forward"):
                                dist.recv(x, src=rank - 1)
                            x.requires_grad_(True)
                        with tracer.start_as_current_span("megatron.microbatch.forward"):
                            y = model(x)
                            slow()
                        saved[mb] = (x, y.pow(2).mean() if last else y)
                        if not last:
                            with tracer.start_as_current_span("megatron.p2p.send_forward"):
                                sends.append(dist.isend(y.detach(), dst=rank + 1))
                    else:
                        x, out = saved.pop(mb)
                        grad = None
                        if not last:
                            grad = torch.empty(out.shape)
                            with tracer.start_as_current_span("megatron.p2p.recv_backward"):
                                dist.recv(grad, src=rank + 1)
                        with tracer.start_as_current_span("megatron.microbatch.backward"):
                            out.backward() if last else out.backward(grad)
                            slow()
                        if not first:
                            with tracer.start_as_current_span("megatron.p2p.send_backward"):
                                sends.append(dist.isend(x.grad, dst=rank - 1))
                for work in sends:
                    work.wait()
            with tracer.start_as_current_span("megatron.optimizer.step"):
                optimizer.step()
    dist.barrier()
    dist.destroy_process_group()
    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sdk", action="store_true")
    parser.add_argument("--slow-stage", type=int, default=-1)
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    if os.environ.get("OTEL_PIPELINE_RANK"):
        return run_rank(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
