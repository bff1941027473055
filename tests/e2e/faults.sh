#!/usr/bin/env bash
# The fault-injection suite (docs/faults.md): a small run storm
# (tests/faults/storm_faults.lua) against the simulator with one fault
# switched on per case. Each case asserts kbrun's exit code, that it ended
# within 60 s, and (tests/faults/check.lua) that every run is accounted for
# with the right outcome and that no call or attempt is missing between the
# client's metrics and the simulator's own counters.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
SCEN="$SRC/tests/faults/storm_faults.lua"
CHECK="$SRC/tests/faults/check.lua"
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/faults.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
SIM_PID=
STORM_PID=
cleanup() {
  [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null
  [ -n "$STORM_PID" ] && kill "$STORM_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
passed=0 failed=0
N=10

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && { passed=$((passed + 1)); echo "ok   $CASE"; }; }
expect_code() { [ "$1" = "$2" ] || { fail "exit code $1, expected $2"; tail -20 "$WORK/$CASE.err" | sed 's/^/    /' >&2; }; }
expect_fast() { [ "$1" -lt 60 ] || fail "took $1 s (bound: 60 s)"; }
exp_dir() { ls -d "$WORK/$1"/*/ 2>/dev/null | head -1 | sed 's:/$::'; }
check() { # check ARGS... : tests/faults/check.lua on the case's experiment
  "$KBRUN" -q -o "$WORK/checks" "$CHECK" dir="$(exp_dir "$CASE")" runs=$N "$@" >"$WORK/check.out" 2>&1 \
    || fail "$(cat "$WORK/check.out")"
}
storm() { # storm ARGS... : the scenario against the embedded simulator
  local t0=$SECONDS
  "$KBRUN" -q -o "$WORK/$CASE" "$SCEN" num_runs=$N "$@" >"$WORK/$CASE.out" 2>"$WORK/$CASE.err"
  CODE=$?
  ELAPSED=$((SECONDS - t0))
}

# 1. 5% of the API answers are 503: retried, nothing lost, every run succeeds.
begin error-503
storm api_faults='{"error_rate": 0.05}'
expect_code "$CODE" 0
expect_fast "$ELAPSED"
check status=passed succeeded=$N reasons=503
end

# 2. A 429 storm: half the requests throttled with Retry-After 2 s (honoured).
begin throttle-429
storm api_faults='{"throttle_rate": 0.5, "retry_after": 2}' retry_max_attempts=15 retry_budget_ratio=2
expect_code "$CODE" 0
expect_fast "$ELAPSED"
check status=passed succeeded=$N reasons=429
end

# 3. 5% of the connections reset mid-body: retried (creates looked up first).
begin reset
storm api_faults='{"reset_rate": 0.05}'
expect_code "$CODE" 0
expect_fast "$ELAPSED"
check status=passed succeeded=$N reasons=reset
end

# 4a. 10 s stalls, the client's timeout longer: slow answers, no error.
begin stall-long-timeout
storm api_faults='{"stall_rate": 0.05, "stall_seconds": 10}' request_timeout=30
expect_code "$CODE" 0
expect_fast "$ELAPSED"
check status=passed succeeded=$N
end

# 4b. Stalls longer than the client's timeout (kb.http's timeout has a floor
# of 250 ms real, so the stall is 300 cluster s = 0.5 s real at x600):
# timeouts counted and retried, every run still accounted for.
begin stall-timeout
storm api_faults='{"stall_rate": 0.05, "stall_seconds": 300}' request_timeout=60
expect_code "$CODE" 0
expect_fast "$ELAPSED"
check status=passed succeeded=$N reasons=timeout served=timeouts
end

# 5. 30% of the steps fail: the failed runs are the ones the simulator failed
# (success_rate fails: exit 99).
begin step-failures
storm step_fail_prob=0.3
expect_code "$CODE" 99
expect_fast "$ELAPSED"
check failed=sim status=failed
end

# 6. The node pool the taxi pipeline is pinned to is lost mid-run.
begin pool-lost
storm pool_fail=pool-1 pool_fail_after=120
expect_code "$CODE" 99
expect_fast "$ELAPSED"
check failed=sim succeeded=0 status=failed
end

# 7. A standalone simulator killed (SIGKILL) mid-run and restarted on the
# same port: connection errors are retried, then the runs the new
# simulator never had answer 404 and are reported lost (class not_found).
# The budget is generous: how long the restart takes depends on the
# machine's load (ASan, parallel tests), and this case is about retries
# and lost runs, not about the budget (tests/lua/test_retry.lua covers it).
begin sim-restart
"$KBRUN" sim --listen 127.0.0.1:0 --speed 60 >"$WORK/sim.out" 2>&1 &
SIM_PID=$!
URL=
for _ in $(seq 100); do
  URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/sim.out" | head -1)
  [ -n "$URL" ] && break
  sleep 0.1
done
if [ -z "$URL" ]; then
  fail "the simulator did not start: $(cat "$WORK/sim.out")"
else
  t0=$SECONDS
  "$KBRUN" -q -o "$WORK/$CASE" "$SCEN" host="$URL" num_runs=$N sim_states=false retry_max_attempts=10 \
    retry_budget_ratio=1 run_status_polling_interval_sec=30 >"$WORK/$CASE.out" 2>"$WORK/$CASE.err" &
  STORM_PID=$!
  # wait until every run is created, then kill the simulator
  created=0
  for _ in $(seq 300); do
    j=$(ls "$WORK/$CASE"/*/output/journal.jsonl 2>/dev/null | head -1)
    [ -n "$j" ] && created=$(grep -c '"event":"run.created"' "$j")
    [ "$created" -ge $N ] && break
    sleep 0.1
  done
  [ "$created" -ge $N ] || fail "only $created runs were created before the kill"
  kill -9 "$SIM_PID"
  wait "$SIM_PID" 2>/dev/null
  sleep 1.5 # the storm's polls meet a closed port (retried with backoff)
  "$KBRUN" sim --listen "${URL#http://}" --speed 60 >"$WORK/sim2.out" 2>&1 &
  SIM_PID=$!
  wait "$STORM_PID"
  CODE=$?
  STORM_PID=
  expect_code "$CODE" 99
  expect_fast "$((SECONDS - t0))"
  check lost=$N served=none reasons=connect status=failed budget_ok=true
fi
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
