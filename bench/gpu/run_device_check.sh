#!/bin/bash
# The device-time check on a machine with an NVIDIA GPU and PyTorch with CUDA
# (docs/device-time.md, "On a real GPU"); at most a few minutes. Builds
# liblens and the Python module only (no tests, benchmarks, MPI or libtorch
# adapter), times matrix products in device-timed spans against
# torch.cuda.Event, then runs the Python pipeline example with two ranks on
# the one GPU and checks its traces. Results go to $OUT (or ./gpu-out).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
nvidia-smi -L | tee "$out/gpu.txt" || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DLENS_BUILD_TESTS=OFF \
  -DLENS_BUILD_BENCHMARKS=OFF -DLENS_BUILD_EXAMPLES=OFF -DLENS_WITH_MPI=OFF \
  -DLENS_WITH_TORCH=OFF -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" \
  -DPython3_EXECUTABLE="$(command -v python3)" > "$out/configure.log" 2>&1 \
  || { tail -20 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target lens_python lens-cli > "$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log"; exit 1; }
export PYTHONPATH=$PWD/build-gpu/python
python3 bench/gpu/device_time_check.py --out "$out/products" 2>&1 | tee "$out/products.txt"
# Megatron's spans through the OpenTelemetry API, device-timed with no
# call-site change, beside the same spans host-timed (needs opentelemetry-api).
if python3 -c 'import opentelemetry.trace' 2>/dev/null; then
  LENS_BIN=$PWD/build-gpu/bin/lens python3 bench/gpu/megatron_device_spans.py \
    --out "$out/megatron" 2>&1 | tee "$out/megatron.txt"
else
  echo "megatron_device_spans: skipped: no opentelemetry-api for $(command -v python3)" \
    | tee "$out/megatron.txt"
fi
python3 python/examples/pp_train.py --world 2 --steps 5 --device cuda \
  --trace-dir "$out/pp" 2>&1 | tee "$out/pp_train.txt"
build-gpu/bin/lens check "$out"/pp/* 2>&1 | tee "$out/check.txt"
build-gpu/bin/lens analyze "$out"/pp/* 2>&1 | tee "$out/analyze.txt"
# The package as a Python user installs it (README, "Python"): pip builds
# the wheel into a fresh virtual environment that sees this machine's
# PyTorch 2.x, and torchrun starts the example's two ranks over Gloo.
python3 -m venv --system-site-packages "$out/venv"
LENS_WHEEL_BUILD_DIR=$PWD/build-wheel "$out/venv/bin/pip" install --no-build-isolation --no-index . \
  > "$out/pip.log" 2>&1 || { tail -30 "$out/pip.log"; exit 1; }
(cd "$out" && env -u PYTHONPATH "$out/venv/bin/python" -m torch.distributed.run --nproc_per_node 2 \
  "$OLDPWD/python/examples/pp_train.py" --steps 5 --trace-dir "$out/torchrun") 2>&1 | tee "$out/torchrun.txt"
build-gpu/bin/lens check "$out"/torchrun/* 2>&1 | tee "$out/torchrun_check.txt"
rm -rf "$out/venv"
