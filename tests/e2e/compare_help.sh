#!/usr/bin/env bash
# `kbrun compare --help` is complete and true: every option the parser takes
# (lua/kb/cli/init.lua) is in the help, every --stat it accepts is listed,
# and each exit code the help names is what the command does.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/compare_help.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
expect_code() { [ "$1" = "$2" ] || { fail "exit code $1, expected $2"; sed 's/^/    /' "$WORK/err" >&2; }; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
cmp_run() { "$KBRUN" compare "$@" >"$WORK/out" 2>"$WORK/err"; CODE=$?; }

begin help
"$KBRUN" compare --help >"$WORK/help" 2>&1; expect_code $? 0
"$KBRUN" compare -h >"$WORK/help2" 2>&1; expect_code $? 0
cmp -s "$WORK/help" "$WORK/help2" || fail "-h and --help differ"
# every option the parser compares `a` with is in the help
opts=$(sed -n '/^function M.compare(args)/,/^end/p' "$SRC/lua/kb/cli/init.lua" | grep -o 'a == "-[-a-z]*"' | sed 's/a == "\(.*\)"/\1/' | sort -u)
[ -n "$opts" ] || fail "no options found in lua/kb/cli/init.lua"
for o in $opts; do grep -qE -- "(^|[ ,])$o( |,|$)" "$WORK/help" || fail "option $o is parsed but not in the help"; done
# every statistic --stat accepts is listed, and one it refuses is refused
for s in p50 p75 p90 p95 p99 p999 p9999 mean min max; do
  grep -q -- " $s\b" "$WORK/help" || fail "--stat $s is accepted but not listed"
done
end

# experiments: A, B (B 30% slower on every call), C without the histogram
cat >"$WORK/lat.lua" <<'LUA'
local kb = require "kb"
return {
  name = "lat",
  params = { slow = 1.0, hist = true },
  run = function(p)
    local h = p.hist and kb.metrics.histogram("api.get") or nil
    for i = 1, 2000 do
      local slow = tonumber(os.getenv("LAT_SLOW")) or p.slow -- same parameters, other latencies
      if h then h:record(slow * 0.01 * (1 + (i % 100) / 10)) end
    end
    kb.metrics.counter("calls"):inc(2000)
    return { success_rate = 1.0 }
  end,
}
LUA
"$KBRUN" -q -o "$WORK/a" "$WORK/lat.lua" >/dev/null 2>&1 || fail "run a"
"$KBRUN" -q -o "$WORK/b" "$WORK/lat.lua" slow=1.3 >/dev/null 2>&1 || fail "run b"
"$KBRUN" -q -o "$WORK/c" "$WORK/lat.lua" hist=false >/dev/null 2>&1 || fail "run c"
# two sweeps of one cell each (same parameters), the second 30% slower
"$KBRUN" -q -o "$WORK/s1" "$WORK/lat.lua" >/dev/null 2>&1 || fail "run s1"
LAT_SLOW=1.3 "$KBRUN" -q -o "$WORK/s2" "$WORK/lat.lua" >/dev/null 2>&1 || fail "run s2"
A=$(ls -d "$WORK"/a/*/ | head -1); B=$(ls -d "$WORK"/b/*/ | head -1); C=$(ls -d "$WORK"/c/*/ | head -1)

begin exit-0-report-only
cmp_run "$A" "$B"; expect_code "$CODE" 0          # no gate: only reports
expect_in "$WORK/out" "api.get"
for s in p75 p9999 min; do cmp_run --metric api.get --stat "$s" --tolerance 500% "$A" "$B"; expect_code "$CODE" 0; done
cmp_run --metric api.get --test none --tolerance 50% "$A" "$B"; expect_code "$CODE" 0   # 30% < 50%
end

begin exit-1-regressed
cmp_run --metric api.get "$A" "$B"; expect_code "$CODE" 1
cmp_run --tolerance 10% "$A" "$B"; expect_code "$CODE" 1   # without --metric: every histogram
cmp_run --metric api.get "$A" "$C"; expect_code "$CODE" 1   # missing from one side
# result.json files and sweeps (folders of experiment folders)
cmp_run --metric api.get "$A/result/result.json" "$B/result/result.json"; expect_code "$CODE" 1
cmp_run --metric api.get "$WORK/s1" "$WORK/s2"; expect_code "$CODE" 1   # one cell each, regressed
cmp_run --metric api.get "$WORK/s1" "$WORK/s1"; expect_code "$CODE" 0
cmp_run --metric success_rate --better lower "$A" "$B"; expect_code "$CODE" 0   # equal: not worse
end

begin exit-2-usage
cmp_run --metric nosuch "$A" "$B"; expect_code "$CODE" 2   # in neither run
cmp_run "$A" "$WORK/s2"; expect_code "$CODE" 2             # an experiment with a sweep
expect_in "$WORK/err" "compare experiments with experiments, sweeps with sweeps"
cmp_run --stat p42 "$A" "$B"; expect_code "$CODE" 2
cmp_run --alpha 1 "$A" "$B"; expect_code "$CODE" 2
cmp_run --better up "$A" "$B"; expect_code "$CODE" 2
cmp_run --frob "$A" "$B"; expect_code "$CODE" 2
cmp_run "$A" "$WORK/nothing"; expect_code "$CODE" 2        # unreadable input
cmp_run "$WORK/a" "$WORK/b"; expect_code "$CODE" 2         # sweeps with no cell in common
cmp_run "$A"; expect_code "$CODE" 2
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
