#!/usr/bin/env bash
# A user's mistakes read as one message with advice (kb.params.refuse and
# the runner's usage errors, docs/scenarios.md "Exit codes"): a params-file
# mapping where a string is expected, a parameter of the wrong type, a bad
# parameter value a library refuses (kb.kfp.storm), also in a sweep's cells,
# a refused sweep resume.
# Each exits 2, prints the exact message once, no Lua traceback, and writes
# no experiment folder. An error inside scenario code keeps its traceback.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/user_errors.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0
TAXI=$SRC/scenarios/taxi_50runs.lua
SWEEP=$SRC/scenarios/sweep_taxi.lua

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
expect_code() { [ "$1" = "$2" ] || { fail "exit code $1, expected $2"; sed 's/^/    /' "$WORK/stderr" >&2; }; }
expect_line() { # the whole stderr is this one line
  local want=$1
  [ "$(cat "$WORK/stderr")" = "$want" ] || { fail "stderr is not the one message:"; echo "    want: $want" >&2; sed 's/^/    got:  /' "$WORK/stderr" >&2; }
}
no_traceback() { ! grep -q "stack traceback" "$WORK/stderr" || fail "a Lua traceback was printed"; }
no_folder() { [ ! -e "$1" ] || { fail "$1 was written:"; ls -R "$1" | head -20 | sed 's/^/    /' >&2; }; }
run() { # run OUT_DIR ARGS...
  local out=$1; shift
  (cd "$WORK" && "$KBRUN" -o "$out" "$@" >"$WORK/stdout" 2>"$WORK/stderr")
  CODE=$?
}

# 1. a mapping in a params file where the scenario takes a string
begin params-file-mapping
printf 'host: {a: 1}\n' >"$WORK/params.yaml"
run "$WORK/out1" -p params.yaml "$TAXI"
expect_code "$CODE" 2
expect_line "kbrun: params.yaml: parameter 'host' wants a string (its default is ''), got a mapping: to pass a mapping or a list as text, quote it (host: '{\"a\": 1}') or write it as a YAML block (host: |, the text indented on the lines below)"
no_traceback; no_folder "$WORK/out1"
end

# the advice works: the same document as a YAML block is accepted
begin params-file-block
printf 'pipeline_params: |\n  {"data-root": "gs://x"}\nnum_runs: 2\nprogress: false\n' >"$WORK/block.yaml"
run "$WORK/out2" -q -p block.yaml "$TAXI"
expect_code "$CODE" 0
p=$(ls "$WORK"/out2/*/config/params.json 2>/dev/null | head -1)
[ -n "$p" ] && grep -qF '"pipeline_params": "{\"data-root\": \"gs://x\"}' "$p" || fail "params.json does not hold the block's text: $(cat "$p" 2>/dev/null)"
end

# 2. a parameter of the wrong type, on the command line and in a params file
begin bad-type-cli
run "$WORK/out3" "$TAXI" num_runs=abc
expect_code "$CODE" 2
expect_line "kbrun: parameter 'num_runs' wants an integer (like its default 50), got a string 'abc': write it like num_runs=50"
no_traceback; no_folder "$WORK/out3"
end

begin bad-type-file
printf 'poll_all: [1, 2]\n' >"$WORK/list.yaml"
run "$WORK/out4" -p list.yaml "$TAXI"
expect_code "$CODE" 2
expect_line "kbrun: list.yaml: parameter 'poll_all' wants a boolean (like its default true), got a list: write it like poll_all: true or poll_all: false"
no_traceback; no_folder "$WORK/out4"
end

# a value of the right type that the library refuses (kb.kfp.storm's bounds)
begin bad-value
run "$WORK/out5" "$TAXI" num_runs=0
expect_code "$CODE" 2
expect_line "kbrun: kb.kfp.storm: num_runs must be an integer from 1 to 100000, got 0"
no_traceback; no_folder "$WORK/out5"
end

# 3. a sweep resumed with another definition is refused; nothing is written
begin sweep-resume-refused
SMALL="num_runs=2 pools=1 nodes=1 steps=2"
# shellcheck disable=SC2086
run "$WORK/out6" -q "$SWEEP" $SMALL
expect_code "$CODE" 0
ls -R "$WORK/out6" >"$WORK/ls.before"
J=$WORK/out6/sweep-taxi/journal.jsonl
cp "$J" "$WORK/journal.before" 2>/dev/null || fail "no sweep journal at $J"
# shellcheck disable=SC2086
run "$WORK/out6" "$SWEEP" $SMALL step_seconds=30
expect_code "$CODE" 2
expect_line "kbrun: kb.sweep: $WORK/out6/sweep-taxi/journal.jsonl was written by another definition of sweep 'sweep_taxi' (hash $(sed -n 's/.*"hash":"\([0-9a-f]*\)".*/\1/p' "$WORK/journal.before" | head -1), now $(sed -n 's/.*now \([0-9a-f]*\)).*/\1/p' "$WORK/stderr")): params.step_seconds: 60 -> 30. Nothing was run. To finish the old sweep, run it with its old parameters; to start a new one, give another experiments folder (-o DIR), or fresh = true (fresh=true on the command line of scenarios/sweep_taxi.lua) to move the old results aside; a scenario changing what a cell means sets another \`version\` or \`name\`"
no_traceback
ls -R "$WORK/out6" >"$WORK/ls.after"
cmp -s "$WORK/ls.before" "$WORK/ls.after" || { fail "the refused resume wrote something:"; diff "$WORK/ls.before" "$WORK/ls.after" | sed 's/^/    /' >&2; }
cmp -s "$J" "$WORK/journal.before" || fail "the refused resume changed the sweep journal"
# the advice works: fresh=true starts over, the old results kept aside
# shellcheck disable=SC2086
run "$WORK/out6" -q "$SWEEP" $SMALL step_seconds=30 fresh=true
expect_code "$CODE" 0
ls -d "$WORK"/out6/sweep-taxi.old-* >/dev/null 2>&1 || fail "fresh=true did not move the old results aside"
end

# a bad value in a sweep's cells: the sweep stops with that one message, and
# the corrected command then runs (a journal without a finished cell does
# not hold it back)
begin sweep-cell-refused
run "$WORK/out8" -q "$SWEEP" num_runs=abc pools=1,2 nodes=1 steps=2 parallel=1 # the first cell refuses
expect_code "$CODE" 2
expect_line "kbrun: kb.sweep: cell c001 r1 (nodes=1 num_runs=abc pools=1 steps=2): kb.kfp.storm: num_runs must be an integer from 1 to 100000, got abc"
no_traceback
[ -z "$(ls "$WORK/out8" | grep -v '^sweep-taxi$')" ] || fail "an experiment folder was written: $(ls "$WORK/out8")"
ls -d "$WORK"/out8/sweep-taxi/c00* >/dev/null 2>&1 && fail "a refused cell's folder was kept"
grep -q '"event":"done"' "$WORK/out8/sweep-taxi/journal.jsonl" && fail "a refused cell was journaled as finished"
run "$WORK/out8" -q "$SWEEP" num_runs=2 pools=1,2 nodes=1 steps=2
expect_code "$CODE" 0
[ "$(tail -n +2 "$WORK/out8/sweep-taxi/sweep.csv" | wc -l)" = 2 ] || fail "the corrected sweep did not run its 2 cells"
end

# 4. an error inside scenario code keeps its traceback (exit 1)
begin scenario-error-traceback
cat >"$WORK/boom.lua" <<'EOF'
return { params = { n = 1 }, run = function(p) local t = nil; return t.field end }
EOF
run "$WORK/out7" boom.lua
expect_code "$CODE" 1
grep -q "stack traceback" "$WORK/stderr" || fail "no traceback for an error in scenario code"
grep -qF "boom.lua:1: attempt to index a nil value" "$WORK/stderr" || fail "the error does not name boom.lua:1"
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
