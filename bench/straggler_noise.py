#!/usr/bin/env python3
"""How often `lens analyze` names a straggler where there is none: the demo's
layout (4 stages on this machine's cores, nothing slowed) run N times, and
optionally the same with the other cores kept busy; then the same layout
with one rank slowed 3x from step 4, which must be named every time.

  bench/straggler_noise.py [--runs 10] [--busy] [--steps 12]

Prints, per run, the stragglers named and the ranks not named (within the
run's noise), and a summary line. Not a test: the machine's load decides
how noisy a run is; the verdicts must stand regardless (docs/analysis.md,
"Stragglers and imbalance").
"""

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "build", "bin", "lens-train")
LENS = os.path.join(ROOT, "build", "bin", "lens")
LAYOUT = ["--pp", "4", "--microbatches", "8", "--hidden", "192", "--microbatch-size", "32",
          "--otel-enabled=true", "--otel-span-groups", "per_step,microbatch"]


def spin():
    while True:
        pass


def one_run(steps, extra):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([TRAIN, *LAYOUT, "--steps", str(steps), "--trace-dir", d, *extra],
                       check=True, capture_output=True)
        run = os.path.join(d, os.listdir(d)[0])
        out = subprocess.run([LENS, "analyze", "--json", run], check=True, capture_output=True,
                             text=True).stdout
    a = json.loads(out)
    return a["stragglers"], a["not_named"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--busy", action="store_true", help="keep the other cores busy")
    parser.add_argument("--slow-factor", type=float, default=5,
                        help="the slowed runs' factor (5: the effect 5x the noise floor)")
    args = parser.parse_args()
    busy = []
    if args.busy:
        for _ in range(max(1, (os.cpu_count() or 2) - 1)):
            p = multiprocessing.Process(target=spin, daemon=True)
            p.start()
            busy.append(p)
    try:
        named_balanced = 0
        for i in range(args.runs):
            named, not_named = one_run(args.steps, [])
            named_balanced += len(named)
            print(f"balanced run {i}: named {[(s['rank'], round(s['ratio'], 2)) for s in named]}, "
                  f"not named {[(s['rank'], round(s['ratio'], 2), round(s['noise'], 2)) for s in not_named]}")
        missed = 0
        for i in range(args.runs):
            named, not_named = one_run(args.steps, ["--slow-rank", "2", "--slow-factor",
                                                    str(args.slow_factor),
                                            "--slow-from-step", "4"])
            ok = any(s["rank"] == 2 for s in named)
            missed += not ok
            print(f"slowed run {i}: named {[(s['rank'], round(s['ratio'], 2)) for s in named]}, not named {[(s['rank'], round(s['ratio'], 2), round(s['noise'], 2), s['since_step']) for s in not_named]}")
        print(f"summary: {args.runs} balanced runs of {args.steps} steps"
              f"{' with the other cores busy' if args.busy else ''}: {named_balanced} stragglers "
              f"named; {args.runs} runs with rank 2 slowed {args.slow_factor:g}x from step 4: "
              f"{missed} missed")
    finally:
        for p in busy:
            p.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
