#!/usr/bin/env bash
# `mpirun -n K lens analyze|summary|check RUN` prints what one process
# reading one stream (--threads 1) prints, byte for byte, with the same exit
# code, for K = 1 (--mpi), 2, 3 and 4, and so does one process split over 2
# and 3 threads (analyze, summary and check; split_threads.h): on a trainer run of PP2 x DP2 with clock samples and an injected
# clock offset, whose 10 steps 3 and 4 processes do not divide evenly, as
# JSON and as the table; on a long run made from it by bench/run_maker.py
# (many lines per rank); on a faulty copy (a span delivered twice, a rank's
# step span in an earlier step's trace, a span arriving steps late) that
# `lens check` fails, whose faults cross the processes' ranges; and on the
# run with one rank's file corrupt in the middle: the same error as one
# process names, exit 2 from the job, and no process left waiting (the
# timeout).
#   mpi_analyze_test.sh LENS LENS_TRAIN RUN_MAKER MPIRUN [MPIRUN ARGS...]
set -euo pipefail
lens=$1 train=$2 maker=$3
shift 3
mpirun=("$@")
work=$(mktemp -d "${TMPDIR:-/tmp}/lens-mpi-analyze.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$train" --pp 2 --dp 2 --test-clock-offsets-us 0,3000,-2000,1500 --microbatches 4 --steps 10 \
  --layers 4 --hidden 16 --microbatch-size 4 --otel-enabled=true \
  --otel-span-groups per_step,microbatch --trace-dir "$work/traces" > "$work/train.log" 2>&1 ||
  fail "the trainer: $(tail -5 "$work/train.log")"
run=$(ls -d "$work"/traces/*/)
python3 "$maker" "$run" "$work/long" --mb 6 --batch-spans 64 2> /dev/null
# The faulty copy: every span on a line of its own (as an exporter that
# flushes each span writes), then its faults.
python3 - "$run" "$work/faulty" <<'PY'
import copy, json, pathlib, sys
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
dst.mkdir()
def step_of(span):
    if span["name"] != "megatron.train_step":
        return None
    for a in span.get("attributes", []):
        if a["key"] == "dl.step":
            return int(a["value"]["intValue"])
    return None
for f in sorted(src.glob("*.otlp.jsonl")):
    lines = []  # (span, its request as a line)
    for line in f.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    one = copy.deepcopy(rs)
                    one["scopeSpans"] = [dict(ss, spans=[span])]
                    lines.append([span, json.dumps({"resourceSpans": [one]}, separators=(",", ":"))])
    ends = {step_of(s): i for i, (s, _) in enumerate(lines) if step_of(s) is not None}
    if f.name == "rank-1.otlp.jsonl":  # a span of step 8 delivered again after step 9's
        lines.insert(ends[9] + 1, lines[ends[8] - 1])
    if f.name == "rank-2.otlp.jsonl":  # a span of step 4 arrives after step 8's step span
        lines.insert(ends[8] + 1, lines.pop(ends[3] + 1))
    text = "".join(l + "\n" for _, l in lines)
    if f.name == "rank-3.otlp.jsonl":  # step 7's step span in step 2's trace
        step7 = lines[ends[7]][1]
        text = text.replace(step7, step7.replace(lines[ends[7]][0]["traceId"],
                                                 lines[ends[2]][0]["traceId"]))
    (dst / f.name).write_text(text)
PY

# A rank's first batch delivered again at the end of its file: its step
# spans twice in the step index, which then cuts nowhere (split_steps: the
# first part reads the whole run).
cp -r "$run" "$work/again"
head -1 "$work/again/rank-1.otlp.jsonl" >> "$work/again/rank-1.otlp.jsonl"

same_as_one_process() {  # COMMAND FORM TARGET
  local command=$1 form=$2 target=$3 one=0 mpi
  # shellcheck disable=SC2086
  "$lens" "$command" $form --threads 1 "$target" > "$work/one.out" 2> "$work/one.err" || one=$?
  [ "$one" -le 1 ] || fail "one process: $command $form $target: $(tail -5 "$work/one.err")"
  ! grep -v '^lens: ' "$work/one.err" || fail "one process wrote more than lens's lines to stderr"
  for threads in 2 3; do
    split=0
    # shellcheck disable=SC2086
    "$lens" "$command" $form --threads "$threads" "$target" > "$work/split.out" 2> "$work/split.err" ||
      split=$?
    [ "$split" = "$one" ] ||
      fail "$threads threads ($command $form $target) exit $split, one stream $one: $(tail -5 "$work/split.err")"
    cmp -s "$work/one.out" "$work/split.out" ||
      { diff "$work/one.out" "$work/split.out" | head -20 >&2; fail "$threads threads printed other bytes ($command $form $target)"; }
    cmp -s "$work/one.err" "$work/split.err" ||
      { diff "$work/one.err" "$work/split.err" | head -20 >&2; fail "$threads threads warned otherwise ($command $form $target)"; }
  done
  for k in 1 2 3 4; do
    extra=()
    [ "$k" = 1 ] && extra=(--mpi)
    # 3 processes build the step index again, each a share of the files.
    [ "$k" = 3 ] && rm -f "$target/.lens-step-index"
    mpi=0
    # shellcheck disable=SC2086
    timeout 120 "${mpirun[@]}" -np "$k" "$lens" "$command" $form "${extra[@]}" "$target" \
      > "$work/mpi.out" 2> "$work/mpi.err" || mpi=$?
    [ "$mpi" = "$one" ] ||
      fail "$k processes ($command $form $target) exit $mpi, one process $one: $(tail -5 "$work/mpi.err")"
    cmp -s "$work/one.out" "$work/mpi.out" ||
      { diff "$work/one.out" "$work/mpi.out" | head -20 >&2; fail "$k processes printed other bytes ($command $form $target)"; }
    # What lens said (mpirun adds its own lines when a process exits non-zero).
    grep '^lens: ' "$work/mpi.err" > "$work/mpi.warnings" || true
    cmp -s "$work/one.err" "$work/mpi.warnings" ||
      { diff "$work/one.err" "$work/mpi.warnings" | head -20 >&2; fail "$k processes warned otherwise ($command $form $target)"; }
    echo "ok: $k processes, $command $form $(basename "$target"): $(wc -c < "$work/mpi.out") bytes and exit $one as one process"
  done
}
for target in "$run" "$work/long" "$work/faulty" "$work/again"; do
  for form in --json ""; do
    same_as_one_process analyze "$form" "$target"
    same_as_one_process summary "$form" "$target"
  done
  same_as_one_process check "" "$target"
done
# The faults are found (so the comparison above compared them).
"$lens" check "$work/faulty" > "$work/faulty.out" 2>&1 && fail "check passed the faulty run"
for fault in "repeats a span read before" "two steps share one trace" "came after their step was read"; do
  grep -q "$fault" "$work/faulty.out" || fail "check of the faulty run does not say '$fault': $(head -20 "$work/faulty.out")"
done
"$lens" check "$work/again" > "$work/again.out" 2>&1 && fail "check passed the run with a batch twice"
grep -q "repeats a span read before" "$work/again.out" ||
  fail "check of the run with a batch twice: $(head -20 "$work/again.out")"
# The step index is kept beside the run and used again.
[ -s "$run/.lens-step-index" ] || fail "no step index beside the run"

# A corrupt line in the middle of rank 1's file.
cp -r "$work/long" "$work/corrupt"
file="$work/corrupt/rank-1.otlp.jsonl"
lines=$(wc -l < "$file")
middle=$((lines / 2))
sed -i "${middle}s/\"spanId\":/\"spanId\":1,\"x\":/" "$file"
if "$lens" analyze --json --threads 1 "$work/corrupt" > /dev/null 2> "$work/one.err"; then
  fail "one process read the corrupt run"
fi
grep -q "rank-1.otlp.jsonl:$middle: not an OTLP/JSON request" "$work/one.err" ||
  fail "one process's error: $(cat "$work/one.err")"
for threads in 2 3; do
  status=0
  "$lens" analyze --json --threads "$threads" "$work/corrupt" > /dev/null 2> "$work/split.err" ||
    status=$?
  [ "$status" = 2 ] || fail "$threads threads read the corrupt run (exit $status)"
  cmp -s "$work/one.err" "$work/split.err" ||
    fail "$threads threads' error: $(cat "$work/split.err") (one stream: $(cat "$work/one.err"))"
done
for k in 2 3; do
  status=0
  timeout 120 "${mpirun[@]}" -np "$k" "$lens" analyze --json "$work/corrupt" \
    > /dev/null 2> "$work/mpi.err" || status=$?
  [ "$status" != 0 ] || fail "$k processes read the corrupt run"
  [ "$status" != 124 ] || fail "$k processes did not finish (a process left waiting)"
  grep -qF "$(grep '^lens: ' "$work/one.err")" "$work/mpi.err" ||
    fail "$k processes' error: $(cat "$work/mpi.err") (one process: $(cat "$work/one.err"))"
  echo "ok: $k processes stop at the corrupt line with one process's error (exit $status)"
done
