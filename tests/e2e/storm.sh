#!/usr/bin/env bash
# End-to-end tests of the run-storm scenarios through the kbrun binary:
# taxi_50runs against the embedded simulator (every file, every run
# accounted for, a plot per op), the same scenario unchanged against a
# standalone `kbrun sim` with both API versions (nothing left behind),
# failed thresholds, Ctrl-C with cleanup, pipeline_service and kfp_probe.
# tests/e2e/storm_check.lua does the checking.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
CHECK="$SRC/tests/e2e/storm_check.lua"
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/storm.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
SIM_PID=
cleanup() { [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
passed=0 failed=0

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
expect_code() { [ "$1" = "$2" ] || { fail "exit code $1, expected $2"; sed 's/^/    /' "$WORK/stderr" >&2; }; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
exp_dir() { ls -d "$1"/*/ 2>/dev/null | head -1 | sed 's:/$::'; }
check() { # check ARGS... : runs storm_check.lua
  "$KBRUN" -q -o "$WORK/checks" "$CHECK" "$@" >"$WORK/check.out" 2>&1 || { fail "$(cat "$WORK/check.out")"; }
}
run() { # run OUT ARGS...
  local out=$1; shift
  (cd "$SRC" && "$KBRUN" -o "$out" "$@") >"$WORK/stdout" 2>"$WORK/stderr"
  CODE=$?
}

begin taxi-embedded
run "$WORK/taxi" scenarios/taxi_50runs.lua
expect_code "$CODE" 0
expect_in "$WORK/stdout" "Succeeded"
expect_in "$WORK/stdout" "ok   success_rate"
check dir="$(exp_dir "$WORK/taxi")" check=taxi runs=50
end

begin thresholds-fail
run "$WORK/timeout" scenarios/taxi_50runs.lua num_runs=5 run_timeout=100
expect_code "$CODE" 99
expect_in "$WORK/stdout" "FAIL runs.timed_out"
expect_in "$WORK/stdout" "Timed out"
check dir="$(exp_dir "$WORK/timeout")" check=timeout runs=5
end

begin bad-parameter
run "$WORK/bad" scenarios/taxi_50runs.lua num_runs=0
expect_code "$CODE" 2 # a usage error (kb.params.refuse; tests/e2e/user_errors.sh)
expect_in "$WORK/stderr" "kb.kfp.storm: num_runs must be an integer from 1 to 100000, got 0"
run "$WORK/bad" scenarios/taxi_50runs.lua num_run=3
expect_code "$CODE" 2
expect_in "$WORK/stderr" "unknown parameter 'num_run'"
end

# A standalone simulator; its first line of output is its URL.
"$KBRUN" sim --listen 127.0.0.1:0 >"$WORK/sim.out" 2>&1 &
SIM_PID=$!
URL=
for _ in $(seq 100); do
  URL=$(head -1 "$WORK/sim.out" 2>/dev/null | grep -o 'http://[0-9.:]*')
  [ -n "$URL" ] && break
  sleep 0.1
done

begin standalone-sim
if [ -z "$URL" ]; then fail "kbrun sim did not start: $(cat "$WORK/sim.out")"; else
  for api in v1beta1 v2beta1; do
    run "$WORK/standalone-$api" scenarios/taxi_50runs.lua host="$URL" api=$api
    expect_code "$CODE" 0
    expect_in "$WORK/stderr" "standalone simulator"
    check dir="$(exp_dir "$WORK/standalone-$api")" check=taxi runs=50
  done
  check check=empty url="$URL"
fi
end

begin ctrl-c-cleans-up
if [ -n "$URL" ]; then
  # Polls 10 cluster-hours apart: the storm waits until it is interrupted.
  (cd "$SRC" && exec "$KBRUN" -o "$WORK/int" scenarios/taxi_50runs.lua host="$URL" num_runs=20 \
    run_status_polling_interval_sec=36000) >"$WORK/stdout" 2>"$WORK/stderr" &
  PID=$!
  for _ in $(seq 200); do
    J=$(ls "$WORK"/int/*/output/journal.jsonl 2>/dev/null | head -1)
    [ -n "$J" ] && [ "$(grep -c '"run.created"' "$J")" = 20 ] && break
    sleep 0.05
  done
  sleep 0.2
  kill -INT "$PID"
  wait "$PID"
  expect_code $? 130
  check dir="$(exp_dir "$WORK/int")" check=interrupted runs=20
  check check=empty url="$URL"
fi
end

kill "$SIM_PID" 2>/dev/null
wait "$SIM_PID" 2>/dev/null
SIM_PID=

begin pipeline-service
run "$WORK/pipelines" scenarios/pipeline_service.lua api=v2beta1
expect_code "$CODE" 0
check dir="$(exp_dir "$WORK/pipelines")" check=pipelines
end

begin probe
run "$WORK/probe" scenarios/kfp_probe.lua start_concurrency=4 max_concurrency=16 polls_per_step=1 max_p99=0.001
expect_code "$CODE" 0
expect_in "$WORK/stderr" "the server broke at 4 concurrent runs"
check dir="$(exp_dir "$WORK/probe")" check=probe
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
