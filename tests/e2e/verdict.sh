#!/usr/bin/env bash
# End-to-end tests of kbrun's verdict: exit codes and their precedence,
# signals that land while Lua runs, result.json when nothing was produced,
# unknown scenario keys, threshold lookups and their printed text, -q, and
# stale kb.fs temporaries removed by the next writer.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/verdict.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
expect_code() { [ "$1" = "$2" ] || { fail "exit code $1, expected $2"; sed 's/^/    stderr: /' "$WORK/stderr" >&2; }; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
expect_not_in() { ! grep -qF -- "$2" "$1" || { fail "'$2' in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
result_json() { ls "$1"/*/result/result.json 2>/dev/null | head -1; }
# json_top FILE KEY: a top-level field of a JSON file, as Lua prints it
json_top() { lua5.4 -e "
  local f = assert(io.open('$1')); local s = f:read('a'); f:close()
  local v = s:match('\n  \"$2\": ([^\n]*)'); print(v and v:gsub(',\$', ''):gsub('\"', '') or 'MISSING')"; }
# the journal's last record (the end record), as text
journal_end() { tail -1 "$(ls "$1"/*/output/journal.jsonl | head -1)"; }

run() { # run OUT_DIR ARGS... ; captures stdout/stderr/code
  local out=$1; shift
  "$KBRUN" -o "$out" "$@" >"$WORK/stdout" 2>"$WORK/stderr"
  CODE=$?
}
wait_ready() { # wait_ready FILE TEXT: bounded wait for TEXT in FILE
  for _ in $(seq 400); do grep -qF "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  fail "'$2' never appeared in $(basename "$1")"
}

begin help-lists-exit-codes
"$KBRUN" --help >"$WORK/stdout" 2>&1; expect_code $? 0
expect_in "$WORK/stdout" "exit codes: 0 success, 1 scenario error, 2 usage error,"
expect_in "$WORK/stdout" "3 results not fully saved, 99 a threshold failed,"
expect_in "$WORK/stdout" "130/143 interrupted by SIGINT/SIGTERM"
end

# ---- signals ------------------------------------------------------------
# The interrupt hook raises in the running task at once; its handler runs
# later from the loop. When the task was resumed from a timer callback, the
# task waiting on it ran first and reported "scenario failed: cancelled"
# (exit 1). Either order must read as interrupted.
cat >"$WORK/spin_after_sleep.lua" <<'EOF'
local kb = require "kb"
return {
  run = function()
    kb.metrics.counter("spins"):inc()
    kb.sleep(0.01) -- resumed from the timer callback, then busy
    print("ready") io.stdout:flush()
    local x = 0
    while true do x = x + 1 end
  end,
}
EOF

signal_case() { # signal_case NAME SCENARIO SIGNAL CODE READY_FILE READY_TEXT [ARGS]
  local name=$1 scen=$2 sig=$3 code=$4 ready_file=$5 ready_text=$6; shift 6
  begin "$name"
  local out="$WORK/$name"
  "$KBRUN" -o "$out" "$scen" "$@" >"$WORK/stdout" 2>"$WORK/stderr" &
  local pid=$!
  wait_ready "$ready_file" "$ready_text"
  kill -"$sig" $pid
  wait $pid; expect_code $? "$code"
  expect_not_in "$WORK/stderr" "scenario failed"
  local R; R=$(result_json "$out")
  if [ -z "$R" ]; then fail "no result.json"; else
    [ "$(json_top "$R" status)" = interrupted ] || fail "status $(json_top "$R" status), expected interrupted"
    [ "$(json_top "$R" exit_code)" = "$code" ] || fail "exit_code $(json_top "$R" exit_code) in result.json"
    # run never returned: result is there, null, unless cleanup accounted
    # for what was measured (the storm: a row and an outcome per requested run)
    if [ -z "${EXPECT_RUNS:-}" ]; then
      [ "$(json_top "$R" result)" = null ] || fail "result $(json_top "$R" result), expected null"
    else
      grep -q "^      \"requested\": $EXPECT_RUNS,\?\$" "$R" || fail "result does not account for $EXPECT_RUNS requested runs"
      local rows; rows=$(($(wc -l <"$(dirname "$R")/runs.csv") - 1))
      [ "$rows" = "$EXPECT_RUNS" ] || fail "runs.csv has $rows rows, expected $EXPECT_RUNS"
    fi
    journal_end "$out" >"$WORK/end.json"
    expect_in "$WORK/end.json" '"k":"end"'
    expect_in "$WORK/end.json" '"status":"interrupted"'
    expect_in "$WORK/end.json" "\"exit_code\":$code"
  fi
  end
}
signal_case sigint-busy-after-timer "$WORK/spin_after_sleep.lua" INT 130 "$WORK/stdout" ready
signal_case sigterm-busy-after-timer "$WORK/spin_after_sleep.lua" TERM 143 "$WORK/stdout" ready
# a large storm on the embedded simulator, stopped while it sets up (it
# has created nothing yet: "before the experiment exists") and while it
# polls its runs
EXPECT_RUNS=20000 signal_case sigterm-storm-setup "$SRC/scenarios/taxi_50runs.lua" TERM 143 "$WORK/stderr" \
  "storm: http" num_runs=20000
EXPECT_RUNS=2000 signal_case sigint-storm-polling "$SRC/scenarios/taxi_50runs.lua" INT 130 "$WORK/stderr" \
  "runs created" num_runs=2000

# ---- result.json when nothing was produced ------------------------------
begin error-in-first-line-of-run
printf 'return { run = function() error("first line") end }\n' >"$WORK/first.lua"
run "$WORK/first" "$WORK/first.lua"; expect_code $CODE 1
R=$(result_json "$WORK/first")
if [ -z "$R" ]; then fail "no result.json"; else
  [ "$(json_top "$R" status)" = failed ] || fail "status $(json_top "$R" status)"
  [ "$(json_top "$R" result)" = null ] || fail "result $(json_top "$R" result), expected null"
  [ "$(json_top "$R" exit_code)" = 1 ] || fail "exit_code $(json_top "$R" exit_code)"
fi
end

# ---- unknown scenario keys ----------------------------------------------
begin misspelt-scenario-key
cat >"$WORK/typo.lua" <<'EOF'
return {
  threshold = { ["x"] = { p99 = 0.001 } },
  run = function() return {} end,
}
EOF
run "$WORK/typo-out" "$WORK/typo.lua"; expect_code $CODE 2
expect_in "$WORK/stderr" "unknown scenario key 'threshold', did you mean 'thresholds'?"
[ -e "$WORK/typo-out" ] && fail "an experiment folder was written: $(ls -R "$WORK/typo-out")"
end

begin unknown-key-existing-out
mkdir -p "$WORK/existing"
printf 'return { run = function() end, cleanupp = function() end }\n' >"$WORK/typo2.lua"
run "$WORK/existing" "$WORK/typo2.lua"; expect_code $CODE 2
expect_in "$WORK/stderr" "unknown scenario key 'cleanupp', did you mean 'cleanup'?"
[ -d "$WORK/existing" ] || fail "the existing experiments folder was removed"
[ -z "$(ls -A "$WORK/existing")" ] || fail "an experiment folder was written: $(ls "$WORK/existing")"
end

begin unknown-threshold-statistic
printf 'return { thresholds = { x = { p99x = 1 } }, run = function() end }\n' >"$WORK/badstat.lua"
run "$WORK/badstat" "$WORK/badstat.lua"; expect_code $CODE 2
expect_in "$WORK/stderr" "threshold 'x': unknown statistic 'p99x'"
end

# ---- thresholds ---------------------------------------------------------
begin counter-never-incremented-is-zero
cat >"$WORK/zero.lua" <<'EOF'
local kb = require "kb"
return {
  thresholds = { ["api.errors"] = { max = 0 }, ["api.get"] = { p99 = 1 } },
  run = function()
    local h = kb.metrics.histogram("api.get")
    for _ = 1, 10 do h:record(0.950134) end
    -- api.errors is only created on an error: none happened
  end,
}
EOF
run "$WORK/zero" "$WORK/zero.lua"; expect_code $CODE 0
expect_in "$WORK/stdout" "ok   api.errors 0 <= 0"
expect_in "$WORK/stdout" "ok   api.get p99 0.95 s <= 1 s"
end

begin thresholds-labelled-units-no-data
cat >"$WORK/lab.lua" <<'EOF'
local kb = require "kb"
return {
  thresholds = {
    ["x.lat{code=200}"] = { p99 = 1 },        -- 0.95 s: passes
    ["x.lat{code=500}"] = { p50 = 0.5 },      -- 3 s: fails
    ["x.lat"] = { max = 2 },                  -- merged: 3 s, fails
    ["x.errors{class=timeout}"] = { max = 2 },-- 3 of them: fails
    ["x.errors{class=reset}"] = { max = 0 },  -- never: 0, passes
    ["queue.wait"] = { p99 = 1 },             -- no data: fails
    ["spare.wait"] = { p99 = 1, allow_missing = true }, -- no data, allowed
    success_rate = 0.99,                      -- 97.5 %: fails
    ["runs.done"] = { min = 40 },             -- 39: fails
  },
  run = function()
    kb.metrics.histogram("x.lat", { code = 200 }):record(0.950134)
    kb.metrics.histogram("x.lat", { code = 500 }):record(3)
    kb.metrics.counter("x.errors", { class = "timeout" }):inc(3)
    return { success_rate = 0.975, runs = { done = 39 } }
  end,
}
EOF
run "$WORK/lab" "$WORK/lab.lua"; expect_code $CODE 99
expect_in "$WORK/stdout" "ok   x.lat{code=200} p99 0.95 s <= 1 s"
expect_in "$WORK/stdout" "FAIL x.lat{code=500} p50 3000 ms <= 500 ms"
expect_in "$WORK/stdout" "FAIL x.lat max 3 s <= 2 s"
expect_in "$WORK/stdout" "FAIL x.errors{class=timeout} 3 <= 2"
expect_in "$WORK/stdout" "ok   x.errors{class=reset} 0 <= 0"
expect_in "$WORK/stdout" "FAIL queue.wait p99 no data (limit <= 1 s)"
expect_in "$WORK/stdout" "ok   spare.wait p99 no data, allowed (limit <= 1 s)"
expect_in "$WORK/stdout" "FAIL success_rate 97.5% >= 99%"
expect_in "$WORK/stdout" "FAIL runs.done 39 >= 40"
R=$(result_json "$WORK/lab")
[ "$(json_top "$R" exit_code)" = 99 ] || fail "exit_code $(json_top "$R" exit_code) in result.json"
[ "$(json_top "$R" error)" = "a threshold failed" ] || fail "error $(json_top "$R" error)"
# -q: the verdict and every failed threshold, nothing else
run "$WORK/labq" -q "$WORK/lab.lua"; expect_code $CODE 99
expect_in "$WORK/stdout" ": failed in"
expect_in "$WORK/stdout" "FAIL x.lat{code=500} p50 3000 ms <= 500 ms"
expect_in "$WORK/stdout" "FAIL success_rate 97.5% >= 99%"
expect_not_in "$WORK/stdout" "ok   "
expect_not_in "$WORK/stdout" "histogram"
[ "$(grep -c FAIL "$WORK/stdout")" = 6 ] || fail "$(grep -c FAIL "$WORK/stdout") FAIL lines with -q, expected 6"
end

begin threshold-close-to-limit-reads-different
cat >"$WORK/close.lua" <<'EOF'
local kb = require "kb"
return {
  thresholds = { op = { max = 1 } },
  run = function() kb.metrics.histogram("op"):record(1.0004) end,
}
EOF
run "$WORK/close" "$WORK/close.lua"; expect_code $CODE 99
expect_in "$WORK/stdout" "FAIL op max 1.0004 s <= 1 s"
end

# ---- precedence ---------------------------------------------------------
begin error-outranks-thresholds
printf 'local kb = require "kb"\nreturn { thresholds = { x = { max = 0 } },\n  run = function() kb.metrics.counter("x"):inc() error("boom") end }\n' >"$WORK/errthr.lua"
run "$WORK/errthr" "$WORK/errthr.lua"; expect_code $CODE 1
expect_in "$WORK/stdout" "FAIL x 1 <= 0"
end

begin not-saved-outranks-thresholds
cat >"$WORK/unsaved.lua" <<'EOF'
local kb = require "kb"
return {
  thresholds = { x = { max = 0 } },
  run = function()
    kb.metrics.counter("x"):inc()
    -- a folder where result.json goes: it cannot be written
    kb.fs.mkdir(kb.exp:path("result", "result.json"))
  end,
}
EOF
run "$WORK/unsaved" "$WORK/unsaved.lua"; expect_code $CODE 3
expect_in "$WORK/stderr" "results not fully saved: result.json"
end

begin interrupted-outranks-thresholds
cat >"$WORK/intthr.lua" <<'EOF'
local kb = require "kb"
return {
  thresholds = { x = { max = 0 } },
  run = function()
    kb.metrics.counter("x"):inc()
    print("ready") io.stdout:flush()
    kb.sleep(60)
  end,
}
EOF
"$KBRUN" -o "$WORK/intthr" "$WORK/intthr.lua" >"$WORK/stdout" 2>"$WORK/stderr" &
pid=$!
wait_ready "$WORK/stdout" ready
kill -INT $pid
wait $pid; expect_code $? 130
expect_in "$WORK/stdout" "FAIL x 1 <= 0"
expect_in "$WORK/stdout" ": interrupted in"
end

# ---- stale temporaries --------------------------------------------------
# a pid that no process holds: a child that has exited
sleep 0 & DEAD=$!; wait $DEAD

begin report-removes-stale-temporaries
printf 'local kb = require "kb"\nkb.metrics.histogram("op"):record(0.1)\n' >"$WORK/tiny.lua"
run "$WORK/tmp" -q "$WORK/tiny.lua"; expect_code $CODE 0
EXP=$(ls -d "$WORK"/tmp/*/ | head -1)
printf 'half a report' >"$EXP/result/.report.html.kbtmp-$DEAD-0"      # writer gone
printf 'half' >"$EXP/result/.result.json.kbtmp-$DEAD-7"               # writer gone
printf 'live' >"$EXP/result/.report.html.kbtmp-$$-1"                  # this shell: live
printf 'reused' >"$EXP/result/.runs.csv.kbtmp-$$-2"                   # pid reused since
touch -d '2001-01-01 00:00:00' "$EXP/result/.runs.csv.kbtmp-$$-2"
printf 'mine' >"$EXP/result/.notes.kbtmp-x"                           # not kb.fs's pattern
"$KBRUN" report "$EXP" >"$WORK/stdout" 2>"$WORK/stderr"; expect_code $? 0
[ -e "$EXP/result/.report.html.kbtmp-$DEAD-0" ] && fail "stale report temporary kept"
[ -e "$EXP/result/.result.json.kbtmp-$DEAD-7" ] && fail "stale result temporary kept"
[ -e "$EXP/result/.runs.csv.kbtmp-$$-2" ] && fail "temporary of a reused pid kept"
[ -e "$EXP/result/.report.html.kbtmp-$$-1" ] || fail "a live writer's temporary was removed"
[ -e "$EXP/result/.notes.kbtmp-x" ] || fail "a file outside the pattern was removed"
[ -f "$EXP/result/report.html" ] || fail "no report.html"
end

begin run-removes-stale-temporaries-in-out
printf 'half' >"$WORK/tmp/.sweep.csv.kbtmp-$DEAD-3"
mkdir -p "$WORK/tmp/sweep_x"
printf 'half' >"$WORK/tmp/sweep_x/.sweep.html.kbtmp-$DEAD-4"
printf 'live' >"$WORK/tmp/.sweep.csv.kbtmp-$$-5"
run "$WORK/tmp" -q "$WORK/tiny.lua"; expect_code $CODE 0
[ -e "$WORK/tmp/.sweep.csv.kbtmp-$DEAD-3" ] && fail "stale temporary in the experiments folder kept"
[ -e "$WORK/tmp/sweep_x/.sweep.html.kbtmp-$DEAD-4" ] && fail "stale temporary in a sweep folder kept"
[ -e "$WORK/tmp/.sweep.csv.kbtmp-$$-5" ] || fail "a live writer's temporary was removed"
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
