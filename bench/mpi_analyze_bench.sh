#!/usr/bin/env bash
# The figures behind docs/scale.md's "Analysis as an MPI job": a simulated
# job of 1,024 ranks (TP 4 x PP 4 x DP 64, the scale simulation's spans of
# Megatron's 1F1B schedule written in lens's layout), lengthened by
# bench/run_maker.py to about MB megabytes (a line per rank and step), then
# `lens analyze --json`, `lens summary --json` and `lens check`, each by one
# process and by an MPI job of 2 processes on this machine: the wall time of
# each, each process's peak memory, and whether the two printed the same
# bytes (the speed-up is the ratio of the two times).
#   bench/mpi_analyze_bench.sh [BUILD_DIR] [MB]
set -euo pipefail
build=${1:-build}
mb=${2:-800}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lens-mpi-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
lens="$build/bin/lens"

echo "## the run"
"$build/bin/lens-scale-sim" --tp 4 --pp 4 --dp 64 --microbatches 8 --steps 12 --max-ranks 1024 \
  --trace-dir "$work/sim" > /dev/null
python3 "$here/run_maker.py" "$work/sim" "$work/run" --mb "$mb" --batch-spans 128
rm -rf "$work/sim"
# The step index is built once, kept beside the run (a first job builds it).
/usr/bin/time -f "step index (rank 0, first job): %e s" \
  "${mpirun[@]}" -np 2 "$lens" analyze --json "$work/run" > /dev/null

for command in "analyze --json" "summary --json" "check"; do
  # shellcheck disable=SC2086
  {
    echo "## lens $command: one process"
    /usr/bin/time -f "one process: %e s, peak %M KB" "$lens" $command "$work/run" > "$work/one.out" ||
      echo "one process: exit $?"
    echo "## lens $command: an MPI job of 2 processes"
    /usr/bin/time -f "the job: %e s" "${mpirun[@]}" -np 2 \
      /usr/bin/time -f "a process: %e s, peak %M KB" "$lens" $command "$work/run" > "$work/two.out" ||
      echo "the job: exit $?"
  } 2>&1 | grep -v '^lens: ' || true
  if cmp -s "$work/one.out" "$work/two.out"; then
    echo "the same bytes as one process ($(wc -c < "$work/one.out") bytes)"
  else
    echo "DIFFERENT output"
    exit 1
  fi
done
