#!/usr/bin/env bash
# A sweep killed with SIGKILL mid-way and re-run with the same command
# (kb.sweep, docs/sweep.md "Resuming"):
#   - cells finished before the kill are not run again,
#   - the final sweep.csv equals an uninterrupted run's (same --seed),
#   - every record written before the kill is still in the journal,
#   - the folder of a cell that was running at the kill is kept aside.
# Each cell starts its own simulator (the kill leaves no process behind:
# simulators are threads of kbrun) and derives its metrics from its seed.
set -u
. "$(dirname "$0")/common.bash"
e2e_init sweep_resume

cat >"$WORK/sweep.lua" <<'EOF'
local kb = require "kb"
local sweep = require "kb.sweep"
return {
  name = "resume_e2e",
  params = { marker = "" },
  run = function(p)
    return sweep.run {
      name = "resume", version = 1, parallel = 2, repeats = 2, speed = 600,
      matrix = { a = { 1, 2, 3, 4, 5, 6 }, b = { 1, 2 } },
      run = function(cell, ctx)
        kb.fs.append(p.marker, string.format("start %s %d\n", ctx.id, ctx.rep))
        local sim = ctx:sim(sweep.cluster { pools = 1, nodes = cell.b, cpu = 2, memory = "4Gi" })
        local nodes = kb.json.decode(kb.http.get(sim.url .. "/api/v1/nodes").body)
        kb.sleep(120 + ctx.rng:int(0, 60)) -- 0.2-0.3 s of real time at x600
        return { nodes = #nodes.items, score = cell.a * 100 + ctx.rng:int(0, 99), draw = ctx.rng:uniform() }
      end,
    }
  end,
}
EOF

done_count() { local n; n=$(grep -c '"event":"done"' "$1" 2>/dev/null); echo "${n:-0}"; }

# 1. the reference: uninterrupted
"$KBRUN" -q --seed 42 -o "$WORK/ref" "$WORK/sweep.lua" marker="$WORK/ref.marker" >"$WORK/ref.log" 2>&1 \
  || { fail "the reference sweep failed"; cat "$WORK/ref.log" >&2; }
REF=$WORK/ref/resume/sweep.csv
[ "$(tail -n +2 "$REF" | wc -l)" = 24 ] || fail "the reference sweep.csv has $(tail -n +2 "$REF" | wc -l) rows, not 24"

# 2. the same sweep, killed with SIGKILL once 7 cell runs have finished
OUT=$WORK/killed
"$KBRUN" -q --seed 42 -o "$OUT" "$WORK/sweep.lua" marker="$WORK/killed.marker" >"$WORK/k1.log" 2>&1 &
PID=$!
J=$OUT/resume/journal.jsonl
for _ in $(seq 1 600); do
  [ "$(done_count "$J")" -ge 7 ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.02
done
kill -9 "$PID" 2>/dev/null
wait "$PID" 2>/dev/null
PID=
BEFORE=$(done_count "$J")
cp "$J" "$WORK/journal.before"
cp "$WORK/killed.marker" "$WORK/marker.before"
if [ "$BEFORE" -lt 1 ] || [ "$BEFORE" -ge 24 ]; then
  fail "the kill did not land mid-way ($BEFORE of 24 cell runs finished)"
fi

# 3. the same command again
"$KBRUN" -q --seed 42 -o "$OUT" "$WORK/sweep.lua" marker="$WORK/killed.marker" >"$WORK/k2.log" 2>&1 \
  || { fail "the resumed sweep failed"; cat "$WORK/k2.log" >&2; }

# finished cells were not run again: each one has a single start line
grep '"event":"done"' "$WORK/journal.before" | sed -E 's/.*"id":"([^"]+)".*"repeat":([0-9]+).*/\1 \2/' >"$WORK/finished"
[ "$(wc -l <"$WORK/finished")" = "$BEFORE" ] || fail "could not read the finished cells from the journal"
while read -r id rep; do
  n=$(grep -c "^start $id $rep\$" "$WORK/killed.marker")
  [ "$n" = 1 ] || fail "cell $id repeat $rep finished before the kill but started $n times"
done <"$WORK/finished"
total_starts=$(wc -l <"$WORK/killed.marker")
starts_before=$(wc -l <"$WORK/marker.before")
reran=$((total_starts - starts_before))
[ "$reran" = $((24 - BEFORE)) ] || fail "the resumed sweep ran $reran cells, expected $((24 - BEFORE))"

# the final sweep.csv equals the uninterrupted one
cmp -s "$REF" "$OUT/resume/sweep.csv" || { fail "sweep.csv differs from the uninterrupted run's"; diff "$REF" "$OUT/resume/sweep.csv" >&2; }

# nothing written before the kill was lost: every complete line is still there
head -n "$(grep -c '' "$WORK/journal.before")" "$WORK/journal.before" | while IFS= read -r line; do
  case $line in *'"event":"done"'*) grep -qxF -- "$line" "$J" || echo lost ;; esac
done >"$WORK/lost"
[ -s "$WORK/lost" ] && fail "$(wc -l <"$WORK/lost") journal record(s) written before the kill are gone"
[ "$(done_count "$J")" = 24 ] || fail "the journal has $(done_count "$J") done records, expected 24"

# cells running at the kill: their folders are kept aside, not reused
STARTED=$(grep -c '"event":"start"' "$WORK/journal.before")
if [ "$STARTED" -gt "$BEFORE" ]; then
  ls -d "$OUT"/resume/*-interrupted-1 >/dev/null 2>&1 || fail "no *-interrupted-1 folder for the cells killed mid-run"
fi
grep -q "resuming" "$WORK/k2.log" 2>/dev/null || true
[ -f "$OUT/resume/sweep.html" ] || fail "no sweep.html after the resumed run"

if [ "$failed" -gt 0 ]; then
  echo "sweep_resume: $failed check(s) failed" >&2
  exit 1
fi
echo "sweep_resume: ok ($BEFORE of 24 cell runs finished before SIGKILL)"
