#!/usr/bin/env bash
# Two sweeps on one folder (kb.sweep, docs/sweep.md "One sweep per folder"):
#   - while sweep A runs, sweep B on the same folder is refused (exit 2, a
#     message naming A's pid and host) and writes nothing: no journal line,
#     no cell started, no folder moved aside;
#   - A finishes untouched: one start and one done record per cell run;
#   - a resume with another speed is refused, naming what changed;
#     fresh=true on the command line starts over.
# A's cells wait for a release file, so B runs while A is certainly inside
# its cells (no timing assumption).
set -u
. "$(dirname "$0")/common.bash"
e2e_init sweep_lock

cat >"$WORK/sweep.lua" <<'EOF'
local kb = require "kb"
local sweep = require "kb.sweep"
return {
  name = "lock_e2e",
  params = { marker = "", release = "", speed = 600, fresh = false },
  run = function(p)
    return sweep.run {
      name = "locked", version = 1, parallel = 2, speed = p.speed, fresh = p.fresh,
      matrix = { a = { 1, 2, 3, 4 } },
      run = function(cell, ctx)
        kb.fs.append(p.marker, string.format("start %s %d\n", ctx.id, ctx.rep))
        local sim = ctx:sim(sweep.cluster { pools = 1, nodes = 1, cpu = 2, memory = "4Gi" })
        assert(sim.url)
        -- bounded: at most 20000 x 10 ms of real time at x600
        for _ = 1, 20000 do
          if p.release == "" or kb.fs.exists(p.release) then break end
          kb.sleep(6)
        end
        return { a = cell.a * 10 }
      end,
    }
  end,
}
EOF

OUT=$WORK/out
DIR=$OUT/locked
J=$DIR/journal.jsonl
count() { local n; n=$(grep -c "$1" "$2" 2>/dev/null); echo "${n:-0}"; }

# 1. sweep A, held inside its first cells until the release file exists
"$KBRUN" -q --seed 3 -o "$OUT" "$WORK/sweep.lua" marker="$WORK/a.marker" release="$WORK/release" \
  >"$WORK/a.log" 2>&1 &
PID=$!
for _ in $(seq 1 3000); do
  [ "$(count start "$WORK/a.marker")" -ge 2 ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.02
done
[ "$(count start "$WORK/a.marker")" -ge 2 ] || fail "sweep A did not start its cells"
[ -f "$DIR/sweep.lock" ] || fail "sweep A holds no $DIR/sweep.lock"
APID=$PID
grep -q "\"pid\":$APID" "$DIR/sweep.lock" || fail "the lock does not name sweep A's pid $APID: $(cat "$DIR/sweep.lock")"

# 2. sweep B on the same folder while A runs: refused, nothing written
cp "$J" "$WORK/journal.before"
ls -a "$DIR" >"$WORK/ls.before"
"$KBRUN" -q --seed 3 -o "$OUT" "$WORK/sweep.lua" marker="$WORK/b.marker" >"$WORK/b.log" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "sweep B exited $rc, expected 2 (usage: the folder is busy)"
grep -q "^kbrun: kb.sweep: sweep 'locked' in .* is already running" "$WORK/b.log" ||
  fail "sweep B's refusal is not one usage message: $(cat "$WORK/b.log")"
grep -q "is already running (pid $APID on " "$WORK/b.log" || { fail "sweep B's message does not name sweep A"; cat "$WORK/b.log" >&2; }
[ -e "$WORK/b.marker" ] && fail "sweep B started $(wc -l <"$WORK/b.marker") cell(s)"
[ "$(count '"event":"resume"' "$J")" = 0 ] || fail "sweep B wrote a resume record into A's journal"
ls -a "$DIR" >"$WORK/ls.after"
cmp -s "$WORK/ls.before" "$WORK/ls.after" || { fail "sweep B changed the folder"; diff "$WORK/ls.before" "$WORK/ls.after" >&2; }
ls -d "$DIR"/*-interrupted-* >/dev/null 2>&1 && fail "a cell folder was moved aside"

# 3. A goes on and finishes with exactly one start and one done per cell
touch "$WORK/release"
wait "$PID"
arc=$?
PID=
[ "$arc" = 0 ] || { fail "sweep A exited $arc"; cat "$WORK/a.log" >&2; }
[ "$(count '"event":"done"' "$J")" = 4 ] || fail "the journal has $(count '"event":"done"' "$J") done records, expected 4"
[ "$(count '"event":"start"' "$J")" = 4 ] || fail "the journal has $(count '"event":"start"' "$J") start records, expected 4"
[ "$(sort -u "$WORK/a.marker" | wc -l)" = 4 ] && [ "$(wc -l <"$WORK/a.marker")" = 4 ] \
  || fail "sweep A started its cells $(wc -l <"$WORK/a.marker") times"
[ -e "$DIR/sweep.lock" ] && fail "sweep A left its lock behind"

# 4. the same sweep at another speed: refused, saying what changed
"$KBRUN" -q --seed 3 -o "$OUT" "$WORK/sweep.lua" marker="$WORK/c.marker" speed=300 >"$WORK/c.log" 2>&1
rc=$?
[ "$rc" != 0 ] || fail "a resume at another speed was accepted"
grep -q "speed: 600 -> 300" "$WORK/c.log" || { fail "the refusal does not say the speed changed"; cat "$WORK/c.log" >&2; }
[ -e "$WORK/c.marker" ] && fail "the refused resume ran cells"

# 5. fresh=true on the command line: the old results move aside, all cells run
"$KBRUN" -q --seed 3 -o "$OUT" "$WORK/sweep.lua" marker="$WORK/d.marker" speed=300 fresh=true >"$WORK/d.log" 2>&1 \
  || { fail "fresh=true failed"; cat "$WORK/d.log" >&2; }
[ "$(wc -l <"$WORK/d.marker" 2>/dev/null || echo 0)" = 4 ] || fail "fresh=true ran $(wc -l <"$WORK/d.marker" 2>/dev/null) cells, expected 4"
ls -d "$OUT"/locked.old-* >/dev/null 2>&1 || fail "fresh=true did not keep the old results aside"
[ "$(count '"event":"done"' "$J")" = 4 ] || fail "after fresh=true the journal has $(count '"event":"done"' "$J") done records"

if [ "$failed" -gt 0 ]; then
  echo "sweep_lock: $failed check(s) failed" >&2
  exit 1
fi
echo "sweep_lock: ok"
