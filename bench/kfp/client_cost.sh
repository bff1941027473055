#!/usr/bin/env bash
# bench/kfp/client_cost.sh: what a KFP storm costs the client, per API call,
# side by side with kbrun's plain HTTP GET loop against the same server.
#
# Starts a standalone simulator (`kbrun sim`, x60, a 300-node pool, a
# persistence agent with 64 workers, a scheduler at 2,000 pods/s: an
# installation sized so 10,000 runs are not capacity-bound), then runs, one
# after the other, RUNS times each:
#   http   bench/http/kbrun_load.lua against the simulator's /apis/v2beta1/healthz,
#          CONCURRENCY tasks, 10 s
#   poll   the storm (scenarios/taxi_50runs.lua with the 10-step benchmark
#          pipeline), NUM_RUNS runs, CONCURRENCY in flight, tracking=poll
#   list   the same storm, tracking=list
# and prints a markdown table of the medians: calls (the storm's
# result.calls; the GET loop's requests), client CPU (user+sys of the kbrun
# process, from /usr/bin/time), CPU per call, peak RSS, wall, outcomes.
#
#   bench/kfp/client_cost.sh                          # 10,000 runs, 1,000 in flight
#   NUM_RUNS=300 CONCURRENCY=64 RUNS=1 bench/kfp/client_cost.sh
#   ICOUNT=1 bench/kfp/client_cost.sh     # and Lua VM instructions per call
# ICOUNT=1 runs each storm once more with KBRUN_LUA_PROFILE_EVERY=100 (a
# count hook every 100 VM instructions, src/rt/profile.c) and prints the
# Lua instructions per call, the storm's and its end's (the samples under
# the runner's finish: result files, report, results database): a figure
# this machine's noise does not move, for comparing two trees' per-call
# code. That run's CPU is not measured (the hook costs some).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NUM_RUNS=${NUM_RUNS:-10000}
CONCURRENCY=${CONCURRENCY:-1000}
RUNS=${RUNS:-3}
KBRUN=${KBRUN:-$ROOT/build/kbrun}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
PIPELINE=$ROOT/tests/data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml

tmp=$(mktemp -d)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
sim_pid=
cleanup() {
  [[ -n $sim_pid ]] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
  if [[ -n ${KEEP:-} ]]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

cat > "$tmp/sim.yaml" <<'EOF'
cluster:
  pools:
  - {name: pool-1, nodes: 300, cpu: 64, memory: 256Gi, max_pods: 1000}
kfp_run:
  persistence_agent: {workers: 64}
k8s:
  scheduler: {pods_per_s: 2000}
EOF
"$KBRUN" sim --listen "127.0.0.1:$PORT" --speed 60 --config "$tmp/sim.yaml" > "$tmp/sim.log" 2>&1 &
sim_pid=$!
url="http://127.0.0.1:$PORT"
for _ in $(seq 300); do curl -fs "$url/apis/v2beta1/healthz" > /dev/null && break; sleep 0.1; done
curl -fs "$url/apis/v2beta1/healthz" > /dev/null || { echo "the simulator did not start:"; cat "$tmp/sim.log"; exit 1; }

# one measured command: prints "calls cpu_s rss_kb wall_s outcomes"
measure() {
  local kind=$1 out="$tmp/out-$kind"
  rm -rf "$out"
  if [[ $kind == http ]]; then
    timeout 60 /usr/bin/time -f "%U %S %M %e" -o "$tmp/time" "$KBRUN" -q -o "$out" \
      "$ROOT/bench/http/kbrun_load.lua" url="$url/apis/v2beta1/healthz" \
      connections="$CONCURRENCY" duration=10 > "$tmp/log" 2>&1 || true
    local calls
    calls=$(grep -o 'requests=[0-9]*' "$tmp/log" | cut -d= -f2)
    read -r u s m e < <(tail -1 "$tmp/time")
    echo "$calls $(echo "$u + $s" | bc) $m $e -"
    return
  fi
  timeout 900 /usr/bin/time -f "%U %S %M %e" -o "$tmp/time" "$KBRUN" -q -o "$out" \
    "$ROOT/scenarios/taxi_50runs.lua" host="$url" api=v2beta1 scrape_metrics=false \
    measure_list=false tracking="$kind" num_runs="$NUM_RUNS" concurrency="$CONCURRENCY" \
    pipeline_file_url="$PIPELINE" pipeline_params='{}' run_timeout=0 > "$tmp/log" 2>&1 || true
  read -r u s m e < <(tail -1 "$tmp/time")
  python3 - "$(ls "$out"/*/result/result.json)" "$u" "$s" "$m" "$e" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
outcomes = ",_".join("%s_%d" % (k.replace(" ", "_"), v) for k, v in sorted(r["outcomes"].items()))
print(r["calls"], float(sys.argv[2]) + float(sys.argv[3]), sys.argv[4], sys.argv[5], outcomes)
PY
}

declare -A rows
for _ in $(seq "$RUNS"); do
  for kind in http poll list; do rows[$kind]+="$(measure "$kind")"$'\n'; done
done

echo "| client | calls | client CPU | CPU per call | peak RSS | wall | outcomes |"
echo "|---|---|---|---|---|---|---|"
for kind in http poll list; do
  # the median by CPU per call
  printf '%s' "${rows[$kind]}" | awk 'NF' | awk '{printf "%.3f %s\n", $2 / $1 * 1e6, $0}' | sort -n |
    awk -v kind="$kind" '{ a[NR] = $0 } END {
      split(a[int((NR + 1) / 2)], f, " ")
      label = kind == "http" ? "kb.http GET loop (healthz)" : "storm, tracking=" kind
      printf "| %s | %d | %.2f s | %.1f us | %d MB | %.1f s | %s |\n", label, f[2], f[3], f[1], f[4] / 1024, f[5], f[6]
    }'
done
echo
echo "NUM_RUNS=$NUM_RUNS CONCURRENCY=$CONCURRENCY RUNS=$RUNS, medians by CPU per call; $(nproc) cores"

# Lua VM instructions per call (ICOUNT=1): one more storm of each kind
count_instructions() {
  local kind=$1 out="$tmp/icount-$kind"
  rm -rf "$out" "$tmp/icount.txt"
  KBRUN_LUA_PROFILE="$tmp/icount.txt" KBRUN_LUA_PROFILE_EVERY=100 timeout 900 "$KBRUN" -q \
    -o "$out" "$ROOT/scenarios/taxi_50runs.lua" host="$url" api=v2beta1 scrape_metrics=false \
    measure_list=false tracking="$kind" num_runs="$NUM_RUNS" concurrency="$CONCURRENCY" \
    pipeline_file_url="$PIPELINE" pipeline_params='{}' run_timeout=0 > "$tmp/log" 2>&1 || true
  python3 - "$(ls "$out"/*/result/result.json)" "$tmp/icount.txt" "$kind" <<'PY'
import json, sys
calls = json.load(open(sys.argv[1]))["result"]["calls"]
total = end = 0
for line in open(sys.argv[2]):
    stack, n = line.rstrip("\n").rsplit(" ", 1)
    total += int(n)
    if "kb/runner.lua" in stack and " finish" in stack:
        end += int(n)
print("| storm, tracking=%s | %d | %.0f | %.0f | %.0f |" % (sys.argv[3], calls,
      total * 100 / calls, (total - end) * 100 / calls, end * 100 / calls))
PY
}
if [[ -n ${ICOUNT:-} ]]; then
  echo
  echo "| Lua VM instructions | calls | per call | before the runner's end | the runner's end |"
  echo "|---|---|---|---|---|"
  for kind in poll list; do count_instructions "$kind"; done
fi
