#!/usr/bin/env python3
"""How fast lens reads a run, against the floor of reading its bytes
(bench/README.md, "Reading a run").

    bench/read_bench.py [--build build] [--mb 1024] [--ranks 4 64] [--read-run-mb 200]
                        [--compare OTHER_LENS] [--compare-python OTHER_BUILD/python]
    bench/read_bench.py --count [--check bench/read_budgets.json]

For each rank count: a short run of the trainer (3 steps of PP4, x DP16 for
64 ranks) is made into a run of --mb megabytes by bench/run_maker.py (its
steps repeated with new ids and times), then, in the same run of this
script, from the page cache:
  floor       every file read in 1 MiB blocks and split into lines
              (lens-json-floor --no-parse; `cat` is printed beside it)
  simdjson    simdjson's own parse of every line (lens-json-floor): the
              ceiling the reader's parser allows
  check       lens check RUN
  analyze     lens analyze --json RUN
  analyze-1t  lens analyze --json --threads 1 RUN
  read_run    lens.analysis.read_run (the whole run in DataFrames; on the
              first --read-run-mb of the run, since it holds every span): the
              whole process, and "(call)" the call alone, after the
              interpreter's start and pandas's import; --compare-python
              times another build's beside (read_run-was)
each as MB/s, its ratio to the floor, and the process's peak resident
memory.

--count: instructions per input byte of `lens check`, of `lens analyze
--json` and of lens.analysis.read_run (each on one thread), counted by callgrind on runs made from the committed template
(bench/data/pp4-3steps) at two sizes, the difference divided by the
difference in bytes (the start-up cancels). The same count whatever the
machine's load. --check FILE fails (exit 1) when a count is more than 10%
over its budget (the CI guard bench.instructions_per_byte); without
valgrind it exits 77 (skipped).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_maker import make_run  # noqa: E402


def timed(cmd, env=None):
    """(seconds, peak RSS in KB, stdout) of one command. The peak is GNU
    time's (%M): the rusage a parent gets from wait4 keeps the peak of the
    forked parent before exec."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r") as rss:
        start = time.perf_counter()
        code = subprocess.call(["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd], stdout=out,
                               stderr=err, env=env)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if code not in (0, 1):
            raise RuntimeError(f"{' '.join(cmd)} exited {code}: {err.read().decode()[-2000:]}")
        return seconds, int(rss.read().split()[-1]), out.read()


def run_size(run):
    return sum(os.path.getsize(os.path.join(run, f)) for f in os.listdir(run)
               if f.endswith(".otlp.jsonl"))


def trainer_template(build, ranks, where):
    dp = max(1, ranks // 4)
    out = os.path.join(where, f"template-{ranks}")
    subprocess.run([os.path.join(build, "bin", "lens-train"), "--pp", "4", "--dp", str(dp),
                    "--microbatches", "8", "--steps", "3", "--hidden", "16", "--layers", "4",
                    "--microbatch-size", "2", "--otel-enabled=true", "--otel-span-groups", "all",
                    "--trace-dir", out], check=True, capture_output=True)
    return os.path.join(out, os.listdir(out)[0])


READ_RUN = "import sys, lens.analysis as a; a.read_run(sys.argv[1])"
# The call alone, after the interpreter's start and pandas's import.
READ_RUN_IN = ("import sys, time, pandas, lens.analysis as a; t = time.perf_counter(); "
               "a.read_run(sys.argv[1]); print(time.perf_counter() - t)")


def measure(build, run, read_run_mb, where, compare=None, compare_python=None):
    lens = os.path.join(build, "bin", "lens")
    floor_bin = os.path.join(build, "bin", "lens-json-floor")
    files = sorted(os.path.join(run, f) for f in os.listdir(run) if f.endswith(".otlp.jsonl"))
    size = run_size(run)
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # into the page cache
    rows = []
    cat_s, cat_rss, _ = timed(["cat", *files])
    rows.append(("cat", cat_s, cat_rss, size))
    floor_s, floor_rss, _ = timed([floor_bin, "--no-parse", *files])
    rows.append(("floor", floor_s, floor_rss, size))
    s, rss, _ = timed([floor_bin, *files])
    rows.append(("simdjson", s, rss, size))
    s, rss, check_out = timed([lens, "check", run])
    rows.append(("check", s, rss, size))
    s, rss, _ = timed([lens, "analyze", "--json", run])
    rows.append(("analyze", s, rss, size))
    s, rss, _ = timed([lens, "analyze", "--json", "--threads", "1", run])
    rows.append(("analyze-1t", s, rss, size))
    if compare:  # another build's lens (before a change), on the same bytes
        s, rss, _ = timed([compare, "check", run])
        rows.append(("check-was", s, rss, size))
        s, rss, _ = timed([compare, "analyze", "--json", run])
        rows.append(("analyze-was", s, rss, size))
    python = os.path.join(os.path.dirname(HERE), ".venv", "bin", "python")
    package = os.path.join(build, "python")
    if read_run_mb > 0 and os.path.exists(python) and os.path.isdir(package):
        part = os.path.join(where, "read-run-part")
        shutil.rmtree(part, ignore_errors=True)
        os.makedirs(part)
        part_size = 0
        for f in files:  # the first lines of every rank, about read_run_mb in all
            with open(f, "rb") as src, open(os.path.join(part, os.path.basename(f)), "wb") as dst:
                budget = read_run_mb * 1e6 / len(files)
                for line in src:
                    dst.write(line)
                    part_size += len(line)
                    budget -= len(line)
                    if budget <= 0:
                        break
        for label, where_package in (("read_run", package), ("read_run-was", compare_python)):
            if where_package is None:
                continue
            env = dict(os.environ, PYTHONPATH=where_package)
            s, rss, _ = timed([python, "-c", READ_RUN, part], env=env)
            rows.append((label, s, rss, part_size))
            _, rss, out = timed([python, "-c", READ_RUN_IN, part], env=env)
            rows.append((label + " (call)", float(out.decode().split()[-1]), rss, part_size))
    return rows, check_out.decode().strip().splitlines()[-1]


def bench(args):
    where = tempfile.mkdtemp(prefix="lens-read-bench-")
    try:
        print(f"machine: {os.cpu_count()} cores; {platform_line()}")
        for ranks in args.ranks:
            template = trainer_template(args.build, ranks, where)
            run = os.path.join(where, f"run-{ranks}")
            steps, written = make_run(template, run, args.mb, quiet=True)
            rows, verdict = measure(args.build, run, args.read_run_mb, where, args.compare,
                                    args.compare_python)
            floor = next(r for r in rows if r[0] == "floor")
            floor_mbs = floor[3] / 1e6 / floor[1]
            print(f"\n## {ranks} ranks, {steps} steps, {written / 1e6:.0f} MB ({verdict})")
            print(f"{'what':<19} {'MB':>7} {'s':>8} {'MB/s':>8} {'x floor':>8} {'peak RSS':>10}")
            for name, s, rss, size in rows:
                mbs = size / 1e6 / s
                print(f"{name:<19} {size / 1e6:7.0f} {s:8.2f} {mbs:8.1f} {floor_mbs / mbs:8.1f}"
                      f" {rss / 1024:8.1f} MB")
            shutil.rmtree(run)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def platform_line():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu unknown"


def instructions(cmd, env=None):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
                       check=False, capture_output=True, env=env)
        with open(out) as f:
            for line in f:
                if line.startswith("totals:") or line.startswith("summary:"):
                    return int(line.split()[1])
    raise RuntimeError("callgrind wrote no totals")


def count(args):
    if shutil.which("valgrind") is None:
        print("valgrind not installed: skipped")
        return 77
    lens = os.path.join(args.build, "bin", "lens")
    template = os.path.join(HERE, "data", "pp4-3steps")
    results = {}
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for mb in (2, 4):
            run = os.path.join(d, f"run-{mb}")
            make_run(template, run, mb, quiet=True)
            runs.append((run, run_size(run)))
        # On one thread (--threads 1): the reading's own instructions,
        # whatever the machine's cores; with more, what callgrind counts
        # moves with how it happens to interleave the threads' waits.
        for name, cmd in (("check", ["check", "--threads", "1"]),
                          ("analyze", ["analyze", "--json", "--threads", "1"])):
            counts = [instructions([lens, *cmd, run]) for run, _ in runs]
            per_byte = (counts[1] - counts[0]) / (runs[1][1] - runs[0][1])
            results[name] = round(per_byte, 1)
            print(f"{name}: {per_byte:.1f} instructions per input byte")
        # lens.analysis.read_run, the interpreter's start and pandas's import
        # cancelling in the difference.
        python = os.path.join(os.path.dirname(HERE), ".venv", "bin", "python")
        package = os.path.join(args.build, "python")
        if os.path.exists(python) and os.path.isdir(package):
            env = dict(os.environ, PYTHONPATH=package)
            code = ("import sys, lens._analysis as x; x.set_read_threads(1); "
                    "import lens.analysis as a; a.read_run(sys.argv[1])")
            counts = [instructions([python, "-c", code, run], env) for run, _ in runs]
            per_byte = (counts[1] - counts[0]) / (runs[1][1] - runs[0][1])
            results["read_run"] = round(per_byte, 1)
            print(f"read_run: {per_byte:.1f} instructions per input byte")
        else:
            print(f"read_run: not counted (no {python} or {package})")
    if args.check:
        with open(args.check) as f:
            budgets = json.load(f)["per_byte"]
        missing = [n for n in budgets if n not in results]
        for n in missing:
            print(f"{n}: has a budget and was not counted")
        over = [n for n, b in budgets.items() if results.get(n, 0) > b * 1.10]
        for n in over:
            print(f"{n}: {results[n]} instructions per byte, over its budget {budgets[n]} by "
                  "more than 10%")
        return 1 if over or missing else 0
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--compare", help="another lens binary timed beside (check-was, "
                        "analyze-was): the one before a change")
    parser.add_argument("--compare-python", help="another build's python folder (its "
                        "lens.analysis) timed beside: read_run-was")
    parser.add_argument("--mb", type=float, default=1024)
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 64])
    parser.add_argument("--read-run-mb", type=float, default=200)
    parser.add_argument("--count", action="store_true")
    parser.add_argument("--check")
    args = parser.parse_args()
    if args.count or args.check:
        return count(args)
    bench(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
