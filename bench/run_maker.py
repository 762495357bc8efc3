"""Makes a run of any size from a short one: the short run's steps repeated
with new ids, step numbers and times, in lens's layout (a rank-<r>.otlp.jsonl
per rank, a batch a line as the exporter writes them), so the result has
the trainer's span shapes (steps, microbatches, p2p, linked receives, clock
samples) and reads as one long run: `lens check` passes on it.

    bench/run_maker.py TEMPLATE_RUN OUT_DIR --mb 1024 [--batch-spans 512]

Each rank's spans are grouped by step (a step is a trace; the spans of no
step, the clock samples and the job's trace, are written once, first).
Copy k of step s is step k * S + s (S: the template's steps): its trace and
span ids have their last 8 hex digits XORed with a number of the copy (ids
of the template's other traces are left as they are), and its times are
moved by k times the template's length. Deterministic: the same template
and size give the same bytes.

Clock samples (lens.clock_sync spans) are kept in every --clock-every-th
copy only (default 100: with a 3-step template, a sample every 300 steps),
as a trainer takes them: lens-train samples at the first step, then every
300 seconds by default (its 2,000-step run of bench/README.md has 2 or 3 a
rank), not at every step as a short template run does.
"""

import argparse
import glob
import json
import os
import re
import sys

SLOT = re.compile(r"@@(\d+)@@")


def load(template):
    """Per rank: (resource, the spans of no step, {step: spans})."""
    ranks = {}
    for path in sorted(glob.glob(os.path.join(template, "*.otlp.jsonl"))):
        rank = int(re.search(r"rank-(\d+)", path).group(1))
        resource, spans = None, []
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                for rs in json.loads(line)["resourceSpans"]:
                    resource = rs["resource"]
                    for ss in rs["scopeSpans"]:
                        spans += ss["spans"]
        ranks[rank] = (resource, spans)
    # A step's trace: a trace with a span carrying dl.step.
    step_of_trace = {}
    for _, spans in ranks.values():
        for s in spans:
            for a in s.get("attributes", []):
                if a["key"] == "dl.step":
                    step_of_trace[s["traceId"]] = int(a["value"]["intValue"])
    out = {}
    for rank, (resource, spans) in ranks.items():
        loose, by_step = [], {}
        for s in spans:
            step = step_of_trace.get(s["traceId"])
            (loose if step is None else by_step.setdefault(step, [])).append(s)
        out[rank] = (resource, loose, by_step)
    return out, set(step_of_trace)


def template_of(resource, spans, step_traces, batch_spans):
    """The step's lines as chunks around numbered slots, and the slots:
    ('id', hex) for an id to vary, ('time', ns), ('step', n)."""
    slots = []

    def slot(kind, value):
        slots.append((kind, value))
        return f"@@{len(slots) - 1}@@"

    lines = []
    for i in range(0, len(spans), batch_spans):
        batch = json.loads(json.dumps(spans[i:i + batch_spans]))
        for s in batch:
            if s["traceId"] in step_traces:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if s.get(key):
                        s[key] = slot("id", s[key])
            for key in ("startTimeUnixNano", "endTimeUnixNano"):
                s[key] = slot("time", int(s[key]))
            for a in s.get("attributes", []):
                if a["key"] == "dl.step":
                    a["value"]["intValue"] = slot("step", int(a["value"]["intValue"]))
            for link in s.get("links", []):
                if link["traceId"] in step_traces:
                    link["traceId"] = slot("id", link["traceId"])
                    link["spanId"] = slot("id", link["spanId"])
        request = {"resourceSpans": [{"resource": resource,
                                      "scopeSpans": [{"scope": {"name": "nemo.lens"},
                                                      "spans": batch}]}]}
        lines.append(json.dumps(request, separators=(",", ":")) + "\n")
    parts = SLOT.split("".join(lines))
    return parts[0::2], [slots[int(i)] for i in parts[1::2]]


def render(chunks, slots, copy, steps, shift_ns):
    mask = (copy * 2654435761) & 0xFFFFFFFF
    out = [chunks[0]]
    for (kind, value), chunk in zip(slots, chunks[1:]):
        if kind == "id":
            out.append(value[:-8] + format(int(value[-8:], 16) ^ mask, "08x"))
        elif kind == "time":
            out.append(str(value + copy * shift_ns))
        else:
            out.append(str(value + copy * steps))
        out.append(chunk)
    return "".join(out)


CLOCK_SPAN = "lens.clock_sync"


def make_run(template, out_dir, megabytes, batch_spans=512, quiet=False, clock_every=100):
    ranks, step_traces = load(template)
    steps = 1 + max(s for _, _, by_step in ranks.values() for s in by_step)
    times = [int(s[k]) for _, loose, by_step in ranks.values() for spans in by_step.values()
             for s in spans for k in ("startTimeUnixNano", "endTimeUnixNano")]
    shift_ns = max(times) - min(times) + 1_000_000
    templates = {rank: {step: template_of(resource, spans, step_traces, batch_spans)
                        for step, spans in sorted(by_step.items())}
                 for rank, (resource, _, by_step) in ranks.items()}
    # The copies between clock samples: each step without its samples.
    unsampled = {rank: {step: template_of(resource,
                                          [s for s in spans if s.get("name") != CLOCK_SPAN],
                                          step_traces, batch_spans)
                        for step, spans in sorted(by_step.items())}
                 for rank, (resource, _, by_step) in ranks.items()}
    os.makedirs(out_dir, exist_ok=True)
    files = {rank: open(os.path.join(out_dir, f"rank-{rank}.otlp.jsonl"), "w") for rank in ranks}
    written = 0
    for rank, (resource, loose, _) in ranks.items():
        if loose:
            text = "".join(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": "nemo.lens"}, "spans": loose[i:i + batch_spans]}]}]},
                separators=(",", ":")) + "\n" for i in range(0, len(loose), batch_spans))
            files[rank].write(text)
            written += len(text)
    copy = 0
    while written < megabytes * 1e6:
        for step in range(steps):
            for rank in sorted(ranks):
                if step in templates[rank]:
                    chosen = templates if copy % clock_every == 0 else unsampled
                    text = render(*chosen[rank][step], copy, steps, shift_ns)
                    files[rank].write(text)
                    written += len(text)
        copy += 1
    for f in files.values():
        f.close()
    if not quiet:
        print(f"run_maker: {out_dir}: {len(ranks)} ranks, {copy * steps} steps, "
              f"{written / 1e6:.0f} MB", file=sys.stderr)
    return copy * steps, written


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("template")
    parser.add_argument("out")
    parser.add_argument("--mb", type=float, default=1024)
    parser.add_argument("--batch-spans", type=int, default=512)
    parser.add_argument("--clock-every", type=int, default=100,
                        help="keep the clock samples in every N-th copy of the template")
    args = parser.parse_args()
    if args.clock_every < 1:
        parser.error("--clock-every must be 1 or more")
    make_run(args.template, args.out, args.mb, args.batch_spans, clock_every=args.clock_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
