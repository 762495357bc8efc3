#!/usr/bin/env bash
# The runs behind docs/scale.md: the 8,192-rank example shape as users run
# it (TP 8 x PP 16 x DP 64, a 96-layer model, 24 microbatches, 2 s steps,
# span groups per_step,microbatch: the step, compute, p2p and TP collective
# spans) in world and pipeline scope, with and without an export filter
# (dp=0, tp=0, both) and a step budget; then the protocol's cost per rank as
# the logical rank count grows, without and with TP 8.
#   bench/run_scale_sim.sh [BUILD_DIR]
set -euo pipefail
sim=${1:-build}/bin/lens-scale-sim
shape=(--tp 8 --pp 16 --dp 64 --layers 96 --microbatches 24 --step-ms 2000
       --groups per_step,microbatch --max-ranks 1024 --steps 3)
for scope in world pipeline; do
  for extra in "" "--filter dp=0" "--filter tp=0" "--budget 6" "--filter dp=0,tp=0 --budget 6"; do
    echo "## $scope ${extra:-(no filter, no budget)}"
    # shellcheck disable=SC2086
    "$sim" "${shape[@]}" --scope "$scope" $extra
    echo
  done
done
echo "## protocol cost as the logical rank count grows (pp 4, dp = ranks / 4, 24 microbatches)"
for scope in world pipeline; do
  for ranks in 8 64 256 1024; do
    "$sim" --pp 4 --dp $((ranks / 4)) --microbatches 24 --steps 4 --max-ranks "$ranks" --scope "$scope" | tail -1 |
      sed "s/^/$scope $ranks ranks: /"
  done
done
echo "## the same with TP 8 (tp 8, pp 4, dp = ranks / 32, a 32-layer model: 16 TP collectives per pass)"
for scope in world pipeline; do
  for ranks in 64 256 1024; do
    "$sim" --tp 8 --pp 4 --dp $((ranks / 32)) --layers 32 --microbatches 24 --steps 4 --max-ranks "$ranks" \
      --scope "$scope" | tail -1 | sed "s/^/$scope $ranks ranks: /"
  done
done
