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

--breakdown prints, for each case, where a span's instructions go on the
calling thread: callgrind's inclusive and self counts per function (a
function's inlined parts counted as its own), per span, the top 10 by
inclusive count below the driver's loop.

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


def per_function(path):
    """Self and inclusive instructions per function from one callgrind file.

    Cost lines after a `calls=` line are the call's inclusive cost (added
    to the caller's inclusive count, unless it calls itself); every other
    cost line is the current function's own, whichever file (`fi=`, `fe=`:
    inlined code) it names."""
    names, files, self_cost, calls_cost, by_file = {}, {}, {}, {}, {}
    fn, callee, after_call, fl, here = None, None, False, None, None

    def name_of(ref, table=names):
        ref = ref.strip()
        if ref.startswith("("):
            key, _, rest = ref.partition(")")
            if rest.strip():
                table[key] = rest.strip()
            return table.get(key, key)
        return ref

    with open(path) as f:
        for line in f:
            if line.startswith("fl="):
                fl = here = name_of(line[3:], files)
            elif line.startswith(("fi=", "fe=")):
                here = name_of(line[3:], files)
            elif line.startswith(("cfi=", "cfl=")):
                name_of(line[4:], files)
            elif line.startswith("fn="):
                fn = name_of(line[3:])
                here = fl
            elif line.startswith("cfn="):
                callee = name_of(line[4:])
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if after_call:
                    if callee != fn:
                        calls_cost[fn] = calls_cost.get(fn, 0) + cost
                    after_call = False
                elif fn is not None:
                    self_cost[fn] = self_cost.get(fn, 0) + cost
                    key = (fn, os.path.basename(here or "?"))
                    by_file[key] = by_file.get(key, 0) + cost
    return ({f: (self_cost.get(f, 0), self_cost.get(f, 0) + calls_cost.get(f, 0))
             for f in set(self_cost) | set(calls_cost)}, by_file)


def breakdown(case, build, n):
    """The top 10 functions by inclusive count per span, calling thread."""
    command, env, n = case_command(case, build, n)
    runs = []
    for k in (n, 2 * n):
        with tempfile.TemporaryDirectory(prefix="lens-callgrind-") as out:
            callgrind(command, env, k, out)
            runs.append(per_function(f"{out}/out-01"))
    (one, one_files), (two, two_files) = runs
    rows = []
    for f in set(one) | set(two):
        s1, i1 = one.get(f, (0, 0))
        s2, i2 = two.get(f, (0, 0))
        rows.append(((i2 - i1) / n, (s2 - s1) / n, f))
    loop = max((r for r in rows if r[2].startswith("main::{lambda")), default=None)
    total = loop[0] if loop else max(r[0] for r in rows)
    rows = sorted((r for r in rows if r[0] >= 1 and r[0] < total - 0.5), reverse=True)[:10]
    print(f"\n`{case}`: {total:.0f} instructions per span on the calling thread\n")
    print("| function | inclusive | self |")
    print("|---|---|---|")
    for inclusive, own, f in rows:
        short = f.split("(")[0] if "(" in f and not f.startswith("(") else f
        print(f"| `{short}` | {inclusive:.0f} | {own:.0f} |")
    # The largest own counts by the source file their code comes from
    # (a function's inlined helpers: ids, comparisons, the registry).
    parts = sorted((((two_files.get(k, 0) - one_files.get(k, 0)) / n, k)
                    for k in set(one_files) | set(two_files)), reverse=True)
    print("\nOwn counts by function and the file their code is from (inlined parts):")
    for v, (f, file) in parts[:12]:
        if v >= 1:
            print(f"  {v:5.0f}  {f.split('(')[0]} <- {file}")


def callgrind(command, env, n, out):
    """Runs the driver for n spans under callgrind: a file per thread in out
    (out/out-01 the calling thread's)."""
    r = subprocess.run(["valgrind", "--tool=callgrind", "--fair-sched=yes",
                        "--separate-threads=yes",
                        f"--callgrind-out-file={out}/out"] + command + [str(n)],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(command)} {n} failed:\n{r.stdout}\n{r.stderr[-3000:]}")
    if "dropped 0" not in r.stdout and "dropped" in r.stdout:
        raise SystemExit(f"{command[-1]}: spans were dropped ({r.stdout.strip()}): unfair count")


def count(command, env, n):
    with tempfile.TemporaryDirectory(prefix="lens-callgrind-") as out:
        callgrind(command, env, n, out)
        return totals(out)


def case_command(case, build, n):
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
    return command, env, n


def per_span(case, build, n, repeats):
    command, env, n = case_command(case, build, n)
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
    parser.add_argument("--breakdown", action="store_true",
                        help="where the calling thread's instructions go, per function")
    args = parser.parse_args()
    if not 1 <= args.spans <= 8192:
        parser.error("--spans: 1 to 8192 (2N spans must come from the warmed record pool)")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (scripts/bootstrap installs it): not counted")
        return 77
    if args.breakdown:
        for case in args.cases:
            breakdown(case, args.build, args.spans)
        return 0
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
