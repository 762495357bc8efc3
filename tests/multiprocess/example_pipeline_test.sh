#!/usr/bin/env bash
# Runs the integration guide's example under mpirun and checks its traces
# with `lens check`.
#   example_pipeline_test.sh MPIRUN_COMMAND... -- EXAMPLE LENS
set -euo pipefail
mpirun=()
while [ "$1" != "--" ]; do mpirun+=("$1"); shift; done
shift
example=$1
lens=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${mpirun[@]}" -np 3 -x MEGATRON_OTEL_ENABLED=1 -x LENS_TRACE_DIR="$work" "$example" 3 5
"$lens" check "$work"/*/
