#!/usr/bin/env bash
# One bounded fuzz run, as ctest drives it:
#   ctest_run.sh <target binary> <seed corpus> <regressions> <work dir> <seconds>
# Replays every regression input first (each must now pass), then fuzzes for
# <seconds> over a scratch copy of the seed corpus. A crash leaves its input
# in <work dir>/crash-* (kept across runs) and fails the test.
set -euo pipefail
bin=$1 corpus=$2 regressions=$3 work=$4 seconds=$5
rm -rf "$work/corpus"
mkdir -p "$work/corpus"
cp "$corpus"/* "$work/corpus/"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
opts=(-timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$work/")
if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
  echo "== replaying $(ls "$regressions" | wc -l) regression input(s)"
  "$bin" "${opts[@]}" "$regressions"/*
fi
echo "== fuzzing for ${seconds}s"
"$bin" "${opts[@]}" -max_total_time="$seconds" -print_final_stats=1 "$work/corpus"
