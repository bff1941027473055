#!/usr/bin/env bash
# The official Kubernetes JavaScript client (@kubernetes/client-node, pinned
# by tests/js/package-lock.json and installed by .ci/install-deps) against
# `kbrun sim` on a cluster of known nodes: tests/js/client_node.mjs does the
# checking. Without Node.js or the package the test fails when
# KBRUN_REQUIRE_CLIENT_NODE=1 (CI), else skips.
set -u
. "$(dirname "$0")/common.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
module=
for d in "${KB_CLIENT_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kbrun/client-node}" "$SRC/tests/js"; do
  [ -f "$d/node_modules/@kubernetes/client-node/dist/index.js" ] && { module="$d/node_modules/@kubernetes/client-node"; break; }
done
if ! command -v node >/dev/null 2>&1 || [ -z "$module" ]; then
  why="node or @kubernetes/client-node is missing (bash .ci/install-deps installs them)"
  [ "${KBRUN_REQUIRE_CLIENT_NODE:-0}" = 1 ] && { echo "FAIL: $why" >&2; exit 1; }
  echo "SKIP: $why"
  exit 0
fi
e2e_init client_node
cat >"$WORK/sim.yaml" <<'YAML'
cluster:
  pools:
  - {name: js, nodes: 3, cpu: 4, memory: 16Gi}
YAML
mkdir -p "$WORK/home"
export HOME="$WORK/home" KUBECONFIG="$WORK/kubeconfig"
"$KBRUN" sim --listen 127.0.0.1:0 --profile fast --config "$WORK/sim.yaml" \
  --kubeconfig-out "$WORK/kubeconfig" >"$WORK/sim.out" 2>"$WORK/sim.err" &
PID=$!
for _ in $(seq 1 100); do
  [ -s "$WORK/kubeconfig" ] && [ -s "$WORK/sim.out" ] && break
  sleep 0.1
done
[ -s "$WORK/kubeconfig" ] || { echo "FAIL: kbrun sim did not start: $(cat "$WORK/sim.err")" >&2; exit 1; }
KB_CLIENT_NODE_MODULE="$module" KB_NODES=3 KB_NODE_CPU=4 \
  timeout 90 node "$SRC/tests/js/client_node.mjs" >"$WORK/out" 2>&1 || fail "$(cat "$WORK/out")"
[ "$failed" = 0 ] && tail -1 "$WORK/out"
exit $((failed > 0))
