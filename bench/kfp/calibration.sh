#!/usr/bin/env bash
# taxi_50runs on the embedded simulator's calibrated default profile, once
# per seed, next to the 50-run result published with KFP's benchmark
# scripts. Prints one line per seed and the median over seeds; see
# bench/README.kfp.md.
#
#   bench/kfp/calibration.sh                  # seeds 1..10
#   SEEDS="1 2 3" KBRUN=build-release/kbrun bench/kfp/calibration.sh
#   ARGS="concurrency=1" bench/kfp/calibration.sh   # the notebook's sequential calls
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
KBRUN=${KBRUN:-$SRC/build/kbrun}
SEEDS=${SEEDS:-$(seq 1 10)}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/kfp-calibration.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
cd "$SRC"
for seed in $SEEDS; do
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout 300 "$KBRUN" -q --seed "$seed" -o "$OUT/runs" scenarios/taxi_50runs.lua ${ARGS:-} >/dev/null 2>&1 || true
  end=$(date +%s.%N)
  awk -v s="$seed" -v a="$start" -v b="$end" 'BEGIN { printf "%s %.2f\n", s, b - a }' >>"$OUT/wall.txt"
done
"$KBRUN" -q -o "$OUT/summary" "$HERE/calibration_summary.lua" dir="$OUT/runs" wall="$OUT/wall.txt"
