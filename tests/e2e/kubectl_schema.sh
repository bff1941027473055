#!/usr/bin/env bash
# The real kubectl against `kbrun sim`, on what the simulator takes from
# the Kubernetes 1.32 schemas (src/sim/k8s/k8s_schema.c): `kubectl explain` of
# nested fields reads the real descriptions; strict field validation (the
# default of kubectl create/apply) refuses unknown fields at any depth in
# the apiserver's words and stores nothing; --validate=warn stores the
# object and prints the server's warning; --validate=ignore is silent;
# label keys and namespace names follow the apiserver's rules.
# A missing kubectl fails when KBRUN_REQUIRE_KUBECTL=1 (CI), else skips.
set -u
. "$(dirname "$0")/kubectl_common.bash"
kc_init kubectl_schema
kc_start_sim

# explain: nested fields, with the descriptions of the real schema
k explain pod.spec.containers.image
[ "$CODE" = 0 ] || fail "kubectl explain pod.spec.containers.image: exit $CODE"
expect_has "FIELD: image <string>" "explain pod.spec.containers.image"
expect_has "Container image name." "explain pod.spec.containers.image"
k explain job.spec.template.spec.restartPolicy
expect_has "FIELD: restartPolicy <string>" "explain job.spec.template.spec.restartPolicy"
k explain pods.spec.nosuchfield
[ "$CODE" != 0 ] || fail "explain of a field the schema lacks succeeded"
expect_has 'field "nosuchfield" does not exist' "explain pods.spec.nosuchfield"

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
expect_has 'Job in version "v1" cannot be handled as a Job: strict decoding error: unknown field "spec.bogusTop", unknown field "spec.template.spec.containers[0].bogus"' "create (strict)"
k get job strict
expect_has 'jobs.batch "strict" not found' "get after a refused create"

k create -f "$WORK/job.yaml" --validate=warn
[ "$CODE" = 0 ] || fail "create --validate=warn: exit $CODE"
expect_has 'Warning: unknown field "spec.bogusTop"' "create --validate=warn"
k get job strict -o jsonpath='{.spec.template.spec.containers[0].image}'
[ "$(cat "$WORK/out")" = busybox ] || fail "the warned Job is not stored as given: $(cat "$WORK/out")"

sed 's/name: strict/name: ignored/' "$WORK/job.yaml" >"$WORK/job2.yaml"
k create -f "$WORK/job2.yaml" --validate=ignore
[ "$CODE" = 0 ] || fail "create --validate=ignore: exit $CODE"
grep -q Warning "$WORK/out" && fail "--validate=ignore printed a warning: $(cat "$WORK/out")"

# metadata rules: a label key kubectl itself does not check, a namespace
# name over 63 characters; kubectl prints the cause's field
echo '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"badlabel","labels":{"bad key!":"v"}}}' >"$WORK/badlabel.json"
k create -f "$WORK/badlabel.json"
[ "$CODE" != 0 ] || fail "a ConfigMap with the label key 'bad key!' was created"
expect_has 'The ConfigMap "badlabel" is invalid: metadata.labels: Invalid value: "bad key!": name part must consist of alphanumeric characters' "create with a bad label key"
k create namespace "$(printf 'a%.0s' $(seq 64))"
[ "$CODE" != 0 ] || fail "a 64-character namespace was created"
expect_has 'must be no more than 63 characters' "create a 64-character namespace"

kc_report
