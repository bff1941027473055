#!/usr/bin/env bash
# The real kubectl against `kbrun sim`, on what the simulator takes from
# the Kubernetes 1.32 schemas (src/sim/k8s_schema.c): `kubectl explain` of
# nested fields reads the real descriptions; strict field validation (the
# default of kubectl create/apply) refuses unknown fields at any depth in
# the apiserver's words and stores nothing; --validate=warn stores the
# object and prints the server's warning; --validate=ignore is silent.
# A missing kubectl fails when KBRUN_REQUIRE_KUBECTL=1 (CI), else skips.
set -u
. "$(dirname "$0")/common.bash"
if ! command -v kubectl >/dev/null 2>&1; then
  [ "${KBRUN_REQUIRE_KUBECTL:-0}" = 1 ] && { echo "FAIL: kubectl is not installed" >&2; exit 1; }
  echo "SKIP: kubectl is not installed"
  exit 0
fi
e2e_init kubectl_schema
k() { timeout 30 kubectl "$@" >"$WORK/out" 2>&1; CODE=$?; }
expect_in() { grep -qF -- "$1" "$WORK/out" || { fail "'$1' not in the output of: $2"; sed 's/^/    /' "$WORK/out" >&2; }; }

mkdir -p "$WORK/home"
export HOME="$WORK/home" KUBECONFIG="$WORK/kubeconfig"
"$KBRUN" sim --listen 127.0.0.1:0 --profile fast --kubeconfig-out "$WORK/kubeconfig" \
  >"$WORK/sim.out" 2>"$WORK/sim.err" &
PID=$!
for _ in $(seq 1 100); do
  [ -s "$WORK/kubeconfig" ] && [ -s "$WORK/sim.out" ] && break
  sleep 0.1
done
[ -s "$WORK/kubeconfig" ] || { echo "FAIL: kbrun sim did not start: $(cat "$WORK/sim.err")" >&2; exit 1; }

# explain: nested fields, with the descriptions of the real schema
k explain pod.spec.containers.image
[ "$CODE" = 0 ] || fail "kubectl explain pod.spec.containers.image: exit $CODE"
expect_in "FIELD: image <string>" "explain pod.spec.containers.image"
expect_in "Container image name." "explain pod.spec.containers.image"
k explain job.spec.template.spec.restartPolicy
expect_in "FIELD: restartPolicy <string>" "explain job.spec.template.spec.restartPolicy"
k explain pods.spec.nosuchfield
[ "$CODE" != 0 ] || fail "explain of a field the schema lacks succeeded"
expect_in 'field "nosuchfield" does not exist' "explain pods.spec.nosuchfield"

cat >"$WORK/job.yaml" <<'YAML'
apiVersion: batch/v1
kind: Job
metadata: {name: strict}
spec:
  bogusTop: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
        bogus: 1
YAML
k create -f "$WORK/job.yaml"
[ "$CODE" != 0 ] || fail "a Job with unknown fields was created under strict validation"
expect_in 'Job in version "v1" cannot be handled as a Job: strict decoding error: unknown field "spec.bogusTop", unknown field "spec.template.spec.containers[0].bogus"' "create (strict)"
k get job strict
expect_in 'jobs.batch "strict" not found' "get after a refused create"

k create -f "$WORK/job.yaml" --validate=warn
[ "$CODE" = 0 ] || fail "create --validate=warn: exit $CODE"
expect_in 'Warning: unknown field "spec.bogusTop"' "create --validate=warn"
k get job strict -o jsonpath='{.spec.template.spec.containers[0].image}'
[ "$(cat "$WORK/out")" = busybox ] || fail "the warned Job is not stored as given: $(cat "$WORK/out")"

sed 's/name: strict/name: ignored/' "$WORK/job.yaml" >"$WORK/job2.yaml"
k create -f "$WORK/job2.yaml" --validate=ignore
[ "$CODE" = 0 ] || fail "create --validate=ignore: exit $CODE"
grep -q Warning "$WORK/out" && fail "--validate=ignore printed a warning: $(cat "$WORK/out")"

[ "$failed" = 0 ] && echo "kubectl_schema: ok"
exit $((failed > 0))
