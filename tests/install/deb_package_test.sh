#!/usr/bin/env bash
# Builds the .deb with CPack from BUILD_DIR, checks its contents and declared
# dependencies, installs it with dpkg into a temporary root (its own dpkg
# database; the dependencies are this machine's), and runs `lens --version`
# and the Python package from there.
#   deb_package_test.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$build" && cpack -G DEB -B "$work/out" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/out/lens_*.deb)
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/lens ./usr/include/lens/telemetry.h ./usr/lib/cmake/lens/lensConfig.cmake \
         ./usr/lib/pkgconfig/lens.pc ./usr/lib/liblens.a ./usr/lib/python3/dist-packages/lens/__init__.py; do
  grep -q " $f\$" <<<"$contents" || grep -q " $f " <<<"$contents" || { echo "FAIL: $f missing from $deb"; exit 1; }
done
depends=$(dpkg-deb --field "$deb" Depends)
echo "Depends: $depends"
grep -q "libcurl" <<<"$depends" || { echo "FAIL: no libcurl dependency declared"; exit 1; }
grep -Eq " ./usr/lib/liblens\.so\.[0-9]" <<<"$contents" || { echo "FAIL: liblens.so missing from $deb"; exit 1; }
root="$work/root"
mkdir -p "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/info"
touch "$root/var/lib/dpkg/status"
dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless \
     --log=/dev/null -i "$deb" > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
grep -q "^Status: install ok installed" "$root/var/lib/dpkg/status" || { echo "FAIL: dpkg did not record the install"; exit 1; }
version=$(LD_LIBRARY_PATH="$root/usr/lib" "$root/usr/bin/lens" --version)
echo "$version"
[ "$version" = "lens $(dpkg-deb --field "$deb" Version)" ] || { echo "FAIL: version mismatch"; exit 1; }
py_version=$(PYTHONPATH="$root/usr/lib/python3/dist-packages" /usr/bin/python3 -c \
  'import lens, os; assert lens.__file__.startswith(os.environ["PYTHONPATH"]), lens.__file__; print(lens.__version__)')
[ "lens $py_version" = "$version" ] || { echo "FAIL: the Python package from the root says $py_version"; exit 1; }
echo "ok: $(basename "$deb") installs with dpkg into a root; lens --version and the Python package run from it"
