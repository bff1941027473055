#!/usr/bin/env bash
# KBRUN_LUA_PROFILE (src/rt/profile.c), kbrun's own profiler for bench/:
# - the count mode (KBRUN_LUA_PROFILE_EVERY=N) counts a known loop: a
#   function that runs 200,000 iterations of a loop body shows up with the
#   most samples, and the folded stacks name the scenario's frames
# - the time mode samples a CPU-bound Lua loop and attributes most samples
#   to it, not to the event loop
# - bench/lua_profile.lua summarises the file
# - an unwritable FILE is reported, and the run's own exit code stands
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/lua_profile.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0
fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }

cat >"$WORK/busy.lua" <<'LUA'
local function hot(n)
  local x = 0
  for i = 1, n do x = x + i % 7 end
  return x
end
local function cold(n)
  local x = 0
  for i = 1, n do x = x + i end
  return x
end
return {
  params = { n = 200000 },
  run = function(p)
    hot(p.n)
    cold(p.n // 20)
    return {}
  end,
}
LUA

# samples of FILE whose leaf frame matches PATTERN
samples_of() { awk -v pat="$2" '{ n = $NF; $NF = ""; k = split($0, f, ";"); if (f[k] ~ pat) s += n } END { print s + 0 }' "$1"; }
total_of() { awk '{ s += $NF } END { print s + 0 }' "$1"; }

begin count-mode
KBRUN_LUA_PROFILE="$WORK/count.folded" KBRUN_LUA_PROFILE_EVERY=1000 \
  "$KBRUN" -q -o "$WORK/out" "$WORK/busy.lua" >"$WORK/stdout" 2>"$WORK/stderr"
code=$?
[ "$code" = 0 ] || fail "exit code $code: $(cat "$WORK/stderr")"
if [ ! -s "$WORK/count.folded" ]; then fail "no profile written"; else
  hot=$(samples_of "$WORK/count.folded" "busy.lua:[0-9]+ hot")
  cold=$(samples_of "$WORK/count.folded" "busy.lua:[0-9]+ cold")
  # hot runs 200,000 iterations of about 5 VM instructions: ~1,000 samples
  # of 1,000 instructions; cold a twentieth of the iterations, fewer each
  [ "$hot" -ge 500 ] || fail "hot has $hot samples, expected about 1,000"
  [ "$cold" -ge 10 ] && [ "$cold" -lt $((hot / 10)) ] || fail "cold has $cold samples against hot's $hot"
  grep -q "busy.lua:[0-9]* ?;.*busy.lua:[0-9]* hot" "$WORK/count.folded" ||
    fail "hot's stack does not pass through the scenario's run: $(grep hot "$WORK/count.folded" | head -2)"
fi
end

begin time-mode
KBRUN_LUA_PROFILE="$WORK/time.folded" "$KBRUN" -q -o "$WORK/out" "$WORK/busy.lua" n=30000000 \
  >"$WORK/stdout" 2>"$WORK/stderr" || fail "exit code $?: $(cat "$WORK/stderr")"
if [ ! -s "$WORK/time.folded" ]; then fail "no profile written"; else
  hot=$(samples_of "$WORK/time.folded" "busy.lua:[0-9]+ hot")
  total=$(total_of "$WORK/time.folded")
  # the loop is nearly all of the run's CPU: most samples, whatever the clock
  [ "$total" -gt 0 ] && [ $((hot * 2)) -gt "$total" ] || fail "hot has $hot of $total samples"
fi
end

begin summary
lua5.4 "$SRC/bench/lua_profile.lua" "$WORK/count.folded" 5 >"$WORK/summary" 2>&1 || fail "lua_profile.lua failed: $(cat "$WORK/summary")"
grep -q "^self (" "$WORK/summary" && grep -q "^inclusive (" "$WORK/summary" || fail "no self/inclusive tables: $(cat "$WORK/summary")"
grep -q "%  .*busy.lua:[0-9]* hot" "$WORK/summary" || fail "hot is not in the summary: $(cat "$WORK/summary")"
end

begin unwritable-file
KBRUN_LUA_PROFILE="$WORK/no/such/dir/p.folded" "$KBRUN" -q -o "$WORK/out" "$WORK/busy.lua" n=10 \
  >"$WORK/stdout" 2>"$WORK/stderr"
code=$?
[ "$code" = 0 ] || fail "exit code $code, expected the run's own 0"
grep -q "KBRUN_LUA_PROFILE: cannot write $WORK/no/such/dir/p.folded" "$WORK/stderr" || fail "no error: $(cat "$WORK/stderr")"
end

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
