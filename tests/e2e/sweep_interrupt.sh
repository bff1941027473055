#!/usr/bin/env bash
# Ctrl-C in the middle of a sweep on the events clock (kb.sweep, docs/sweep.md):
#   - kbrun exits 130 as interrupted,
#   - every cell folder holds its result/result.json: "ok" for the cells
#     that finished, "interrupted" with what they measured (their metric
#     registry) for those that were running,
#   - sweep.csv holds the finished cells.
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
# wait (bounded) until two cells have finished, then Ctrl-C
for _ in $(seq 300); do
  n=$(grep -c '"event":"done"' "$OUT/interrupt/journal.jsonl" 2>/dev/null)
  [ "${n:-0}" -ge 2 ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
kill -INT "$PID" 2>/dev/null
wait "$PID"
code=$?
PID=
[ "$code" = 130 ] || fail "exit code $code, expected 130: $(tail -5 "$WORK/run.log")"
cells=0 ok=0 interrupted=0
for d in "$OUT"/interrupt/c*-r1; do
  [ -d "$d" ] || continue
  cells=$((cells + 1))
  f="$d/result/result.json"
  if [ ! -f "$f" ]; then fail "$d has no result/result.json"; continue; fi
  status=$(sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$f" | head -1)
  case "$status" in
    ok) ok=$((ok + 1)) ;;
    interrupted)
      interrupted=$((interrupted + 1))
      grep -q '"cell.wait"' "$f" || fail "$f: an interrupted cell keeps what it measured (cell.wait)" ;;
    *) fail "$f: status '$status'" ;;
  esac
done
[ "$cells" -ge 3 ] || fail "only $cells cell folders: the interrupt came too late"
[ "$ok" -ge 2 ] || fail "$ok finished cells, expected at least 2"
[ "$interrupted" -ge 1 ] || fail "no cell was interrupted while running"
rows=$(($(wc -l <"$OUT/interrupt/sweep.csv") - 1))
[ "$rows" -ge "$ok" ] || fail "sweep.csv has $rows rows for $ok finished cells"
[ "$failed" = 0 ] && echo "sweep_interrupt: ok ($cells cells: $ok ok, $interrupted interrupted)"
exit $((failed > 0))
