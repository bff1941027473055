#!/usr/bin/env bash
# Ctrl-C in the middle of a sweep on the events clock (kb.sweep, docs/sweep.md):
#   - kbrun exits 130 as interrupted,
#   - every cell folder holds its result/result.json: "ok" for the cells
#     that finished, "interrupted" with what they measured (their metric
#     registry) for those that were running, on the events clock,
#   - sweep.csv and the journal hold the finished cells, and only those.
# The Ctrl-C comes once two cells have finished and a later one has
# recorded 5 of its 50 waits (it leaves output/measuring): what each cell
# measured is then known (sweep_interrupt_check.lua checks it).
set -u
. "$(dirname "$0")/common.bash"
e2e_init sweep_interrupt
cat >"$WORK/sweep.lua" <<'EOF'
local kb = require "kb"
local sweep = require "kb.sweep"
local metrics = require "kb.metrics"
return {
  name = "interrupt_e2e",
  run = function()
    return sweep.run {
      name = "interrupt", version = 1, parallel = 2,
      matrix = { a = { 1, 2, 3, 4, 5, 6, 7, 8 } },
      run = function(cell, ctx)
        local sim = ctx:sim(sweep.cluster { pools = 1, nodes = 1, cpu = 2, memory = "4Gi" })
        local h = metrics.histogram("cell.wait")
        for i = 1, 50 do
          local t0 = kb.now()
          kb.sleep(10)
          h:record(kb.now() - t0)
          if i == 5 then kb.fs.write(kb.fs.join(ctx.dir, "output", "measuring"), "5") end
          -- real time passes too, so a Ctrl-C lands while cells run
          kb.core.sleep_real(0.01)
        end
        return { a = cell.a, url = sim.url ~= nil }
      end,
    }
  end,
}
EOF

OUT=$WORK/out
"$KBRUN" -q --seed 5 -o "$OUT" "$WORK/sweep.lua" >"$WORK/run.log" 2>&1 &
PID=$!
# wait (bounded) until two cells have finished and a later one measures
for _ in $(seq 600); do
  n=$(grep -c '"event":"done"' "$OUT/interrupt/journal.jsonl" 2>/dev/null)
  if [ "${n:-0}" -ge 2 ] && ls "$OUT"/interrupt/c00[3-8]-r1/output/measuring >/dev/null 2>&1; then break; fi
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
kill -INT "$PID" 2>/dev/null
wait "$PID"
code=$?
PID=
[ "$code" = 130 ] || fail "exit code $code, expected 130: $(tail -5 "$WORK/run.log")"
"$KBRUN" -q -o "$WORK/checks" "$(dirname "$0")/sweep_interrupt_check.lua" "dir=$OUT/interrupt" >"$WORK/check.log" 2>&1 ||
  fail "$(cat "$WORK/check.log")"
[ "$failed" = 0 ] && echo "sweep_interrupt: ok ($(grep -m1 " cells: " "$WORK/check.log"))"
[ "$failed" = 0 ] || sed 's/^/  run: /' "$WORK/run.log" >&2
exit $((failed > 0))
