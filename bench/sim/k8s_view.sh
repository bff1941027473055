#!/usr/bin/env bash
# Starts a standalone simulator (200 nodes, fast profile, linear clock x$SPEED,
# default 600) and runs bench/sim/k8s_view.lua against it. Usage:
#   [SPEED=600] [SIM_KBRUN=other/kbrun] [GC=N] bench/sim/k8s_view.sh [BUILD_DIR] [runs=N] [page=N] ...
# SIM_KBRUN runs another build's simulator (main's, for the "before" column)
# under this build's client; GC sets k8s.terminated_pod_gc_threshold.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$src/build}"; shift || true
tmp=$(mktemp -d); trap 'kill -INT "$sim" 2>/dev/null; sleep 1; kill -KILL "$sim" 2>/dev/null; rm -rf "$tmp"' EXIT
cat > "$tmp/sim.yaml" <<'YAML'
cluster:
  pools:
  - {name: pool-1, nodes: 200, cpu: 64, memory: 256Gi, max_pods: 1000}
YAML
if [[ -n ${GC:-} ]]; then
  printf 'kubernetes_api: {terminated_pod_gc_threshold: %s}\n' "$GC" >> "$tmp/sim.yaml"
fi
${SIM_PREFIX:-} "${SIM_KBRUN:-$build/kbrun}" sim --listen 127.0.0.1:0 --config "$tmp/sim.yaml" --profile fast --speed "${SPEED:-600}" \
  --seed 7 --header-timeout 3600 --body-timeout 3600 --idle-timeout 3600 > "$tmp/sim.out" 2>&1 &
sim=$!
for _ in $(seq 100); do grep -qo 'http://[0-9.:]*' "$tmp/sim.out" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$tmp/sim.out" | head -1)
[[ -n $url ]] || { cat "$tmp/sim.out"; exit 1; }
cd "$tmp"
"$build/kbrun" -q "$src/bench/sim/healthz_probe.lua" url="$url" out="$tmp/hz.txt" stop="$tmp/hz.stop" \
  > "$tmp/probe.out" 2>&1 &
probe=$!
KBRUN_SOURCE_DIR="$src" "$build/kbrun" "$src/bench/sim/k8s_view.lua" \
  url="$url" pid="$sim" probe="$tmp/hz.txt" "$@" || rc=$?
touch "$tmp/hz.stop"; wait "$probe" || true
exit "${rc:-0}"
