#!/usr/bin/env bash
# Runs the communication benchmarks at 2 and 4 ranks on MPI and c10d/Gloo and
# prints, for each, the medians and the ratios measured in that one run.
#   bench/run_comm_bench.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
for n in 2 4; do
  for mode in poll blocking; do
    "${mpirun[@]}" -np "$n" "$build/bin/lens_comm_bench_mpi" 2000 15 "$mode"
  done
done
for n in 2 4; do
  "$build/bin/lens_comm_bench_c10d" "$n" 200 31
done
