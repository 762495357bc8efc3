#!/usr/bin/env bash
# Runs a command with DIR on a file system of SIZE bytes (a tmpfs in a private
# mount namespace, so nothing outside sees it; works without root through a
# user namespace), then copies what the command wrote there to COPY_TO, and
# exits with the command's status.
#   with_small_disk.sh SIZE DIR COPY_TO command [args...]
set -euo pipefail
size=$1 dir=$2 copy_to=$3
shift 3
mkdir -p "$dir" "$copy_to"
exec unshare --user --map-root-user --mount bash -c '
  set -u
  mount -t tmpfs -o size="$1" lens-small-disk "$2" || { echo "with_small_disk: cannot mount a tmpfs on $2" >&2; exit 90; }
  dir=$2 copy_to=$3
  shift 3
  "$@"
  rc=$?
  cp -a "$dir"/. "$copy_to"/
  exit $rc' with_small_disk "$size" "$dir" "$copy_to" "$@"
