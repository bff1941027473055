#!/usr/bin/env bash
# kill -9 at any moment of a 50-run storm, then `kbrun report DIR`: every
# run the server holds appears in runs.csv with its id (docs/storm.md,
# "Every run accounted for"). Against a standalone `kbrun sim --speed 1`,
# where a CreateRun takes real time (its modelled latency), so creates are
# in flight at the kill; a fresh simulator per case, so every run it holds
# is the storm's. Each case compares the rebuilt runs.csv with the server's
# own list (GET /apis/v1beta1/runs), after kbrun report:
#   during-creates-1 / -20 / -40: killed once 1, 20, 40 creates were
#     answered, with up to 10 more in flight;
#   during-cleanup: Ctrl-C, then kill -9 after the first journaled delete:
#     deleted runs are marked deleted in runs.csv and gone from the server,
#     the others are listed with their ids;
#   server-gone: killed mid-creation, the simulator stopped, then kbrun
#     report: the unanswered creates are Unknown (intent journaled, server
#     unreachable), never "Not created".
# Also a stalled create + Ctrl-C: the simulator holds every pipeline call
# (stall), the storm is interrupted while its pipeline create is held;
# cleanup finds the pipeline by name once the server made it, so nothing is
# left on the server.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/sigkill_creates.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
SIM_PID= PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
failed=0 passed=0
CASE=
fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && { passed=$((passed + 1)); echo "ok   $CASE"; }; }
N=50

cat >"$WORK/check.lua" <<'EOF'
-- kbrun check.lua dir=EXPERIMENT url=SIM_URL runs=N [unknown=K] [deleted=true]
-- [gone=true]: the rebuilt runs.csv against the server's own list of runs.
local kb = require "kb"
local csv = require "kb.csv"
local p = kb.params
local problems = {}
local function problem(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end
local rows = csv.parse(kb.fs.read(p.dir .. "/result/runs.csv"), { header = true })
if #rows ~= math.tointeger(p.runs) then problem("runs.csv has %d rows, expected %d", #rows, p.runs) end
local by_id, outcomes, deleted = {}, {}, 0
for i, row in ipairs(rows) do
  if row.index ~= tostring(i) then problem("row %d has index %s", i, row.index) end
  if row.id ~= "" then by_id[row.id] = row end
  outcomes[row.outcome] = (outcomes[row.outcome] or 0) + 1
  if row.deleted == "true" then deleted = deleted + 1 end
  if row.outcome == "Not created" and row.id ~= "" then problem("row %d: Not created with id %s", i, row.id) end
end
local server = {}
if p.gone ~= true then
  local token
  repeat
    local q = "page_size=200" .. (token and ("&page_token=" .. token) or "")
    local doc = kb.json.decode(kb.http.get(p.url .. "/apis/v1beta1/runs?" .. q).body)
    for _, r in ipairs(doc.runs or {}) do server[#server + 1] = r end
    token = doc.next_page_token
  until token == nil or token == ""
  for _, r in ipairs(server) do
    local row = by_id[r.id]
    if not row then
      problem("the server's run %s (%s) is not in runs.csv", r.id, r.name)
    elseif row.name ~= r.name then
      problem("run %s: runs.csv names it %s, the server %s", r.id, row.name, r.name)
    elseif row.deleted == "true" then
      problem("run %s is marked deleted but the server holds it", r.id)
    end
  end
  local on_server = {}
  for _, r in ipairs(server) do on_server[r.id] = true end
  for id, row in pairs(by_id) do
    if not on_server[id] and row.deleted ~= "true" then
      problem("runs.csv lists %s (%s) with an id the server does not hold", id, row.outcome)
    end
  end
end
if p.deleted == true and deleted == 0 then problem("no run is marked deleted") end
if p.unknown then
  local want = math.tointeger(p.unknown)
  if (outcomes.Unknown or 0) ~= want then problem("%d Unknown rows, expected %d", outcomes.Unknown or 0, want) end
  for _, row in ipairs(rows) do
    if row.outcome == "Unknown" and not row.error:find("server unreachable", 1, true) then
      problem("row %s: Unknown without 'server unreachable': %s", row.index, row.error)
    end
  end
end
local text = {}
for k, v in pairs(outcomes) do text[#text + 1] = k .. "=" .. v end
table.sort(text)
if #problems > 0 then error(table.concat(problems, "\n  ") .. "\n  outcomes: " .. table.concat(text, " "), 0) end
print(string.format("server %d runs, runs.csv %d rows with an id, %d deleted; %s", #server,
  (function() local n = 0 for _ in pairs(by_id) do n = n + 1 end return n end)(), deleted,
  table.concat(text, " ")))
EOF

start_sim() { # start_sim [ARGS...]: a fresh kbrun sim at speed 1; sets URL
  [ -n "$SIM_PID" ] && { kill "$SIM_PID" 2>/dev/null; wait "$SIM_PID" 2>/dev/null; }
  "$KBRUN" sim --listen 127.0.0.1:0 --speed 1 "$@" >"$WORK/sim.out" 2>&1 &
  SIM_PID=$!
  URL=
  for _ in $(seq 100); do
    URL=$(head -1 "$WORK/sim.out" 2>/dev/null | grep -o 'http://[0-9.:]*')
    [ -n "$URL" ] && break
    sleep 0.1
  done
  [ -n "$URL" ] || { fail "kbrun sim did not start: $(cat "$WORK/sim.out")"; return; }
  # and accepts connections
  local port=${URL##*:}
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return
    sleep 0.05
  done
  fail "kbrun sim at $URL does not accept connections (alive: $(kill -0 "$SIM_PID" 2>/dev/null && echo yes || echo no)): $(cat "$WORK/sim.out")"
}
start_storm() { # start_storm OUT [ARGS...]: taxi_50runs in the background; sets PID
  local out=$1
  shift
  (cd "$SRC" && exec "$KBRUN" -q -o "$out" scenarios/taxi_50runs.lua host="$URL" num_runs=$N \
    run_status_polling_interval_sec=36000 timeout=0 run_timeout=0 request_timeout=10 "$@") \
    >"$WORK/stdout" 2>"$WORK/stderr" &
  PID=$!
}
journal_of() { ls "$1"/*/output/journal.jsonl 2>/dev/null | head -1; }
wait_for() { # wait_for OUT PATTERN COUNT: until the journal has COUNT lines matching
  local j
  for _ in $(seq 600); do
    j=$(journal_of "$1")
    [ -n "$j" ] && [ "$(grep -c "$2" "$j")" -ge "$3" ] && return 0
    sleep 0.02
  done
  fail "the journal never had $3 lines matching $2"
  return 1
}
kill_storm() {
  kill -9 "$PID"
  wait "$PID" 2>/dev/null
  PID=
}
report() { # report OUT: kbrun report of the killed experiment; sets DIR
  DIR=$(ls -d "$1"/*/ 2>/dev/null | head -1 | sed 's:/$::')
  [ -f "$DIR/result/result.json" ] && fail "a killed run wrote result.json"
  "$KBRUN" report "$DIR" >"$WORK/report.out" 2>"$WORK/report.err" \
    || fail "kbrun report failed: $(cat "$WORK/report.err")"
}
check() { # check ARGS...: check.lua on DIR
  "$KBRUN" -q -o "$WORK/checks" "$WORK/check.lua" dir="$DIR" url="$URL" runs=$N "$@" >"$WORK/check.out" 2>&1 \
    || fail "$(cat "$WORK/check.out")"
  [ "$CASE_FAILED" = 0 ] && echo "     $(grep '^server' "$WORK/check.out")"
}

for at in 1 20 40; do
  begin "during-creates-$at"
  start_sim
  start_storm "$WORK/c$at" concurrency=10
  wait_for "$WORK/c$at" '"run.created"' $at && kill_storm
  report "$WORK/c$at"
  check
  end
done

begin during-cleanup
start_sim
start_storm "$WORK/cl" concurrency=10
if wait_for "$WORK/cl" '"run.created"' $N; then
  sleep 0.3
  kill -INT "$PID"
  wait_for "$WORK/cl" '"event":"deleted"' 3 && kill_storm
  report "$WORK/cl"
  check deleted=true
fi
end

begin server-gone
start_sim
start_storm "$WORK/gone" concurrency=10
if wait_for "$WORK/gone" '"run.created"' 20; then
  kill_storm
  J=$(journal_of "$WORK/gone")
  INTENTS=$(grep -c '"run.intent"' "$J")
  ANSWERED=$(grep -c '"run.created"\|"run.create_failed"' "$J")
  kill "$SIM_PID"
  wait "$SIM_PID" 2>/dev/null
  SIM_PID=
  report "$WORK/gone"
  grep -q "could not ask" "$WORK/report.err" || fail "kbrun report did not say the server was unreachable: $(cat "$WORK/report.err")"
  check gone=true unknown=$((INTENTS - ANSWERED))
fi
end

# A stalled create and Ctrl-C: every pipeline call is held 4 s by the
# simulator; the storm is interrupted while its pipeline create is held.
begin stalled-create-ctrl-c
start_sim
if [ -n "$URL" ]; then
  "$KBRUN" -q -o "$WORK/checks" /dev/stdin url="$URL" >"$WORK/faults.out" 2>&1 <<'EOF' || fail "could not set the fault: $(cat "$WORK/faults.out")"
local kb = require "kb"
return { params = { url = "" }, run = function(p)
  local r = kb.http.post(p.url .. "/sim/v1/faults",
    { api = { stall_rate = 1, stall_seconds = 4, path_prefix = "/apis/v1beta1/pipelines" } })
  assert(r.status == 200, r.status .. " " .. r.body)
end }
EOF
  start_storm "$WORK/stall" concurrency=10 scrape_metrics=false
  sleep 1.5
  J=$(journal_of "$WORK/stall")
  grep -q '"pipeline.created"' "$J" && fail "the pipeline create was answered before Ctrl-C (no stall?)"
  kill -INT "$PID"
  wait "$PID"
  CODE=$?
  PID=
  [ "$CODE" = 130 ] || fail "kbrun exited $CODE after Ctrl-C, expected 130: $(tail -5 "$WORK/stderr")"
  "$KBRUN" -q -o "$WORK/checks" /dev/stdin url="$URL" >"$WORK/left.out" 2>&1 <<'EOF' || fail "$(cat "$WORK/left.out")"
local kb = require "kb"
return { params = { url = "" }, run = function(p)
  local left = {}
  for _, what in ipairs({ "pipelines", "experiments", "runs" }) do
    local doc = kb.json.decode(kb.http.get(p.url .. "/apis/v1beta1/" .. what .. "?page_size=100").body)
    for _, x in ipairs(doc[what] or {}) do
      -- the simulator's own Default experiment is not the storm's
      if x.name ~= "Default" then left[#left + 1] = what .. " " .. x.id .. " " .. tostring(x.name) end
    end
  end
  if #left > 0 then error("left on the server: " .. table.concat(left, ", "), 0) end
end }
EOF
  DIR=$(ls -d "$WORK"/stall/*/ 2>/dev/null | head -1 | sed 's:/$::')
  grep -q '"event":"pipeline.reconciled"' "$DIR/output/journal.jsonl" \
    || fail "cleanup did not find the pipeline by name (no pipeline.reconciled in the journal)"
  grep -q '"event":"deleted".*"kind":"pipeline"' "$DIR/output/journal.jsonl" \
    || fail "the pipeline's delete is not journaled"
fi
end

echo "sigkill_creates: $passed passed, $failed failed"
[ "$failed" = 0 ]
