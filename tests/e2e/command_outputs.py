#!/usr/bin/env python3
"""Every lens command's output on fixed runs, compared with the outputs kept
in tests/data/outputs: a change of structure must not change one byte that a
user sees (stdout, stderr, exit code, files written).

    command_outputs.py LENS            compare (exit 1 naming each difference)
    command_outputs.py LENS --update   write the outputs as they are now

The runs (tests/data/runs) were recorded once and are read as they are:
run-pp4 (4 stages, a slowed stage, clock samples), run-tp2pp2dp2 (TP x PP x
DP), run-interleaved (2 model chunks a stage, every span group),
upstream-tp2pp4dp2 (Megatron-LM's own traces in a collector's protobuf file).
run-faulty is run-pp4 made faulty here: a rank's span dropped, another's
file cut in the middle of a line.

Outputs of at most 64 KiB are kept whole (a difference is shown as a diff);
larger ones (HTML pages, viewers' files) by their SHA-256. Updating is a
deliberate change of what lens prints: review the diff it leaves in git.
"""

import argparse
import difflib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
RUNS = os.path.join(DATA, "runs")
OUTPUTS = os.path.join(DATA, "outputs")
WHOLE_LIMIT = 64 * 1024

RUN_NAMES = ["run-pp4", "run-tp2pp2dp2", "run-interleaved", "upstream-tp2pp4dp2", "run-faulty"]


def make_faulty(work):
    """run-pp4 with rank 1's fifth line dropped and rank 3's file cut in the
    middle of its last line."""
    src = os.path.join(work, "run-pp4")
    dst = os.path.join(work, "run-faulty")
    shutil.copytree(src, dst)
    path = os.path.join(dst, "rank-1.otlp.jsonl")
    with open(path, "rb") as f:
        lines = f.readlines()
    del lines[4]
    with open(path, "wb") as f:
        f.writelines(lines)
    path = os.path.join(dst, "rank-3.otlp.jsonl")
    with open(path, "rb") as f:
        data = f.read()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    with open(path, "wb") as f:
        f.write(data[: last + (len(data) - last) // 2])


def cases():
    """(name, argv after `lens`, files the command writes) for every case."""
    out = []
    for run in RUN_NAMES:
        out += [
            (f"{run}.check", ["check", run], []),
            (f"{run}.summary", ["summary", run], []),
            (f"{run}.summary-json", ["summary", "--json", run], []),
            (f"{run}.analyze", ["analyze", run], []),
            (f"{run}.analyze-json", ["analyze", "--json", run], []),
            (f"{run}.analyze-per-step", ["analyze", "--per-step", run], []),
            (f"{run}.timeline", ["timeline", run, "-o", "timeline.html"], ["timeline.html"]),
            (f"{run}.report", ["report", run, "-o", "report.html"], ["report.html"]),
            (f"{run}.export", ["export", run, "--perfetto", "perfetto.json", "--jaeger", "jaeger.json"],
             ["perfetto.json", "jaeger.json"]),
        ]
    out += [
        ("run-pp4.check-raw-clock", ["check", "--raw-clock", "run-pp4"], []),
        ("run-pp4.summary-one-thread", ["summary", "--threads", "1", "run-pp4"], []),
        ("upstream-tp2pp4dp2.analyze-rank-order",
         ["analyze", "--rank-order", "tp-cp-ep-pp-dp", "upstream-tp2pp4dp2"], []),
        ("diff.pp4-interleaved", ["diff", "run-pp4", "run-interleaved"], []),
        ("diff.pp4-pp4", ["diff", "run-pp4", "run-pp4"], []),
        ("no-such-run.analyze", ["analyze", "no-such-run"], []),
        ("run-pp4.timeline-bad-steps", ["timeline", "run-pp4", "-o", "t.html", "--steps", "5-2"],
         ["t.html"]),
        ("run-pp4.timeline-no-step", ["timeline", "run-pp4", "-o", "t.html", "--steps", "40-41"],
         ["t.html"]),
        ("run-pp4.export-no-format", ["export", "run-pp4"], []),
        ("run-pp4.check-bad-rank-order", ["check", "--rank-order", "tp-pp", "run-pp4"], []),
        ("upload.bad-endpoint", ["upload", "run-pp4", "--endpoint", "ftp://host/v1/traces"], []),
        ("help", ["--help"], []),
        ("no-command", [], []),
        ("version", ["--version"], []),
    ]
    for command in ["check", "summary", "analyze", "diff", "timeline", "report", "export", "upload"]:
        out.append((f"help.{command}", [command, "--help"], []))
    return out


def outputs_of(lens, work, argv, files):
    """[(part name, bytes)] of one command run in `work`."""
    for name in files:
        path = os.path.join(work, name)
        if os.path.exists(path):
            os.remove(path)
    env = dict(os.environ)
    for var in ("LENS_RANK_ORDER", "LENS_RUN", "LENS_TRACE_DIR"):
        env.pop(var, None)
    # argv[0] is "lens" wherever the build is, as the usage lines print it.
    done = subprocess.run(["lens"] + argv, executable=lens, cwd=work, capture_output=True,
                          env=env, timeout=300)
    parts = [("exit", b"%d\n" % done.returncode), ("stdout", done.stdout), ("stderr", done.stderr)]
    for name in files:
        path = os.path.join(work, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                parts.append((name, f.read()))
        else:
            parts.append((name, b"(not written)\n"))
    return parts


def kept_form(data):
    if len(data) <= WHOLE_LIMIT:
        return data
    return b"sha256 %s, %d bytes\n" % (hashlib.sha256(data).hexdigest().encode(), len(data))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lens")
    parser.add_argument("--update", action="store_true")
    args = parser.parse_args()
    lens = os.path.abspath(args.lens)

    work = tempfile.mkdtemp(prefix="lens-outputs-")
    try:
        for run in os.listdir(RUNS):
            shutil.copytree(os.path.join(RUNS, run), os.path.join(work, run))
        make_faulty(work)
        differences = []
        written = 0
        for name, argv, files in cases():
            for part, data in outputs_of(lens, work, argv, files):
                kept = os.path.join(OUTPUTS, f"{name}.{part}")
                now = kept_form(data)
                if args.update:
                    os.makedirs(OUTPUTS, exist_ok=True)
                    with open(kept, "wb") as f:
                        f.write(now)
                    written += 1
                    continue
                if not os.path.exists(kept):
                    differences.append(f"{name}.{part}: no kept output (run with --update)")
                    continue
                with open(kept, "rb") as f:
                    before = f.read()
                if before != now:
                    diff = difflib.unified_diff(
                        before.decode("utf-8", "replace").splitlines(),
                        now.decode("utf-8", "replace").splitlines(),
                        "kept", "now", lineterm="", n=1)
                    shown = "\n".join(list(diff)[:40])
                    differences.append(f"lens {' '.join(argv)}: {part} differs\n{shown}")
        if args.update:
            print(f"wrote {written} outputs under {os.path.relpath(OUTPUTS)}")
            return 0
        for d in differences:
            print(d, file=sys.stderr)
        print(f"{len(cases())} commands: {len(differences)} outputs differ from tests/data/outputs")
        return 1 if differences else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
