#!/usr/bin/env bash
# End-to-end tests of the kbrun command line: exit codes, the messages a user
# sees, parameter precedence, and results written on errors and signals.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/cli.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
expect_code() { [ "$1" = "$2" ] || fail "exit code $1, expected $2"; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
result_json() { ls "$1"/*/result/result.json 2>/dev/null | head -1; }
json_get() { lua5.4 -e "
  local f = assert(io.open('$1')); local s = f:read('a'); f:close()
  local v = s:match('\"$2\"%s*:%s*([^,\n}]+)'); print(v and v:gsub('\"', '') or 'MISSING')"; }

run() { # run OUT_DIR ARGS... ; captures stdout/stderr/code
  local out=$1; shift
  "$KBRUN" -o "$out" "$@" >"$WORK/stdout" 2>"$WORK/stderr"
  CODE=$?
}

begin version
"$KBRUN" --version >"$WORK/stdout"; expect_code $? 0
for lib in "kbrun " "Lua 5.4" "libuv " "libcurl " "cJSON " "libyaml "; do expect_in "$WORK/stdout" "$lib"; done
end

begin usage-no-args
"$KBRUN" >"$WORK/stdout" 2>"$WORK/stderr"; expect_code $? 2
expect_in "$WORK/stderr" "usage: kbrun"
end

begin unknown-option
"$KBRUN" --frobnicate x.lua 2>"$WORK/stderr"; expect_code $? 2
expect_in "$WORK/stderr" "unknown option '--frobnicate'"
end

begin bad-seed
"$KBRUN" --seed abc x.lua 2>"$WORK/stderr"; expect_code $? 2
expect_in "$WORK/stderr" "--seed wants a non-negative integer, got 'abc'"
end

cat >"$WORK/ok.lua" <<'EOF'
local kb = require "kb"
return {
  params = { a = 1, b = 2, c = "three", flag = false },
  run = function(p)
    kb.metrics.counter("ran"):inc()
    return { a = p.a, b = p.b, c = p.c, flag = p.flag }
  end,
}
EOF

begin missing-scenario
run "$WORK/o" "$WORK/nope.lua"; expect_code $CODE 2
expect_in "$WORK/stderr" "cannot read scenario '$WORK/nope.lua'"
end

begin malformed-assignment
run "$WORK/o" "$WORK/ok.lua" oops; expect_code $CODE 2
expect_in "$WORK/stderr" "'oops' is not a key=value parameter"
end

begin unknown-parameter
run "$WORK/o" "$WORK/ok.lua" num_runz=5; expect_code $CODE 2
expect_in "$WORK/stderr" "unknown parameter 'num_runz' (this scenario takes: a, b, c, flag)"
end

begin usage-errors-write-nothing
# a misspelt or mistyped parameter: one message (a near name suggested), exit
# 2, no experiment folder, no threshold lines, no traceback, and the value
# given is written nowhere
cat >"$WORK/thr.lua" <<'EOF'
return {
  params = { num_runs = 5, url = "x" },
  thresholds = { success_rate = 0.9 },
  run = function() return { success_rate = 1 } end,
}
EOF
for bad in "num_runz=5 token=s3cr3t-value" "num_runs=many" "url=s3cr3t-value num_runs=1.5"; do
  rm -rf "$WORK/usage-out"
  # shellcheck disable=SC2086
  run "$WORK/usage-out" "$WORK/thr.lua" $bad; expect_code $CODE 2
  [ -e "$WORK/usage-out" ] && fail "'$bad' wrote $(ls -R "$WORK/usage-out" | head -5)"
  grep -q "FAIL\|success_rate\|stack traceback" "$WORK/stdout" "$WORK/stderr" &&
    fail "'$bad' printed more than its message: $(cat "$WORK/stdout" "$WORK/stderr")"
  grep -q "s3cr3t-value" "$WORK/stdout" "$WORK/stderr" && fail "'$bad': the value given was printed"
  [ "$(wc -l <"$WORK/stderr")" = 1 ] || fail "'$bad': not one line: $(cat "$WORK/stderr")"
done
run "$WORK/usage-out" "$WORK/thr.lua" num_runz=5
expect_in "$WORK/stderr" "kbrun: unknown parameter 'num_runz', did you mean 'num_runs'? (this scenario takes: num_runs, url)"
end

begin parameter-type
run "$WORK/o" "$WORK/ok.lua" a=abc; expect_code $CODE 2
expect_in "$WORK/stderr" "parameter 'a' wants an integer (like its default 1), got a string 'abc'"
end

begin parameter-precedence
printf 'b: 20\nc: from-file\nflag: true\n' >"$WORK/params.yaml"
run "$WORK/prec" -p "$WORK/params.yaml" "$WORK/ok.lua" c=cli; expect_code $CODE 0
R=$(result_json "$WORK/prec")
[ -n "$R" ] || fail "no result.json"
[ "$(json_get "$R" a)" = 1 ] || fail "a: default expected"
[ "$(json_get "$R" b)" = 20 ] || fail "b: file expected"
[ "$(json_get "$R" c)" = cli ] || fail "c: command line expected"
[ "$(json_get "$R" flag)" = true ] || fail "flag: file expected"
end

begin string-parameter-keeps-text
run "$WORK/str" "$WORK/ok.lua" c=007; expect_code $CODE 0
R=$(result_json "$WORK/str")
[ "$(json_get "$R" c)" = 007 ] || fail "c: the text 007 expected"
end

begin integer-parameter-refuses-fraction
run "$WORK/o" "$WORK/ok.lua" a=1.5; expect_code $CODE 2
expect_in "$WORK/stderr" "parameter 'a' wants an integer (like its default 1), got 1.5"
end

begin options-anywhere
# options before, between and after the scenario and its parameters
"$KBRUN" "$WORK/ok.lua" -q a=5 -o "$WORK/anywhere" --seed 11 b=6 >"$WORK/stdout" 2>"$WORK/stderr"
expect_code $? 0
R=$(result_json "$WORK/anywhere")
if [ -z "$R" ]; then fail "no result.json in the -o folder given after the scenario"; else
  [ "$(json_get "$R" a)" = 5 ] || fail "a: $(json_get "$R" a), expected 5"
  [ "$(json_get "$R" b)" = 6 ] || fail "b: $(json_get "$R" b), expected 6"
  [ "$(json_get "$R" seed)" = 11 ] || fail "seed: $(json_get "$R" seed), expected 11"
fi
# after "--" everything is a parameter
run "$WORK/o" "$WORK/ok.lua" -- --seed; expect_code $CODE 2
expect_in "$WORK/stderr" "'--seed' is not a key=value parameter (parameters are key=value, options start with -)"
end

begin scenario-help
cat >"$WORK/described.lua" <<'EOF'
--- described: GETs one URL `requests` times.
-- A second line of description.
return {
  params = {
    requests = 100,      -- how many GETs
    url = "http://x",    -- what to GET
    verbose = false,
  },
  thresholds = { ["api.get"] = { p99 = 0.5 }, success_rate = 0.99 },
  run = function() error("--help must not run the scenario") end,
}
EOF
mkdir -p "$WORK/help-cwd"
for form in "-o $WORK/help-out $WORK/described.lua --help" "help $WORK/described.lua" \
            "-h -o $WORK/help-out $WORK/described.lua requests=3"; do
  # shellcheck disable=SC2086
  (cd "$WORK/help-cwd" && "$KBRUN" $form >"$WORK/stdout" 2>"$WORK/stderr")
  expect_code $? 0
  [ -z "$(ls -A "$WORK/help-cwd")" ] || fail "--help wrote into the working folder: $(ls -A "$WORK/help-cwd")"
  expect_in "$WORK/stdout" 'described: GETs one URL `requests` times.'
  expect_in "$WORK/stdout" "A second line of description."
  expect_in "$WORK/stdout" "  requests = 100"
  expect_in "$WORK/stdout" "integer  how many GETs"
  expect_in "$WORK/stdout" 'url = "http://x"'
  expect_in "$WORK/stdout" "string   what to GET"
  expect_in "$WORK/stdout" "verbose = false"
  expect_in "$WORK/stdout" "api.get p99 <= 0.5"
  expect_in "$WORK/stdout" "success_rate >= 0.99"
  [ -e "$WORK/help-out" ] && fail "--help wrote $WORK/help-out"
done
# the bundled storm: its parameters' comments come from kb.kfp.storm
"$KBRUN" "$(dirname "$0")/../../scenarios/taxi_50runs.lua" --help >"$WORK/stdout" 2>&1
expect_code $? 0
expect_in "$WORK/stdout" "num_runs = 50"
expect_in "$WORK/stdout" "retry_max_attempts = 5"
expect_in "$WORK/stdout" "attempts per call, the first included"
# kbrun's own help names every subcommand
"$KBRUN" --help >"$WORK/stdout" 2>&1
for sub in sim report compare merge render k8s-job; do expect_in "$WORK/stdout" "kbrun $sub"; done
end

begin params-file-not-a-mapping
printf -- '- a\n- b\n' >"$WORK/list.yaml"
run "$WORK/o" -p "$WORK/list.yaml" "$WORK/ok.lua"; expect_code $CODE 2
expect_in "$WORK/stderr" "a params file must be a YAML mapping of name: value"
end

begin bad-params-file
printf 'a: 1\n  b: [\n' >"$WORK/bad.yaml"
run "$WORK/o" -p "$WORK/bad.yaml" "$WORK/ok.lua"; expect_code $CODE 2
expect_in "$WORK/stderr" "$WORK/bad.yaml:2:"
end

begin syntax-error
printf 'local x = 1\nlocal y = = 2\n' >"$WORK/syntax.lua"
run "$WORK/o" "$WORK/syntax.lua"; expect_code $CODE 1
expect_in "$WORK/stderr" "$WORK/syntax.lua:2:"
end

# Lua shortens file names past 60 characters to a "..." tail; kbrun's
# messages name the whole path so the user can open it.
DEEP="$WORK/a-folder-name-long-enough/to-push-the-path/past-lua-idsize"
mkdir -p "$DEEP"

begin syntax-error-deep-path
printf 'local x = 1\nlocal y = = 2\n' >"$DEEP/syntax.lua"
run "$WORK/o" "$DEEP/syntax.lua"; expect_code $CODE 1
expect_in "$WORK/stderr" "kbrun: $DEEP/syntax.lua:2: unexpected symbol"
end

begin runtime-error-deep-path
printf 'local kb = require "kb"\nreturn { run = function()\n  kb.spawn(function() error("deep boom") end):wait()\nend }\n' >"$DEEP/rt.lua"
run "$WORK/o" "$DEEP/rt.lua"; expect_code $CODE 1
expect_in "$WORK/stderr" "$DEEP/rt.lua:3: deep boom"
expect_in "$WORK/stderr" "$DEEP/rt.lua:3: in function"
end

begin runtime-error-writes-results
cat >"$WORK/err.lua" <<'EOF'
local kb = require "kb"
return { run = function()
  kb.metrics.histogram("before.error"):record(0.25)
  local t = nil
  return t.field
end }
EOF
run "$WORK/err" "$WORK/err.lua"; expect_code $CODE 1
expect_in "$WORK/stderr" "err.lua:5: attempt to index a nil value"
expect_in "$WORK/stderr" "stack traceback"
R=$(result_json "$WORK/err")
[ -n "$R" ] && expect_in "$R" '"status": "failed"' && expect_in "$R" "before.error"
end

begin threshold-fails
cat >"$WORK/thr.lua" <<'EOF'
local kb = require "kb"
return {
  thresholds = { ["op"] = { p99 = 0.1 }, success_rate = 0.99 },
  run = function()
    local h = kb.metrics.histogram("op")
    for _ = 1, 100 do h:record(0.5) end
    return { success_rate = 1.0 }
  end,
}
EOF
run "$WORK/thr" "$WORK/thr.lua"; expect_code $CODE 99
expect_in "$WORK/stdout" "FAIL op p99 500 ms <= 100 ms"
expect_in "$WORK/stdout" "ok   success_rate 100% >= 99%"
end

begin unobserved-task-failure
cat >"$WORK/unobs.lua" <<'EOF'
local kb = require "kb"
kb.spawn(function() error("lost in the background") end)
kb.sleep(0.01)
EOF
run "$WORK/o" "$WORK/unobs.lua"; expect_code $CODE 1
expect_in "$WORK/stderr" "a task failed and nobody waited for it"
expect_in "$WORK/stderr" "lost in the background"
end

begin module-path
mkdir -p "$WORK/lib" "$WORK/scen"
printf 'return { answer = 42 }\n' >"$WORK/lib/extlib.lua"
printf 'return { near = true }\n' >"$WORK/scen/nearby.lua"
printf 'assert(require("extlib").answer == 42)\nassert(require("nearby").near)\nassert(require("kb.csv"))\n' >"$WORK/scen/uses.lua"
KBRUN_PATH="$WORK/lib" "$KBRUN" -q -o "$WORK/o" "$WORK/scen/uses.lua" 2>"$WORK/stderr"
expect_code $? 0
end

cat >"$WORK/slow.lua" <<'EOF'
local kb = require "kb"
return {
  params = { marker = "" },
  run = function()
    local h = kb.metrics.histogram("measured")
    for i = 1, 5 do h:record(i / 10) end
    print("ready")
    io.stdout:flush()
    kb.sleep(60)
  end,
  cleanup = function(p)
    local f = assert(io.open(p.marker, "w")); f:write("cleaned"); f:close()
  end,
}
EOF

signal_case() { # signal_case NAME SIGNAL CODE
  begin "$1"
  local out="$WORK/$1"
  "$KBRUN" -o "$out" "$WORK/slow.lua" marker="$WORK/$1.marker" >"$WORK/stdout" 2>"$WORK/stderr" &
  local pid=$!
  for _ in $(seq 100); do grep -q ready "$WORK/stdout" 2>/dev/null && break; sleep 0.05; done
  kill -"$2" $pid
  wait $pid; expect_code $? "$3"
  [ -f "$WORK/$1.marker" ] || fail "cleanup did not run"
  R=$(result_json "$out")
  [ -n "$R" ] && expect_in "$R" '"status": "interrupted"' && expect_in "$R" '"measured"'
  [ -n "$R" ] && expect_in "$R" '"count": 5'
  end
}
signal_case sigint INT 130
signal_case sigterm TERM 143

begin runaway-loop-interrupted
printf 'local kb = require "kb"\nkb.metrics.counter("spins"):inc()\nprint("ready") io.stdout:flush()\nwhile true do end\n' >"$WORK/spin.lua"
"$KBRUN" -o "$WORK/spin" "$WORK/spin.lua" >"$WORK/stdout" 2>"$WORK/stderr" &
pid=$!
for _ in $(seq 100); do grep -q ready "$WORK/stdout" 2>/dev/null && break; sleep 0.05; done
kill -INT $pid
wait $pid; expect_code $? 130
R=$(result_json "$WORK/spin")
[ -n "$R" ] && expect_in "$R" '"spins"'
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
