#!/usr/bin/env bash
# Ctrl-C prints the end-of-run summary once: a taxi storm (and kfp_probe)
# interrupted by SIGINT/SIGTERM at several points (while creating, while
# polling, during cleanup's deletes) prints the storm's runs table and
# kbrun's histogram table exactly once each, exits 130/143, and writes
# result.json (status interrupted) and its kfp-storm-report.csv row (status
# interrupted). Simulator at x60 so that each phase lasts long enough to
# land in; waits are bounded.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/ctrlc.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
count() { grep -c -- "$2" "$1" 2>/dev/null || true; }
wait_for() { # wait_for FILE TEXT: bounded wait (20 s) for TEXT in FILE
  for _ in $(seq 400); do grep -qF -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  fail "'$2' never appeared in $(basename "$1")"; return 1
}

# interrupt NAME SIGNAL WAIT_TEXT EXTRA_SLEEP SCENARIO ARGS...
interrupt() {
  local name=$1 sig=$2 text=$3 extra=$4 scenario=$5; shift 5
  local out="$WORK/$name"
  "$KBRUN" -o "$out" --sim-speed 60 "$SRC/scenarios/$scenario" progress=false "$@" \
    >"$WORK/$name.stdout" 2>"$WORK/$name.stderr" &
  local pid=$!
  wait_for "$WORK/$name.stderr" "$text" && sleep "$extra"
  kill -"$sig" "$pid" 2>/dev/null
  wait "$pid"
  CODE=$?
  STDOUT="$WORK/$name.stdout"
  OUT=$out
}

check() { # check EXPECTED_CODE RUNS_TABLES
  local want=$1 runs=$2
  [ "$CODE" = "$want" ] || { fail "exit code $CODE, expected $want"; sed 's/^/    stderr: /' "${STDOUT%.stdout}.stderr" >&2; }
  local n
  n=$(count "$STDOUT" '^  runs          count')
  [ "$n" = "$runs" ] || { fail "the runs table's header printed $n times, expected $runs"; sed 's/^/    /' "$STDOUT" >&2; }
  n=$(count "$STDOUT" '^  histogram ')
  [ "$n" = 1 ] || { fail "the histogram table's header printed $n times, expected 1"; sed 's/^/    /' "$STDOUT" >&2; }
  n=$(count "$STDOUT" ': interrupted in ')
  [ "$n" = 1 ] || fail "the status line printed $n times, expected 1"
  local doc
  doc=$(ls "$OUT"/*/result/result.json 2>/dev/null | head -1)
  [ -n "$doc" ] || { fail "no result.json"; return; }
  grep -q '^  "status": "interrupted",\?$' "$doc" || fail "result.json status: $(grep '^  "status"' "$doc")"
}

storm_row_status() { # the status of the last row of kfp-storm-report.csv
  lua5.4 -e "
    local f = assert(io.open('$OUT/kfp-storm-report.csv')); local h = f:read('l'); local last
    for l in f:lines() do last = l end; f:close()
    local i = 0; for name in h:gmatch('[^,]+') do i = i + 1; if name == 'status' then break end end
    local j = 0; for cell in (last .. ','):gmatch('([^,]*),') do j = j + 1; if j == i then print(cell) end end"
}

begin "taxi: SIGINT while creating"
interrupt creating INT "storm: http" 0.05 taxi_50runs.lua num_runs=200 concurrency=2
check 130 1
[ "$(storm_row_status)" = interrupted ] || fail "kfp-storm-report.csv status '$(storm_row_status)'"
end

begin "taxi: SIGINT while polling"
interrupt polling INT "runs created" 1 taxi_50runs.lua num_runs=20
check 130 1
[ "$(storm_row_status)" = interrupted ] || fail "kfp-storm-report.csv status '$(storm_row_status)'"
end

begin "taxi: SIGTERM while polling"
interrupt sigterm TERM "runs created" 0.5 taxi_50runs.lua num_runs=20
check 143 1
end

begin "kfp_probe: SIGINT during a step"
interrupt probe INT "probe: 16 concurrent runs" 0.2 kfp_probe.lua
check 130 1
doc=$(ls "$OUT"/*/result/result.json 2>/dev/null | head -1)
grep -q '"verdict": "the server held up to 8 concurrent runs before the probe was interrupted"' "$doc" \
  || fail "verdict: $(grep '"verdict"' "$doc")"
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
