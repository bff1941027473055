#!/usr/bin/env bash
# A run storm killed with SIGKILL mid-way, then `kbrun report DIR`
# (docs/results.md): the report is rebuilt from output/journal.jsonl alone,
# and what it counts equals what the simulator served up to the kill.
#   - taxi_50runs (10 runs) against a standalone `kbrun sim`, whose
#     /metrics counters outlive the client;
#   - polls 10 cluster-hours apart and no timeouts: once every run is
#     created and polled once, the storm only sleeps; the test waits well
#     past the journal's flush interval (50 ms) before kill -9, so nothing
#     is in flight or unflushed;
#   - kbrun report rebuilds result.json (status "killed"), runs.csv,
#     latencies.csv and report.html; the checker compares the rebuilt
#     counts with the simulator's request counters, and the CSVs with them.
# Also: kbrun report on a folder without results and journal, and on a
# run that finished (nothing to rebuild).
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/sigkill_report.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
SIM_PID= PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
failed=0
fail() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }
N=10

cat >"$WORK/check.lua" <<'EOF'
-- kbrun check.lua dir=EXPERIMENT metrics=FILE runs=N: the rebuilt result
-- against the simulator's /metrics as saved before kbrun report (which
-- lists the experiment's runs to reconcile them with the server).
local kb = require "kb"
local csv = require "kb.csv"
local p = kb.params
local problems = {}
local function expect(what, got, want)
  if got ~= want then problems[#problems + 1] = string.format("%s: %s, expected %s", what, tostring(got), tostring(want)) end
end
local doc = kb.json.decode(kb.fs.read(p.dir .. "/result/result.json"))
expect("status", doc.status, "killed")
expect("rebuilt from", doc.rebuilt and doc.rebuilt.from, "output/journal.jsonl")
local hcount, counter = {}, {}
for _, m in ipairs(doc.metrics.metrics) do
  if m.kind == "histogram" then hcount[m.key] = m.summary.count
  elseif m.kind == "counter" then counter[m.key] = m.value end
end
-- kb.kfp's request counters of one op, over statuses and clients
local function requests(op)
  local n = 0
  for key, v in pairs(counter) do
    if key:match("kfp%.requests{") and key:find("op=" .. op .. ",", 1, true) then n = n + v end
  end
  return n
end
local served = {}
for line in kb.fs.read(p.metrics):gmatch("[^\n]+") do
  local name, v = line:match("^(run_server_[%w_]+_requests) (%d+)")
  if name then served[name] = tonumber(v) end
end
local runs = math.tointeger(p.runs)
expect("simulator CreateRun requests", served.run_server_create_requests, runs)
expect("run.create count", hcount["run.create"], served.run_server_create_requests)
expect("kfp.requests run.create", requests("run.create"), served.run_server_create_requests)
expect("run.get + poll.run.get", (hcount["run.get"] or 0) + (hcount["poll.run.get"] or 0),
  served.run_server_get_requests)
expect("kfp.requests run.get", requests("run.get"), served.run_server_get_requests)
expect("run.list count", hcount["run.list"] or 0, served.run_server_list_requests)
expect("run.delete count", hcount["run.delete"] or 0, served.run_server_delete_requests)
local r = doc.result
expect("result.runs.created", r and r.runs.created, runs)
expect("result.runs.requested", r and r.runs.requested, runs)
-- runs.csv: a row per run, every one created and still running or done
local rows = csv.parse(kb.fs.read(p.dir .. "/result/runs.csv"), { header = true })
expect("runs.csv rows", #rows, runs)
local with_id = 0
for _, row in ipairs(rows) do if row.id ~= "" then with_id = with_id + 1 end end
expect("runs.csv rows with an id", with_id, runs)
-- latencies.csv: a row per call, as many run.create as the server served
local lat = csv.parse(kb.fs.read(p.dir .. "/result/latencies.csv"), { header = true })
local creates = 0
for _, row in ipairs(lat) do if row.op == "run.create" then creates = creates + 1 end end
expect("latencies.csv run.create rows", creates, served.run_server_create_requests)
local html = kb.fs.read(p.dir .. "/result/report.html")
if not html:find("killed", 1, true) then problems[#problems + 1] = "report.html does not say killed" end
if not html:find("run.create", 1, true) then problems[#problems + 1] = "report.html has no run.create" end
if #problems > 0 then error(table.concat(problems, "\n"), 0) end
print("ok")
EOF

# A standalone simulator; its first line of output is its URL.
"$KBRUN" sim --listen 127.0.0.1:0 --profile fast >"$WORK/sim.out" 2>&1 &
SIM_PID=$!
URL=
for _ in $(seq 100); do
  URL=$(head -1 "$WORK/sim.out" 2>/dev/null | grep -o 'http://[0-9.:]*')
  [ -n "$URL" ] && break
  sleep 0.1
done
[ -n "$URL" ] || { echo "FAIL: kbrun sim did not start: $(cat "$WORK/sim.out")" >&2; exit 1; }

(cd "$SRC" && exec "$KBRUN" -q -o "$WORK/killed" scenarios/taxi_50runs.lua host="$URL" num_runs=$N \
  run_status_polling_interval_sec=36000 timeout=0 run_timeout=0) >"$WORK/stdout" 2>"$WORK/stderr" &
PID=$!
J=
for _ in $(seq 300); do
  J=$(ls "$WORK"/killed/*/output/journal.jsonl 2>/dev/null | head -1)
  [ -n "$J" ] && [ "$(grep -c '"run.created"' "$J")" = "$N" ] && break
  sleep 0.05
done
# the first poll round follows the creates at once; then the storm sleeps
sleep 1
kill -9 "$PID"
wait "$PID" 2>/dev/null
CODE=$?
PID=
[ "$CODE" = 137 ] || fail "kbrun exited with $CODE before the kill: $(cat "$WORK/stderr")"
DIR=$(ls -d "$WORK"/killed/*/ 2>/dev/null | head -1 | sed 's:/$::')
[ -f "$DIR/result/result.json" ] && fail "a killed run wrote result.json"

# the simulator's counters at the kill (kbrun report then asks it about the runs)
"$KBRUN" -q -o "$WORK/checks" /dev/stdin url="$URL" out="$WORK/metrics.txt" >"$WORK/save.out" 2>&1 <<'EOS' \
  || fail "could not save the simulator's metrics: $(cat "$WORK/save.out")"
local kb = require "kb"
return { params = { url = "", out = "" }, run = function(p)
  kb.fs.write(p.out, kb.http.get(p.url .. "/metrics").body)
end }
EOS
"$KBRUN" report "$DIR" >"$WORK/report.out" 2>"$WORK/report.err"
CODE=$?
[ "$CODE" = 0 ] || fail "kbrun report exited with $CODE: $(cat "$WORK/report.err")"
grep -qF "$DIR/result/report.html" "$WORK/report.out" || fail "kbrun report did not print the report's path: $(cat "$WORK/report.out")"
grep -qF "rebuilt from output/journal.jsonl (no result/result.json; status killed)" "$WORK/report.err" \
  || fail "kbrun report did not say it rebuilt: $(cat "$WORK/report.err")"
"$KBRUN" -q -o "$WORK/checks" "$WORK/check.lua" dir="$DIR" metrics="$WORK/metrics.txt" runs=$N >"$WORK/check.out" 2>&1 \
  || fail "$(cat "$WORK/check.out")"

# A second report: result.json is now newer than the journal, no rebuild.
"$KBRUN" report "$DIR" >"$WORK/report.out" 2>"$WORK/report.err"
CODE=$?
[ "$CODE" = 0 ] || fail "second kbrun report exited with $CODE: $(cat "$WORK/report.err")"
grep -q "rebuilt" "$WORK/report.err" && fail "second kbrun report rebuilt again"

# Neither results nor a journal: the user is told.
mkdir -p "$WORK/empty/result"
"$KBRUN" report "$WORK/empty" >"$WORK/report.out" 2>"$WORK/report.err"
CODE=$?
[ "$CODE" = 1 ] || fail "report of an empty folder exited with $CODE"
grep -qF "kb.report.write: no result document in '$WORK/empty/result'" "$WORK/report.err" \
  || fail "report of an empty folder: $(cat "$WORK/report.err")"
"$KBRUN" report --bogus "$WORK/empty" >"$WORK/report.out" 2>"$WORK/report.err"
CODE=$?
[ "$CODE" = 2 ] || fail "report --bogus exited with $CODE"
grep -qF "report: unknown option '--bogus'" "$WORK/report.err" || fail "report --bogus: $(cat "$WORK/report.err")"

[ "$failed" = 0 ] && echo "sigkill_report: ok"
[ "$failed" = 0 ]
