#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a
# bounded time over its kept corpus in tests/fuzz/corpus/<target>.
#   run_fuzzers.sh SOURCE_DIR BUILD_DIR SECONDS_PER_TARGET
set -euo pipefail
src=$1
out=$2/fuzz
seconds=${3:-15}
mkdir -p "$out"
clang=$(command -v clang++ || command -v clang++-14)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/include" -I"$src/src/core" -I"$src/src/telemetry" -I"$src/src/analysis" -I"$src/src/analysis/model"
       -I"$src/src/analysis/reading" -I"$src/src/pp"
       -I"$src/tests/support")
declare -A libs=([otlp_json_reader]="-lfmt -lzstd -lsimdjson")
declare -A sources=(
  [carrier]="src/core/carrier.cc src/core/trace_context.cc src/core/ids.cc"
  [trace_context]="src/core/trace_context.cc src/core/ids.cc"
  # The reader target takes the analysis's three parts whole (reading,
  # model, the analysers), so a new file there cannot leave it unlinked;
  # with the DOM reference parser it is compared with on every line.
  [otlp_json_reader]="$(cd "$src" && ls src/analysis/*.cc src/analysis/model/*.cc src/analysis/reading/*.cc | tr '\n' ' ') tests/support/reference_request_parser.cc"
  [step_check]="src/pp/step_check.cc src/pp/step_budget.cc src/pp/pipeline_stats.cc src/comm/communicator.cc src/core/ids.cc"
  [config]="src/telemetry/config.cc src/telemetry/settings.cc src/otlp/redacted_url.cc src/telemetry/parallel_layout.cc src/telemetry/setting.cc src/core/span_groups.cc src/core/resource.cc src/core/ids.cc src/core/sampler.cc"
)
for target in carrier trace_context otlp_json_reader config step_check; do
  files=()
  for f in ${sources[$target]}; do files+=("$src/$f"); done
  "$clang" "${flags[@]}" "$src/tests/fuzz/${target}_fuzzer.cc" "${files[@]}" ${libs[$target]:-} -o "$out/${target}_fuzzer"
  work="$out/corpus-$target"
  rm -rf "$work"
  cp -r "$src/tests/fuzz/corpus/$target" "$work"
  echo "fuzzing $target for ${seconds}s"
  "$out/${target}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    "$work" 2>&1 | tail -n 12
done
echo "fuzzing finished without a crash"
