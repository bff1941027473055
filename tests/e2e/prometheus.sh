#!/usr/bin/env bash
# kbrun's observability against a real Prometheus server (Debian package
# prometheus) on loopback: a run storm against a standalone `kbrun sim`
# runs with --metrics-listen 127.0.0.1:0 for ~10 s while Prometheus
# scrapes kbrun (found through a file_sd target file once kbrun prints its
# address) and the simulator every second. Checked through Prometheus's
# query API, by kb.prometheus.query itself: kbrun_up, a latency histogram,
# request and error counters and the storm's runs by state arrived; the
# storm's prometheus_url mode put KFP's gRPC handling quantiles of the run's
# window next to the client-side figures in result.json and report.html.
# Without prometheus: SKIP (exit 0) unless KBRUN_REQUIRE_PROMETHEUS is set.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PROMETHEUS=${PROMETHEUS_BIN:-$(command -v prometheus)}
if [ -z "$PROMETHEUS" ] || [ ! -x "$PROMETHEUS" ]; then
  if [ -n "${KBRUN_REQUIRE_PROMETHEUS:-}" ]; then
    echo "FAIL: prometheus is not installed (apt-get install prometheus) and KBRUN_REQUIRE_PROMETHEUS is set" >&2
    exit 1
  fi
  echo "SKIP: prometheus is not installed (apt-get install prometheus)"
  exit 0
fi
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/prometheus.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
SIM_PID= PROM_PID= RUN_PID=
cleanup() {
  for pid in $RUN_PID $PROM_PID $SIM_PID; do kill "$pid" 2>/dev/null; done
  for pid in $RUN_PID $PROM_PID $SIM_PID; do wait "$pid" 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
passed=0 failed=0
fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; exit $?; }
# wait_for FILE PATTERN: the first match of PATTERN in FILE within ~10 s
wait_for() {
  local hit
  for _ in $(seq 100); do
    hit=$(grep -o -m1 "$2" "$1" 2>/dev/null | head -1)
    [ -n "$hit" ] && { echo "$hit"; return 0; }
    sleep 0.1
  done
  return 1
}

# 1. A standalone simulator slow enough (x60) that 20 runs take ~10 s.
"$KBRUN" sim --listen 127.0.0.1:0 --speed 60 >"$WORK/sim.out" 2>&1 &
SIM_PID=$!
SIM_URL=$(wait_for "$WORK/sim.out" 'http://[0-9.:]*') || { begin sim; fail "kbrun sim did not start: $(cat "$WORK/sim.out")"; finish; }

# 2. Prometheus on a free loopback port: kbrun's target comes later through
#    a file_sd file, the simulator's is known now.
SIM_HOSTPORT=${SIM_URL#http://}
printf '[]\n' >"$WORK/kbrun-targets.json"
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kbrun
    file_sd_configs:
      - files: ['$WORK/kbrun-targets.json']
        refresh_interval: 1s
  - job_name: kfp-sim
    static_configs:
      - targets: ['$SIM_HOSTPORT']
EOF
PROM_URL=
for attempt in 1 2 3 4 5; do
  port=$((20000 + (RANDOM * 7 + attempt) % 40000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # taken
  "$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$port" >"$WORK/prometheus.log" 2>&1 &
  PROM_PID=$!
  for _ in $(seq 150); do
    if curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then PROM_URL="http://127.0.0.1:$port"; break; fi
    kill -0 "$PROM_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$PROM_URL" ] && break
  kill "$PROM_PID" 2>/dev/null; wait "$PROM_PID" 2>/dev/null; PROM_PID=
done
if [ -z "$PROM_URL" ]; then begin prometheus; fail "prometheus did not start:"; sed 's/^/    /' "$WORK/prometheus.log" >&2; finish; fi

# A real KFP server has every gRPC method's series from its start (zeros,
# go-grpc-prometheus' Register); the simulator makes them on first use, and
# increase() cannot count a series' first sample. One refused CreateRun
# makes the series; then wait until Prometheus has scraped the simulator.
curl -s -o /dev/null -X POST -H 'content-type: application/json' -d '{}' "$SIM_URL/apis/v1beta1/runs"
begin sim-scraped
scraped=
for _ in $(seq 100); do
  curl -s "$PROM_URL/api/v1/query?query=up%7Bjob%3D%22kfp-sim%22%7D" | grep -q '"1"\]' && { scraped=1; break; }
  sleep 0.2
done
[ -n "$scraped" ] || fail "Prometheus did not scrape the simulator within 20 s"
end

# 3. The storm, with its live metrics and the Prometheus-query mode.
(cd "$SRC" && exec "$KBRUN" -q -o "$WORK/exp" --metrics-listen 127.0.0.1:0 scenarios/taxi_50runs.lua \
  host="$SIM_URL" num_runs=20 prometheus_url="$PROM_URL") >"$WORK/stdout" 2>"$WORK/stderr" &
RUN_PID=$!
begin metrics-listen
METRICS_URL=$(wait_for "$WORK/stderr" 'http://127\.0\.0\.1:[0-9]*/metrics') || fail "no 'kbrun: metrics on' line: $(cat "$WORK/stderr")"
if [ -n "$METRICS_URL" ]; then
  HOSTPORT=${METRICS_URL#http://}; HOSTPORT=${HOSTPORT%/metrics}
  printf '[{"targets": ["%s"], "labels": {"test": "e2e"}}]\n' "$HOSTPORT" >"$WORK/kbrun-targets.json.tmp"
  mv "$WORK/kbrun-targets.json.tmp" "$WORK/kbrun-targets.json"
  curl -sf "$METRICS_URL" >"$WORK/scrape.txt" || fail "GET $METRICS_URL failed"
  grep -q '^kbrun_up 1$' "$WORK/scrape.txt" || fail "no kbrun_up 1 in /metrics: $(head -20 "$WORK/scrape.txt")"
fi
end
wait "$RUN_PID"; CODE=$?; RUN_PID=
begin storm
[ "$CODE" = 0 ] || { fail "kbrun exited $CODE"; sed 's/^/    /' "$WORK/stderr" >&2; }
end

# 4. What Prometheus holds, asked through kb.prometheus.query (bounded
#    polls: ingestion lags a scrape), and the storm's result.
cat >"$WORK/check.lua" <<'EOF'
local kb = require "kb"
local prometheus = require "kb.prometheus"
local url, dir = kb.params.url, kb.params.dir
local failures = {}
local function check(ok, fmt, ...)
  if not ok then failures[#failures + 1] = string.format(fmt, ...) end
end
-- The first sample of expr within ~20 s of polling (a range function
-- reads series that went stale when kbrun stopped).
local function first(expr)
  local last_err
  for _ = 1, 40 do
    local ok, v = pcall(prometheus.query, url, expr)
    if ok and v.result[1] then return v.result[1], v.result end
    if not ok then last_err = tostring(v) end
    kb.sleep(0.5 * require("kb.core").clock_speed())
  end
  return nil, last_err
end
local up = first('max_over_time(kbrun_up{job="kbrun",test="e2e"}[10m])')
check(up and up.value == 1, "kbrun_up: %s", up and up.value or "no series")
local n = first('max_over_time(kbrun_run_create_seconds_count{job="kbrun"}[10m])')
check(n and n.value >= 1, "kbrun_run_create_seconds_count: %s", n and n.value or "no series")
local p50 = first('histogram_quantile(0.5, sum by (le) (max_over_time(kbrun_run_create_seconds_bucket{job="kbrun"}[10m])))')
check(p50 and p50.value > 0 and p50.value < 60, "run.create p50 from buckets: %s", p50 and p50.value or "no series")
local req = first('sum(max_over_time(kbrun_kfp_requests_total{job="kbrun"}[10m]))')
check(req and req.value >= 20, "kbrun_kfp_requests_total: %s", req and req.value or "no series")
local _, states = first('max_over_time(kbrun_storm_runs{job="kbrun"}[10m])')
check(type(states) == "table" and #states >= 1, "kbrun_storm_runs: %s", tostring(states))
local grpc = first('sum(max_over_time(grpc_server_handling_seconds_count{job="kfp-sim"}[10m]))')
check(grpc and grpc.value > 0, "the simulator's grpc_server_handling_seconds: %s", grpc and grpc.value or "no series")
-- an error a user sees: a query Prometheus refuses
local ok, err = pcall(prometheus.query, url, "sum(")
check(not ok and err.class == "bad_data" and tostring(err):find("query 'sum('", 1, true) ~= nil,
  "bad query: %s", tostring(err))

local doc = kb.json.decode(kb.fs.read(dir .. "/result/result.json"))
local sm = doc.result.server_metrics
check(sm.source == "prometheus" and sm.available == true, "server_metrics: %s", kb.json.encode(sm))
local create = sm.grpc and sm.grpc["run.create"]
check(create and create.count > 0 and create.p50 and create.p99 and create.p99 >= create.p50,
  "server run.create from Prometheus: %s", kb.json.encode(create or {}))
local row
for _, r in ipairs(doc.result.server_vs_client) do if r.op == "run.create" then row = r end end
check(row and row.client and row.client.count == 20 and row.server and row.server.count > 0,
  "server_vs_client run.create: %s", kb.json.encode(row or {}))
local html = kb.fs.read(dir .. "/result/report.html")
check(html:find("Server-side vs client-side (Prometheus)", 1, true) ~= nil, "report.html has no Prometheus section")
if #failures > 0 then error(table.concat(failures, "\n"), 0) end
EOF
begin prometheus-query
DIR=$(ls -d "$WORK/exp"/*/ 2>/dev/null | head -1 | sed 's:/$::')
"$KBRUN" -q -o "$WORK/checks" "$WORK/check.lua" url="$PROM_URL" dir="$DIR" >"$WORK/check.out" 2>&1 \
  || { fail "$(cat "$WORK/check.out")"; echo "--- prometheus log" >&2; tail -20 "$WORK/prometheus.log" >&2; }
end

finish
