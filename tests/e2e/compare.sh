#!/usr/bin/env bash
# End-to-end test of `kbrun compare` as CI uses it: two runs of one
# scenario with the same seed compare equal (exit 0); a seeded 30 %
# slowdown fails the gate (exit 1); bad input is a usage error (exit 2).
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/compare.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
expect_code() { [ "$1" = "$2" ] || fail "exit code $1, expected $2"; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }

# Latencies drawn from the seeded generator (math.random follows --seed),
# scaled by `slow`.
cat >"$WORK/latency.lua" <<'LUA'
local kb = require "kb"
return {
  name = "latency",
  params = { slow = 1.0, n = 3000 },
  run = function(p)
    local h = kb.metrics.histogram("api.call", { op = "get" })
    local ok = 0
    for i = 1, p.n do
      h:record(p.slow * 0.01 * (1 + 9 * math.random() ^ 4))
      if math.random() < 0.99 then ok = ok + 1 end
    end
    return { requests = p.n, succeeded = ok, success_rate = ok / p.n }
  end,
}
LUA

exp_dir() { ls -d "$1"/*/ | head -1; }
"$KBRUN" -q -o "$WORK/a" --seed 42 "$WORK/latency.lua" || fail "run a"
"$KBRUN" -q -o "$WORK/a2" --seed 42 "$WORK/latency.lua" || fail "run a2"
"$KBRUN" -q -o "$WORK/b" --seed 42 "$WORK/latency.lua" slow=1.3 || fail "run b"
A=$(exp_dir "$WORK/a") A2=$(exp_dir "$WORK/a2") B=$(exp_dir "$WORK/b")

begin identical-runs-pass
"$KBRUN" compare --metric api.call --tolerance 10% "$A" "$A2" >"$WORK/out" 2>"$WORK/err"
expect_code $? 0
expect_in "$WORK/out" "ok api.call p99"
expect_in "$WORK/out" "+0.0%"
end

begin seeded-regression-fails
"$KBRUN" compare --metric api.call --tolerance 10% "$A" "$B" >"$WORK/out" 2>"$WORK/err"
expect_code $? 1
expect_in "$WORK/out" "REGRESSED api.call p99"
expect_in "$WORK/out" "slower"
end

begin p50-and-ks
"$KBRUN" compare --metric api.call --stat p50 --test ks --tolerance 10% "$A" "$B" >"$WORK/out" 2>"$WORK/err"
expect_code $? 1
expect_in "$WORK/out" "kolmogorov-smirnov"
end

begin within-tolerance-passes
"$KBRUN" compare --metric api.call --tolerance 50% "$A" "$B" >"$WORK/out" 2>"$WORK/err"
expect_code $? 0
end

begin success-rate-gate
"$KBRUN" compare --metric success_rate --tolerance 1% "$A" "$A2" >"$WORK/out" 2>"$WORK/err"
expect_code $? 0
expect_in "$WORK/out" "ok success_rate value"
end

begin json-output
"$KBRUN" compare --json --metric api.call "$A" "$B" >"$WORK/out" 2>"$WORK/err"
expect_code $? 1
lua5.4 -e "local s = io.open('$WORK/out'):read('a'); assert(s:find('\"regressed\": true', 1, true), 'regressed flag')" \
  || fail "JSON lacks \"regressed\": true"
end

begin usage-errors
"$KBRUN" compare "$A" >"$WORK/out" 2>"$WORK/err"
expect_code $? 2
expect_in "$WORK/err" "usage: kbrun compare"
"$KBRUN" compare --metric nope "$A" "$B" >"$WORK/out" 2>"$WORK/err"
expect_code $? 2
expect_in "$WORK/err" "compare: no histogram, counter or result field 'nope' in A or B"
"$KBRUN" compare --tolerance lots "$A" "$B" >"$WORK/out" 2>"$WORK/err"
expect_code $? 2
expect_in "$WORK/err" "--tolerance wants a percentage like 10% or a fraction like 0.1, got 'lots'"
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
