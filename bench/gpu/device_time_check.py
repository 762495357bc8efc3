"""Device-timed spans on a real GPU (docs/device-time.md, "On a real GPU").

Times a chain of matrix products three ways on one stream: in lens spans
timed on the device (stream=), in lens spans timed on the host, and with
torch.cuda.Event pairs, the reference. Prints one line per product and a
verdict: the device-timed spans agree with the events within 1% or 5 us,
and the host-timed spans are launch times (far shorter than the work).

    PYTHONPATH=<build>/python python3 bench/gpu/device_time_check.py --out DIR
"""

import argparse
import json
import os
import sys


def spans_of(path):
    out = []
    with open(path) as f:
        for line in f:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    out.extend(ss["spans"])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--products", type=int, default=20)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()

    import torch
    import lens

    if not torch.cuda.is_available():
        print("device_time_check: torch sees no CUDA device", file=sys.stderr)
        return 2
    telemetry = lens.init(enabled=True, exporter="file", trace_dir=args.out, span_groups="all",
                          rank=0, world_size=1)
    path = telemetry.trace_file
    stream = torch.cuda.current_stream()
    a = torch.randn(args.size, args.size, device="cuda")
    b = torch.randn(args.size, args.size, device="cuda") / args.size ** 0.5
    for _ in range(3):  # warm up cuBLAS
        a = a @ b
    torch.cuda.synchronize()

    events = []
    for i in range(args.products):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with lens.managed_span("product.device", "microbatch", stream=stream, **{"i": i}):
            with lens.managed_span("product.host", "microbatch", **{"i": i}):
                e0.record(stream)
                for _ in range(4):
                    a = a @ b
                e1.record(stream)
        events.append((e0, e1))
    torch.cuda.synchronize()
    reference = [e0.elapsed_time(e1) * 1e6 for e0, e1 in events]  # ns
    stats = telemetry.stats()
    lens.shutdown()
    print("device account:", stats.get("device"))

    by = {}
    for s in spans_of(path):
        attrs = {x["key"]: x["value"] for x in s.get("attributes", [])}
        i = int(attrs["i"]["intValue"])
        by[(s["name"], i)] = int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])
    worst = 0.0
    agree = True
    for i, ref in enumerate(reference):
        dev, host = by[("product.device", i)], by[("product.host", i)]
        off = abs(dev - ref)
        agree = agree and off <= max(0.01 * ref, 5000)
        worst = max(worst, off / ref)
        print(f"product {i:2d}: events {ref / 1e3:9.1f} us  device span {dev / 1e3:9.1f} us  "
              f"host span {host / 1e3:9.1f} us")
    launches = sum(by[("product.host", i)] for i in range(len(reference)))
    work = sum(reference)
    print(f"device spans within 1% or 5 us of the events: {agree} (worst {worst * 100:.3f}%)")
    print(f"host spans / device work: {launches / work:.3f} (launch times, not the work)")
    return 0 if agree and launches < 0.5 * work else 1


if __name__ == "__main__":
    sys.exit(main())
