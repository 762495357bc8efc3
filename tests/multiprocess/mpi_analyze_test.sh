#!/usr/bin/env bash
# `mpirun -n K lens analyze RUN` prints what one process prints, byte for
# byte, for K = 1 (--mpi), 2, 3 and 4: on a trainer run of PP2 x DP2 with
# clock samples and an injected clock offset, whose 10 steps 3 and 4
# processes do not divide evenly, as JSON and as the table; on a long run
# made from it by bench/run_maker.py (many lines per rank); and on the run
# with one rank's file corrupt in the middle: the same error as one process
# names, exit 2 from the job, and no process left waiting (the timeout).
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
for target in "$run" "$work/long"; do
  for form in --json ""; do
    # shellcheck disable=SC2086
    "$lens" analyze $form "$target" > "$work/one.out" 2> "$work/one.err" || fail "one process"
    for k in 1 2 3 4; do
      extra=()
      [ "$k" = 1 ] && extra=(--mpi)
      # shellcheck disable=SC2086
      timeout 120 "${mpirun[@]}" -np "$k" "$lens" analyze $form "${extra[@]}" "$target" \
        > "$work/mpi.out" 2> "$work/mpi.err" || fail "$k processes ($form $target): $(tail -5 "$work/mpi.err")"
      cmp -s "$work/one.out" "$work/mpi.out" ||
        { diff "$work/one.out" "$work/mpi.out" | head -20 >&2; fail "$k processes printed other bytes ($form $target)"; }
      grep -v '^\[' "$work/mpi.err" | grep -v '^$' > "$work/mpi.warnings" || true
      cmp -s "$work/one.err" "$work/mpi.warnings" ||
        { diff "$work/one.err" "$work/mpi.warnings" | head -20 >&2; fail "$k processes warned otherwise"; }
      echo "ok: $k processes, analyze $form $(basename "$target"): $(wc -c < "$work/mpi.out") bytes as one process"
    done
  done
done
# The step index is kept beside the run and used again.
[ -s "$run/.lens-step-index" ] || fail "no step index beside the run"

# A corrupt line in the middle of rank 1's file.
cp -r "$work/long" "$work/corrupt"
file="$work/corrupt/rank-1.otlp.jsonl"
lines=$(wc -l < "$file")
middle=$((lines / 2))
sed -i "${middle}s/\"spanId\":/\"spanId\":1,\"x\":/" "$file"
if "$lens" analyze --json "$work/corrupt" > /dev/null 2> "$work/one.err"; then
  fail "one process read the corrupt run"
fi
grep -q "rank-1.otlp.jsonl:$middle: not an OTLP/JSON request" "$work/one.err" ||
  fail "one process's error: $(cat "$work/one.err")"
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
