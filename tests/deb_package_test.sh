#!/usr/bin/env bash
# Builds the .deb with CPack from BUILD_DIR, checks its contents and declared
# dependencies, unpacks it into a temporary root and runs `lens --version`
# from there.
#   deb_package_test.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$build" && cpack -G DEB -B "$work/out" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/out/lens_*.deb)
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/lens ./usr/include/lens/telemetry.h ./usr/lib/cmake/lens/lensConfig.cmake \
         ./usr/lib/pkgconfig/lens.pc; do
  grep -q " $f\$" <<<"$contents" || grep -q " $f " <<<"$contents" || { echo "FAIL: $f missing from $deb"; exit 1; }
done
depends=$(dpkg-deb --field "$deb" Depends)
echo "Depends: $depends"
grep -q "libcurl" <<<"$depends" || { echo "FAIL: no libcurl dependency declared"; exit 1; }
dpkg -x "$deb" "$work/root"
version=$("$work/root/usr/bin/lens" --version)
echo "$version"
[ "$version" = "lens $(dpkg-deb --field "$deb" Version)" ] || { echo "FAIL: version mismatch"; exit 1; }
echo "ok: $(basename "$deb") installs into a root and lens --version runs from it"
