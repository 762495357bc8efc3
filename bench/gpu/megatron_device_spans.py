"""Megatron's spans on the GPU's clock with no call-site change
(docs/device-time.md, "Megatron through lens.otel").

A Megatron-shaped pipeline of two stages, two processes on one GPU: each
microbatch's forward and backward are matrix products on the GPU inside
``megatron.microbatch.forward`` / ``.backward`` spans started through the
OpenTelemetry API as Megatron's are (lens.otel the provider); activations and
gradients go between the stages over Gloo from host memory, so each p2p span
synchronises the device first, as Megatron's batch_p2p_sync does. The script
records its own torch.cuda.Event pair inside every compute span. It runs the
job twice: with the compute spans timed on the device (lens.otel's default
under CUDA) and on the host (LENS_DEVICE_SPANS empty), and prints, per stage,
the events' median compute beside each run's spans. Exit status 0 when the
device-timed spans are within 10% of the events (median ratio, and 90% of
the spans each), 1 when not, 2 when the machine cannot run it (no CUDA, no
OpenTelemetry API).

    PYTHONPATH=<build>/python python3 bench/gpu/megatron_device_spans.py --out DIR
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def spans_by_rank(folder):
    """Every span of the run's files in `folder`, each with its rank (the
    resource's dl.rank) as "_rank"."""
    out = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".otlp.jsonl"):
            continue
        with open(os.path.join(folder, name)) as f:
            for line in f:
                for rs in json.loads(line)["resourceSpans"]:
                    res = {a["key"]: next(iter(a["value"].values()))
                           for a in rs["resource"]["attributes"]}
                    for ss in rs["scopeSpans"]:
                        for s in ss["spans"]:
                            s["_rank"] = int(res["dl.rank"])
                            out.append(s)
    return out


def attrs_of(span):
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def stage(rank, world, args, out):
    """One stage's process: its steps, and its own events' times (ns) by
    (step, kind, microbatch) in out/events-<rank>.json."""
    import torch
    import torch.distributed as dist
    from opentelemetry import trace

    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.cuda.set_device(0)
    tracer = trace.get_tracer("megatron.core")
    size, mbs, layers = args.size, args.microbatches, args.layers
    weights = [torch.randn(size, size, device="cuda") / size ** 0.5 for _ in range(layers)]
    for _ in range(3):  # cuBLAS warm
        x = torch.randn(size, size, device="cuda")
        for w in weights:
            x = x @ w
    torch.cuda.synchronize()
    events = []
    host = torch.empty(size, size)

    def compute(kind, step, mb, x):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with tracer.start_as_current_span(f"megatron.microbatch.{kind}"):
            e0.record()
            for w in weights if kind == "forward" else reversed(weights):
                x = torch.tanh(x @ w)
            e1.record()
        events.append((step, kind, mb, e0, e1))
        return x

    def send(kind, x, peer):
        with tracer.start_as_current_span(f"megatron.p2p.send_{kind}"):
            host.copy_(x)  # waits for the device: the drain
            dist.send(host, peer)

    def recv(kind, peer):
        with tracer.start_as_current_span(f"megatron.p2p.recv_{kind}"):
            dist.recv(host, peer)
            return host.to("cuda", non_blocking=False)

    for step in range(args.steps):
        with tracer.start_as_current_span("megatron.train.iteration",
                                          attributes={"megatron.iteration": step}):
            with tracer.start_as_current_span("megatron.train.iteration.forward_backward"):
                acts = []
                for mb in range(mbs):  # GPipe order: every forward, then every backward
                    x = recv("forward", 0) if rank == 1 else torch.randn(size, size, device="cuda")
                    y = compute("forward", step, mb, x)
                    acts.append(y)
                    if rank == 0:
                        send("forward", y, 1)
                for mb in range(mbs):
                    g = recv("backward", 1) if rank == 0 else acts[mb]
                    g = compute("backward", step, mb, g)
                    if rank == 1:
                        send("backward", g, 0)
            with tracer.start_as_current_span("megatron.train.iteration.optimizer"):
                torch.cuda.synchronize()
    torch.cuda.synchronize()
    with open(os.path.join(out, f"events-{rank}.json"), "w") as f:
        json.dump([[s, k, m, e0.elapsed_time(e1) * 1e6] for s, k, m, e0, e1 in events], f)
    dist.barrier()
    dist.destroy_process_group()
    trace.get_tracer_provider().shutdown()


def run_job(args, out, device_spans):
    """The two stages under lens.otel; the compute spans device-timed or not."""
    os.makedirs(out, exist_ok=True)
    procs = []
    for rank in range(2):
        env = dict(os.environ, OTEL_PYTHON_TRACER_PROVIDER="lens", LENS_TRACE_DIR=out,
                   MEGATRON_OTEL_RUN_ID="gpu", MEGATRON_OTEL_SPAN_GROUPS="all",
                   OTEL_RESOURCE_ATTRIBUTES=f"dl.rank={rank},dl.world_size=2,"
                                            f"dl.pipeline_parallel.size=2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        if not device_spans:
            env["LENS_DEVICE_SPANS"] = ""
        cmd = [sys.executable, __file__, "--stage", str(rank), "--out", out,
               "--steps", str(args.steps), "--microbatches", str(args.microbatches),
               "--size", str(args.size), "--layers", str(args.layers)]
        procs.append(subprocess.Popen(cmd, env=env))
    if any(p.wait(timeout=600) != 0 for p in procs):
        raise SystemExit("megatron_device_spans: a stage failed")


def compare(out):
    """(rank, kind, events' ns, span's ns, device-timed) per compute span: a
    rank's spans matched to its event pairs in start order (its host start
    for a device-timed span)."""
    spans = [s for s in spans_by_rank(os.path.join(out, "gpu"))
             if s["name"] in ("megatron.microbatch.forward", "megatron.microbatch.backward")]
    rows = []
    for rank in range(2):
        with open(os.path.join(out, f"events-{rank}.json")) as f:
            events = json.load(f)
        mine = sorted((s for s in spans if s["_rank"] == rank),
                      key=lambda s: int(attrs_of(s).get("lens.host.start_unix_ns",
                                                        s["startTimeUnixNano"])))
        if len(mine) != len(events):
            raise SystemExit(f"rank {rank}: {len(mine)} compute spans, {len(events)} event pairs")
        for s, (step, kind, mb, ref) in zip(mine, events):
            dur = int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])
            rows.append((rank, kind, ref, dur, "lens.host.start_unix_ns" in attrs_of(s)))
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--port", type=int, default=29561)
    parser.add_argument("--stage", type=int, default=None)
    args = parser.parse_args()
    if args.stage is not None:
        stage(args.stage, 2, args, args.out)
        return 0
    try:
        import torch
        import opentelemetry.trace  # noqa: F401
        import lens.otel  # noqa: F401
    except ImportError as e:
        print(f"megatron_device_spans: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("megatron_device_spans: torch sees no CUDA device", file=sys.stderr)
        return 2
    results = {}
    for label, device_spans in (("device", True), ("host", False)):
        out = os.path.join(args.out, label)
        run_job(args, out, device_spans)
        results[label] = compare(out)
    print(f"{'stage':>5} {'kind':>8} | {'events':>10} {'device-timed':>13} {'host-timed':>11}"
          "  (median ms a microbatch)")
    for rank in range(2):
        for kind in ("forward", "backward"):
            ev = [r[2] for r in results["device"] if r[0] == rank and r[1] == kind]
            dev = [r[3] for r in results["device"] if r[0] == rank and r[1] == kind]
            host = [r[3] for r in results["host"] if r[0] == rank and r[1] == kind]
            print(f"{rank:>5} {kind:>8} | {statistics.median(ev) / 1e6:10.3f} "
                  f"{statistics.median(dev) / 1e6:13.3f} {statistics.median(host) / 1e6:11.3f}")
    device = results["device"]
    timed = all(r[4] for r in device)
    ratios = [r[3] / r[2] for r in device if r[2] > 0]
    within = sum(1 for x in ratios if abs(x - 1) <= 0.10) / len(ratios)
    median = statistics.median(ratios)
    print(f"device-timed spans: all carry their host times: {timed}; median span/events "
          f"{median:.3f}; within 10%: {within * 100:.0f}% of {len(ratios)}")
    host_ratio = statistics.median(r[3] / r[2] for r in results["host"] if r[2] > 0)
    print(f"host-timed spans: median span/events {host_ratio:.3f} (launch times)")
    ok = timed and abs(median - 1) <= 0.10 and within >= 0.9
    for label in ("device", "host"):
        print(f"lens analyze {label}:")
        lens_bin = os.environ.get("LENS_BIN", "lens")
        subprocess.run([lens_bin, "analyze", os.path.join(args.out, label, "gpu")])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
