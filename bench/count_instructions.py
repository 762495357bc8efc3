#!/usr/bin/env python3
"""Instructions per span, counted with valgrind's callgrind: the same count
run after run, whatever else the machine does (bench/README.md).

    bench/count_instructions.py [--build build] [--spans 5000] [CASE ...]
    bench/count_instructions.py --check bench/instruction_budgets.json

Each case runs under callgrind (--fair-sched=yes, so the export thread
keeps up; --separate-threads=yes) recording N and 2N spans; the
difference divided by N is one span's cost without the start-up: on the
calling thread (the thread that ran main) and over every thread (the
export thread's share included). The least of --repeats such pairs is
taken: how the threads interleave (a pooled record the export thread has
not handed back yet, a wake-up) only ever adds instructions. Cases: those of lens-span-count, and
`python` (lens.managed_span through the extension, with Debian's
/usr/bin/python3; needs the build's Python package).

--check compares the calling thread's count of each case in the budget
file with its budget and exits 1 when one is more than 10% over (the CI
guard); without valgrind it says so and exits 77 (skipped).
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

CASES = ["disabled", "two_ints", "int_string", "two_ints_link", "linked", "device",
         "step_metrics", "python"]
PYTHON_DRIVER = """
import sys, lens
lens.init(enabled=True, span_groups="all", exporter="none")
for i in range(int(sys.argv[1])):
    with lens.managed_span("megatron.microbatch.forward", group="microbatch",
                           **{"dl.microbatch_id": i, "dl.pipeline_parallel.rank": 1}):
        pass
lens.shutdown()
"""


def totals(out_dir):
    """Instructions per thread (thread 1 first) from callgrind's files."""
    per_thread = {}
    for path in glob.glob(os.path.join(out_dir, "out-*")):
        thread = int(path.rsplit("-", 1)[1])
        with open(path) as f:
            for line in f:
                if line.startswith("totals:"):
                    per_thread[thread] = int(line.split()[1])
    return per_thread


def count(command, env, n):
    with tempfile.TemporaryDirectory(prefix="lens-callgrind-") as out:
        r = subprocess.run(["valgrind", "--tool=callgrind", "--fair-sched=yes",
                            "--separate-threads=yes",
                            f"--callgrind-out-file={out}/out"] + command + [str(n)],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(command)} {n} failed:\n{r.stdout}\n{r.stderr[-3000:]}")
        if "dropped 0" not in r.stdout and "dropped" in r.stdout:
            raise SystemExit(f"{command[-1]}: spans were dropped ({r.stdout.strip()}): unfair count")
        return totals(out)


def per_span(case, build, n, repeats):
    env = dict(os.environ)
    if case == "python":
        command = ["/usr/bin/python3", "-c", PYTHON_DRIVER]
        env["PYTHONPATH"] = os.path.join(build, "python")
        n = max(n // 5, 1000)
    else:
        command = [os.path.join(build, "bin", "lens-span-count"), case]
        if case == "device":
            runtime = glob.glob(os.path.join(build, "**", "liblens_simulated_cudart.so"),
                                recursive=True)
            if runtime:
                env["LENS_CUDA_RUNTIME"] = runtime[0]
    # The least of `repeats` runs: what the threads' interleaving adds (a
    # record the export thread had not returned yet, a wake-up) only adds.
    runs = [(count(command, env, n), count(command, env, 2 * n)) for _ in range(repeats)]
    calling = min(two.get(1, 0) - one.get(1, 0) for one, two in runs) / n
    every = min(sum(two.values()) - sum(one.values()) for one, two in runs) / n
    return calling, every


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=CASES)
    parser.add_argument("--build", default="build")
    parser.add_argument("--spans", type=int, default=5000,
                        help="N (at most 8192: 2N spans must come from the warmed record pool)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--check", metavar="BUDGETS")
    args = parser.parse_args()
    if not 1 <= args.spans <= 8192:
        parser.error("--spans: 1 to 8192 (2N spans must come from the warmed record pool)")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (scripts/bootstrap installs it): not counted")
        return 77
    budgets = {}
    if args.check:
        with open(args.check) as f:
            budgets = json.load(f)["calling_thread"]
        args.cases = list(budgets)
    print(f"| case | calling thread | every thread | budget |")
    print(f"|---|---|---|---|")
    over = []
    for case in args.cases:
        if case == "python" and not os.path.isdir(os.path.join(args.build, "python", "lens")):
            print(f"| {case} | not built | | |")
            continue
        calling, every = per_span(case, args.build, args.spans, args.repeats)
        budget = budgets.get(case)
        print(f"| {case} | {calling:.1f} | {every:.1f} | {budget if budget else ''} |", flush=True)
        if budget is not None and calling > 1.1 * budget:
            over.append(f"{case}: {calling:.1f} instructions per span, over its budget {budget} "
                        f"by more than 10%")
    for line in over:
        print("OVER BUDGET " + line)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
