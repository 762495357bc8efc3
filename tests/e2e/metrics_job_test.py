"""One endpoint for the job: `lens-train --metrics-port 0 --metrics-job`.

Rank 0 alone serves, on the port it prints, every rank's step metrics under
that rank's labels, gathered at the meetings (every --live-every steps) in
the same all-gather as the live rule's figures. The test reads the endpoint
while the run lingers after its last step: each of the four ranks (pp 2 x
dp 2) has its steps, its step figures and its straggler score, and the
step-time histogram's exemplars are that rank's own step spans in the
run's trace files. No other rank serves anything.

    metrics_job_test.py LENS_TRAIN_BIN
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def fail(message):
    print(f"metrics_job_test: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def step_spans(run_dir):
    """(trace id, span id) -> rank, for every megatron.train_step span."""
    spans = {}
    for path in glob.glob(os.path.join(run_dir, "rank-*.otlp.jsonl")):
        with open(path) as f:
            for line in f:
                for rs in json.loads(line)["resourceSpans"]:
                    res = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
                    rank = int(res["dl.rank"]["intValue"])
                    for ss in rs["scopeSpans"]:
                        for s in ss["spans"]:
                            if s["name"] == "megatron.train_step":
                                spans[(s["traceId"], s["spanId"])] = rank
    return spans


def main():
    train_bin = sys.argv[1]
    work = tempfile.mkdtemp(prefix="lens-metrics-job-")
    steps = 30
    run = subprocess.Popen([train_bin, "--pp", "2", "--dp", "2", "--steps", str(steps),
                            "--microbatches", "4", "--otel-enabled=true",
                            "--otel-span-groups", "per_step", "--trace-dir", work,
                            "--metrics-port", "0", "--metrics-job", "--live-every", "5",
                            "--metrics-linger", "5"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    serving = []
    text = ""
    deadline = time.time() + 240
    for line in run.stderr:
        m = re.search(r"rank (\d+): (the job's metrics|metrics) at http://127\.0\.0\.1:(\d+)/", line)
        if m:
            serving.append(int(m.group(1)))
            port = int(m.group(3))
        # Rank 0 says when its steps are done and it lingers.
        if "rank 0: steps done" in line or time.time() > deadline:
            break
    if serving != [0] or port is None:
        run.kill()
        fail(f"ranks serving: {serving} (only rank 0 should, once)")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        run.kill()
        fail(f"rank 0's endpoint: {e}")
    run.stderr.read()  # the rest, so that the launcher never blocks on a full pipe
    run.wait(timeout=120)
    if run.returncode != 0:
        fail(f"lens-train exited {run.returncode}")
    counts = {int(m.group(1)): float(m.group(2))
              for m in re.finditer(r'^lens_steps_total\{[^}]*rank="(\d+)"[^}]*\} (\S+)$', text, re.M)}
    # The last meeting follows the last step; a rank's last step is recorded
    # after it: every rank has its steps but that one, or all of them.
    if sorted(counts) != [0, 1, 2, 3] or any(c < steps - 1 for c in counts.values()):
        fail(f"lens_steps_total per rank: {counts}\n{text[:2000]}")
    for figure in ("duration", "compute", "p2p_wait", "p2p_send", "all_reduce", "optimizer"):
        ranks = {int(m.group(1)) for m in re.finditer(
            rf'^lens_step_{figure}_seconds_count\{{[^}}]*rank="(\d+)"[^}}]*\}} [1-9]', text, re.M)}
        if ranks != {0, 1, 2, 3}:
            fail(f"lens_step_{figure}_seconds per rank: {sorted(ranks)}")
    scores = re.findall(r'^lens_straggler_score\{[^}]*rank="(\d+)"', text, re.M)
    if sorted(int(r) for r in scores) != [0, 1, 2, 3]:
        fail(f"straggler scores: {scores}")
    run_dir = glob.glob(os.path.join(work, "*"))[0]
    spans = step_spans(run_dir)
    exemplars = re.findall(
        r'^lens_step_duration_seconds_bucket\{[^}]*rank="(\d+)"[^}]*\} \S+ # '
        r'\{trace_id="([0-9a-f]{32})",span_id="([0-9a-f]{16})"\}', text, re.M)
    if {int(r) for r, _, _ in exemplars} != {0, 1, 2, 3}:
        fail(f"exemplars per rank: {exemplars}")
    for r, trace, span in exemplars:
        if spans.get((trace, span)) != int(r):
            fail(f"rank {r}'s exemplar {trace}/{span} is not its step span")
    print(f"metrics_job_test: rank 0 served all 4 ranks: steps {counts}, "
          f"{len(exemplars)} exemplars, each its rank's step span")


if __name__ == "__main__":
    main()
