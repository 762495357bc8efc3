"""A 1F1B pipeline instrumented only with the OpenTelemetry API, as Megatron-LM
upstream instruments its training loop: the names and nesting
megatron.train.iteration (megatron.iteration) > megatron.train.iteration.forward_backward >
megatron.microbatch.forward/backward and megatron.p2p.{recv,send}_{forward,
backward}, no attributes on the microbatch and p2p spans, and the layout in
the resource (dl.rank, dl.world_size, dl.*_parallel.size). Nothing of lens is
imported: the tracer provider is whatever the environment selects.

    otel_pipeline.py --world 4 --steps 6 --microbatches 4 --out DIR [--sdk]

launches --world ranks as torchrun does (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), one pipeline stage each, over torch.distributed with Gloo.
With --sdk each rank sets the OpenTelemetry SDK's provider (upstream
Megatron's shape: every rank's iteration in a trace of its own) with three
exporters of the same spans: the SDK's ConsoleSpanExporter writing one JSON
span per line to DIR/console/sdk-rank-R.log, among lines of its own output;
and the two files an OpenTelemetry Collector's file exporter writes, from the
SDK's OTLP encoder: DIR/proto/traces-R.pb (each ExportTraceServiceRequest
after its 4-byte big-endian length) and DIR/json/traces-R.json (a request a
line in OTLP/JSON, ids in hex). --run-uuid U puts nemo.lens.run_uuid=U on the
resource.
--slow-stage S holds stage S's forward and backward 12 ms longer each.
--combined-untraced runs the steady state as upstream does: a forward's send
and the next backward's receive (send_forward_recv_backward), and a
backward's send and the next forward's receive (send_backward_recv_forward),
each a combined call without a span.
"""

import argparse
import contextlib
import os
import sys
import time

from pipeline_ranks import launch as launch_ranks
from pipeline_ranks import BATCH, HIDDEN, schedule_1f1b, stage_model


def launch(args):
    return launch_ranks(__file__, args.world, args.timeout, lambda rank: {
        "OTEL_PIPELINE_RANK": "1",
        "OTEL_RESOURCE_ATTRIBUTES": (
            f"dl.rank={rank},dl.world_size={args.world},dl.tensor_parallel.size=1,"
            f"dl.pipeline_parallel.size={args.world},dl.data_parallel.size=1")})


def collector_file_exporter(proto_path, json_path):
    """The SDK's spans as an OpenTelemetry Collector's file exporter writes
    them (format proto, and format json), through the SDK's OTLP encoder."""
    import base64
    import json
    import struct
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    def hex_ids(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hex_ids(value)
        elif isinstance(node, list):
            for item in node:
                hex_ids(item)

    class CollectorFiles(SpanExporter):
        def __init__(self):
            self.proto = open(proto_path, "wb")
            self.json = open(json_path, "w")

        def export(self, spans):
            request = encode_spans(spans)
            data = request.SerializeToString()
            self.proto.write(struct.pack(">I", len(data)) + data)
            doc = MessageToDict(request)
            hex_ids(doc)
            self.json.write(json.dumps(doc, separators=(",", ":")) + "\n")
            return SpanExportResult.SUCCESS

        def shutdown(self):
            self.proto.close()
            self.json.close()

    return CollectorFiles()


def run_rank(args):
    import torch
    import torch.distributed as dist
    from opentelemetry import trace

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.sdk:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        for sub in ("console", "proto", "json"):
            os.makedirs(os.path.join(args.out, sub), exist_ok=True)
        log = open(os.path.join(args.out, "console", f"sdk-rank-{rank}.log"), "w", buffering=1)
        attributes = {"dl.rank": rank}
        if args.run_uuid:
            attributes["nemo.lens.run_uuid"] = args.run_uuid
        provider = TracerProvider(resource=Resource.create(attributes))
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(
            out=log, formatter=lambda span: span.to_json(indent=None) + "\n")))
        provider.add_span_processor(BatchSpanProcessor(collector_file_exporter(
            os.path.join(args.out, "proto", f"traces-{rank}.pb"),
            os.path.join(args.out, "json", f"traces-{rank}.json"))))
        trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("megatron.training")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    stage, stages = rank, world
    first, last = stage == 0, stage == stages - 1
    hidden, batch = HIDDEN, BATCH
    model, optimizer, inputs = stage_model(stage, args.microbatches)

    def slow():
        if stage == args.slow_stage:
            time.sleep(0.012)

    for iteration in range(args.steps):
        if args.sdk:  # the process's own output, between the spans
            log.write(f"[rank {rank}] iteration {iteration} starts\n")
        with tracer.start_as_current_span("megatron.train.iteration",
                                          attributes={"megatron.iteration": iteration}):
            optimizer.zero_grad()
            saved, sends = {}, []
            with tracer.start_as_current_span("megatron.train.iteration.forward_backward"):
                order = schedule_1f1b(stage, stages, args.microbatches)
                # Transfers inside a combined steady-state call: no span.
                combined = set()
                for i in range(len(order) - 1):
                    if args.combined_untraced and order[i][0] != order[i + 1][0]:
                        combined.update({("send", i), ("recv", i + 1)})

                def p2p_span(name, what, i):
                    if (what, i) in combined:
                        return contextlib.nullcontext()
                    return tracer.start_as_current_span(name)

                for i, (kind, mb) in enumerate(order):
                    if kind == "F":
                        if first:
                            x = inputs[mb]
                        else:
                            x = torch.empty(batch, hidden)
                            with p2p_span("megatron.p2p.recv_forward", "recv", i):
                                dist.recv(x, src=rank - 1)
                            x.requires_grad_(True)
                        with tracer.start_as_current_span("megatron.microbatch.forward"):
                            y = model(x)
                            slow()
                        saved[mb] = (x, y.pow(2).mean() if last else y)
                        if not last:
                            with p2p_span("megatron.p2p.send_forward", "send", i):
                                sends.append(dist.isend(y.detach(), dst=rank + 1))
                    else:
                        x, out = saved.pop(mb)
                        grad = None
                        if not last:
                            grad = torch.empty(out.shape)
                            with p2p_span("megatron.p2p.recv_backward", "recv", i):
                                dist.recv(grad, src=rank + 1)
                        with tracer.start_as_current_span("megatron.microbatch.backward"):
                            out.backward() if last else out.backward(grad)
                            slow()
                        if not first:
                            with p2p_span("megatron.p2p.send_backward", "send", i):
                                sends.append(dist.isend(x.grad, dst=rank - 1))
                for work in sends:
                    work.wait()
            with tracer.start_as_current_span("megatron.train.iteration.optimizer"):
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
    parser.add_argument("--run-uuid", default="")
    parser.add_argument("--combined-untraced", action="store_true")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    if os.environ.get("OTEL_PIPELINE_RANK"):
        return run_rank(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
