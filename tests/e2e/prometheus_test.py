"""A real Prometheus scrapes a lens-train run's metrics endpoints.

Debian's prometheus (installed by scripts/bootstrap) is started on loopback
with exemplar storage and a 1 s scrape interval, against the two ranks'
endpoints of a `lens-train --pp 2 --metrics-port` run traced with the step
group. Then its HTTP API is asked: every rank's step count is there, the
step-time series has a point per scrape its rank answered, and the
exemplars it stored on the step-time histogram name, by trace id and span
id, each rank's own
megatron.train_step span in the run's trace files (which `lens check`
passes). The OTLP/JSON metrics lines beside the traces say the same.
Then a run of 60 steps, shorter than a scrape interval, with one endpoint for
the job (--metrics-job) and no --metrics-linger: its exemplars reach
Prometheus too, each naming a step trace of the run's files.

    prometheus_test.py LENS_TRAIN_BIN LENS_BIN
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request


def free_ports(count):
    """A base port with `count` free ports from it (asked of the system)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        held = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                held.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError("no run of free ports")


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{url}: {body}")
    return body["data"]


def fail(message):
    print(f"prometheus_test: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def step_traces(run_dir):
    """The trace ids of every megatron.train_step span in a run's files."""
    traces = set()
    for name in os.listdir(run_dir):
        if not name.endswith(".otlp.jsonl"):
            continue
        with open(os.path.join(run_dir, name)) as f:
            for line in f:
                for rs in json.loads(line)["resourceSpans"]:
                    for ss in rs["scopeSpans"]:
                        for s in ss["spans"]:
                            if s["name"] == "megatron.train_step":
                                traces.add(s["traceId"])
    return traces


def job_run(prom_port, port, train_bin, work):
    """A run shorter than a scrape interval, as a user starts it: rank 0
    serves the job's metrics (--metrics-job), tracing on from the
    environment, no --metrics-linger. Prometheus stores exemplars whose
    trace ids are step traces of the run's files."""
    trace_dir = os.path.join(work, "job-traces")
    env = dict(os.environ, MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_SPAN_GROUPS="per_step")
    started = time.time()
    run = subprocess.run([train_bin, "--pp", "2", "--microbatches", "8", "--steps", "60",
                          "--metrics-port", str(port), "--metrics-job", "--trace-dir", trace_dir],
                         env=env, capture_output=True, text=True, timeout=240)
    if run.returncode != 0:
        fail(f"lens-train --metrics-job failed: {run.stderr[-3000:]}")
    ended = time.time()
    (run_id,) = os.listdir(trace_dir)
    traces = step_traces(os.path.join(trace_dir, run_id))
    data = api(prom_port, "query_exemplars", query=f'lens_step_duration_seconds_bucket{{run="{run_id}"}}',
               start=started - 60, end=ended + 60)
    found = [e["labels"].get("trace_id") for series in data for e in series["exemplars"]]
    if not found:
        fail(f"the --metrics-job run: prometheus stored no exemplar ({run.stderr[-1500:]})")
    strangers = [t for t in found if t not in traces]
    if strangers:
        fail(f"the --metrics-job run: {len(strangers)} of {len(found)} exemplars name no step "
             f"trace of the run: {strangers[:3]}")
    print(f"prometheus_test: the --metrics-job run: {len(found)} exemplars, each a step trace")


def main():
    train_bin, lens_bin = sys.argv[1], sys.argv[2]
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        fail("no prometheus on PATH (scripts/bootstrap installs Debian's)")
    work = tempfile.mkdtemp(prefix="lens-prometheus-")
    base = free_ports(2)
    prom_port = free_ports(1)
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: lens\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{base}', '127.0.0.1:{base + 1}']\n")
    prom_log = open(os.path.join(work, "prometheus.log"), "w")
    prom = subprocess.Popen([prometheus, f"--config.file={work}/prometheus.yml",
                             f"--storage.tsdb.path={work}/data",
                             f"--web.listen-address=127.0.0.1:{prom_port}",
                             "--enable-feature=exemplar-storage"],
                            stdout=prom_log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/-/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            fail("prometheus did not become ready: " + open(prom_log.name).read()[-2000:])
        # Prometheus hands new targets to its scrapers in batches every 5 s:
        # the run starts once they are there, so that every second of it is
        # scraped.
        for _ in range(300):
            if len(api(prom_port, "targets")["activeTargets"]) == 2:
                break
            time.sleep(0.1)
        else:
            fail("prometheus never took its two targets")
        trace_dir = os.path.join(work, "traces")
        started = time.time()
        run = subprocess.run([train_bin, "--pp", "2", "--steps", "150", "--microbatches", "4",
                              "--otel-enabled=true", "--otel-span-groups", "per_step",
                              "--trace-dir", trace_dir, "--metrics-port", str(base),
                              "--metrics-linger", "5"],
                             capture_output=True, text=True, timeout=240)
        if run.returncode != 0:
            fail(f"lens-train failed: {run.stderr[-3000:]}")
        ended = time.time()
        (run_dir,) = [os.path.join(trace_dir, d) for d in os.listdir(trace_dir)]
        check = subprocess.run([lens_bin, "check", run_dir], capture_output=True, text=True)
        if check.returncode != 0:
            fail(f"lens check: {check.stdout}{check.stderr}")

        # Every rank's steps, scraped more than once while it ran.
        # (At the end the targets are gone and their series stale: the
        # queries look back over the run.)
        window = f"{int(ended - started) + 30}s"
        steps = api(prom_port, "query", query=f"max_over_time(lens_steps_total[{window}])",
                    time=ended)["result"]
        by_rank = {r["metric"]["rank"]: float(r["value"][1]) for r in steps}
        if by_rank != {"0": 150.0, "1": 150.0}:
            fail(f"lens_steps_total per rank: {by_rank}")
        # Every rank's step figures, from its spans: a receive wait, a send
        # and a compute in each of its 150 steps.
        for figure in ("compute", "p2p_wait", "p2p_send"):
            got = api(prom_port, "query",
                      query=f"max_over_time(lens_step_{figure}_seconds_count[{window}])",
                      time=ended)["result"]
            by_rank = {r["metric"]["rank"]: float(r["value"][1]) for r in got}
            if by_rank != {"0": 150.0, "1": 150.0}:
                fail(f"lens_step_{figure}_seconds_count per rank: {by_rank}")
        # A point per successful scrape: the series' points are as many as
        # the scrapes its target answered (`up` was 1), and there were some.
        scrapes = api(prom_port, "query",
                      query=f"count_over_time(lens_step_duration_seconds_count[{window}])",
                      time=ended)["result"]
        counts = {r["metric"]["rank"]: int(float(r["value"][1])) for r in scrapes}
        answered = {}
        for r in api(prom_port, "query", query=f"sum_over_time(up[{window}])", time=ended)["result"]:
            port = int(r["metric"]["instance"].rsplit(":", 1)[1])
            answered[str(port - base)] = int(float(r["value"][1]))
        if sorted(counts) != ["0", "1"] or min(counts.values()) < 2 or counts != answered:
            fail(f"points per rank {counts}, scrapes answered per rank {answered}")

        # The exemplars: each names its rank's step span in the trace files.
        data = api(prom_port, "query_exemplars", query="lens_step_duration_seconds_bucket",
                   start=started - 60, end=ended + 60)
        exemplars = [(series["seriesLabels"]["rank"], e["labels"]["trace_id"], e["labels"]["span_id"])
                     for series in data for e in series["exemplars"]]
        if not exemplars:
            fail("prometheus stored no exemplar")
        step_spans = set()
        for rank in (0, 1):
            with open(os.path.join(run_dir, f"rank-{rank}.otlp.jsonl")) as f:
                for line in f:
                    for rs in json.loads(line)["resourceSpans"]:
                        for ss in rs["scopeSpans"]:
                            for s in ss["spans"]:
                                if s["name"] == "megatron.train_step":
                                    step_spans.add((str(rank), s["traceId"], s["spanId"]))
        missing = [e for e in exemplars if e not in step_spans]
        if missing:
            fail(f"{len(missing)} of {len(exemplars)} exemplars name no step span of their rank: {missing[:3]}")
        # The same figures as OTLP/JSON lines beside the traces: the last
        # line is cumulative over the run, its exemplars the same step spans.
        for rank in (0, 1):
            with open(os.path.join(run_dir, f"rank-{rank}.metrics.jsonl")) as f:
                last = json.loads(f.read().splitlines()[-1])
            metrics = {m["name"]: m for m in last["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
            steps_point = metrics["lens.steps"]["sum"]["dataPoints"][0]
            hist_point = metrics["lens.step.duration"]["histogram"]["dataPoints"][0]
            if steps_point["asDouble"] != 150 or hist_point["count"] != "150" or \
                    metrics["lens.step.duration"]["unit"] != "s":
                fail(f"rank {rank}'s OTLP metrics: {steps_point}, {hist_point}")
            if sum(int(c) for c in hist_point["bucketCounts"]) != 150:
                fail(f"rank {rank}'s buckets: {hist_point['bucketCounts']}")
            for e in hist_point["exemplars"]:
                if (str(rank), e["traceId"], e["spanId"]) not in step_spans:
                    fail(f"rank {rank}'s OTLP exemplar names no step span: {e}")
        print(f"prometheus_test: {len(exemplars)} exemplars, each a step span of its rank; "
              f"points per rank {counts}")
        job_run(prom_port, base, train_bin, work)
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
        prom_log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
