#!/usr/bin/env bash
# Installs lens from BUILD_DIR into a temporary prefix, then builds and runs
# a small out-of-tree consumer twice: with find_package(lens) and with
# pkg-config. Checks the consumer links only what it uses (no libtorch, no MPI).
#   install_consumer_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/lens/telemetry.h"
test -f "$work/prefix/include/lens/version.h"
test -f "$work/prefix/lib/cmake/lens/lensConfig.cmake"
test -f "$work/prefix/lib/pkgconfig/lens.pc"

cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
# (ldd's output is captured first: with pipefail, `ldd | grep -q` fails when
# grep stops reading early.)
"$work/consumer/consumer"
libs=$(ldd "$work/consumer/consumer")
if grep -Eq 'libtorch|libmpi|libc10' <<<"$libs"; then
  echo "FAIL: the find_package consumer links libtorch or MPI"; exit 1
fi

"$work/consumer/consumer_shared"
if ! grep -q "liblens.so" <<<"$(ldd "$work/consumer/consumer_shared")"; then
  echo "FAIL: the lens::shared consumer does not load liblens.so"; exit 1
fi
if grep -q "liblens.so" <<<"$libs"; then
  echo "FAIL: the lens::lens consumer loads liblens.so"; exit 1
fi

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
g++ "$src/tests/install/consumer/main.cc" -o "$work/consumer-pc" $(pkg-config --cflags --libs lens)
LD_LIBRARY_PATH="$work/prefix/lib" "$work/consumer-pc"
if grep -Eq 'libtorch|libmpi|libc10' <<<"$(LD_LIBRARY_PATH="$work/prefix/lib" ldd "$work/consumer-pc")"; then
  echo "FAIL: the pkg-config consumer links libtorch or MPI"; exit 1
fi
g++ "$src/tests/install/consumer/main.cc" -o "$work/consumer-pc-static" \
  $(pkg-config --cflags lens) "$work/prefix/lib/liblens.a" $(pkg-config --static --libs-only-l lens | sed 's/-llens//')
"$work/consumer-pc-static"
echo "ok: installed lens consumed through find_package and pkg-config"
