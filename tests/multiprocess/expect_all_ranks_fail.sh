#!/usr/bin/env bash
# Runs a multi-rank command that must fail on every rank with a given
# message, and must not hang.
#   expect_all_ranks_fail.sh RANKS "MESSAGE" COMMAND...
set -u
ranks=$1
message=$2
shift 2
out=$(timeout 90 "$@" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -eq 124 ]; then
  echo "FAIL: the command hung (killed after 90 s)"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the command succeeded; expected every rank to fail"
  exit 1
fi
count=$(grep -c -- "$message" <<<"$out")
if [ "$count" -ne "$ranks" ]; then
  echo "FAIL: $count of $ranks ranks reported '$message'"
  exit 1
fi
echo "ok: all $ranks ranks failed with '$message' (exit $rc)"
