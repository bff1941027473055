#!/usr/bin/env bash
# The simulator's Kubernetes API (src/sim/k8s_*.c) driven by the real
# kubectl: discovery, tables, create/apply (strategic and merge patches),
# watch, describe, logs, wait, delete with garbage collection, OpenAPI v3
# and the errors a user sees. The server is tests/support/k8s_test_server
# (a fake controller completes Jobs and starts Pods). Loopback only; every
# kubectl call runs under `timeout 20`.
set -u
SERVER=${K8S_TEST_SERVER:-$(dirname "${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}")/tests/support/k8s_test_server}
. "$(dirname "$0")/kubectl_common.bash"
kc_init kubectl
if [ ! -x "$SERVER" ]; then
  echo "FAIL: $SERVER not built (tests/CMakeLists.txt needs add_subdirectory(support))" >&2
  exit 1
fi
# the test server stops with the work folder; k with the 20 s bound of this file
SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null; kc_cleanup' EXIT
k() { timeout 20 kubectl "$@" >"$WORK/out" 2>&1; CODE=$?; }
expect_code() { [ "$1" = "$2" ] || fail "exit code $1, expected $2"; }

# ---- start the server -------------------------------------------------------
"$SERVER" -v >"$WORK/port" 2>"$WORK/server.log" &
SERVER_PID=$!
PORT=
for _ in $(seq 1 50); do
  PORT=$(awk '/^PORT/ {print $2}' "$WORK/port")
  [ -n "$PORT" ] && break
  sleep 0.1
done
if [ -z "$PORT" ]; then
  echo "FAIL: the test server did not start" >&2
  cat "$WORK/server.log" >&2
  exit 1
fi
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster: {server: "http://127.0.0.1:$PORT"}
contexts:
- name: sim
  context: {cluster: sim, user: sim, namespace: default}
current-context: sim
users:
- name: sim
  user: {}
EOF

cat >"$WORK/job.yaml" <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: pi
spec:
  template:
    spec:
      containers:
      - name: pi
        image: perl:5.34
        command: ["perl", "-e", "print 1"]
      restartPolicy: Never
EOF
cat >"$WORK/pod.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: main
    image: nginx:1.27
    env:
    - name: MODE
      value: "one"
  - name: side
    image: busybox
EOF
cat >"$WORK/wf.yaml" <<'EOF'
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: hello
  labels: {team: a}
spec:
  entrypoint: main
  templates:
  - name: main
    container: {image: busybox, command: [echo, hi]}
EOF

# ---- cases --------------------------------------------------------------------
begin version
k version
expect_code $CODE 0
expect_in "$WORK/out" "Server Version: v1.32.0-kbrun-sim"
end

begin get_nodes_table
k get nodes
expect_code $CODE 0
expect_in "$WORK/out" "^NAME +STATUS +ROLES +AGE +VERSION"
expect_in "$WORK/out" "^node-1 +Ready +worker +[0-9]+s +v1.32.0"
end

begin get_pods_empty_json
k get pods -o json
expect_code $CODE 0
expect_in "$WORK/out" '"items": \[\]'
k get pods
expect_in "$WORK/out" "No resources found in default namespace."
end

begin create_job
k create -f "$WORK/job.yaml"
expect_code $CODE 0
expect_in "$WORK/out" "^job.batch/pi created"
k get jobs
expect_in "$WORK/out" "^NAME +STATUS +COMPLETIONS +DURATION +AGE"
expect_in "$WORK/out" "^pi +Complete +1/1 "
k get pods -l job-name=pi
expect_in "$WORK/out" "^pi-[a-z0-9]{5} +0/1 +Completed +0 "
k wait --for=condition=complete job/pi --timeout=10s
expect_code $CODE 0
expect_in "$WORK/out" "job.batch/pi condition met"
k logs job/pi
expect_in "$WORK/out" "^hello from pi-"
end

begin create_errors
k create -f "$WORK/job.yaml"
expect_code $CODE 1
expect_in "$WORK/out" 'Error from server \(AlreadyExists\).*jobs.batch "pi" already exists'
k get pod missing
expect_code $CODE 1
expect_in "$WORK/out" 'Error from server \(NotFound\): pods "missing" not found'
sed 's/^spec:/bogus: 1\nspec:/; s/name: web/name: strict/' "$WORK/pod.yaml" >"$WORK/bad.yaml"
k create -f "$WORK/bad.yaml"
expect_code $CODE 1
expect_in "$WORK/out" 'strict decoding error: unknown field "bogus"'
end

begin apply_pod_twice
k apply -f "$WORK/pod.yaml"
expect_code $CODE 0
expect_in "$WORK/out" "^pod/web created"
sed -i 's/app: web/app: web2/; s/value: "one"/value: "two"/' "$WORK/pod.yaml"
k apply -f "$WORK/pod.yaml"
expect_code $CODE 0
expect_in "$WORK/out" "^pod/web configured"
expect_not_in "$WORK/out" "warning"
k get pod web -o 'jsonpath={.metadata.labels.app} {.spec.containers[*].name} {.spec.containers[0].env[0].value}'
expect_in "$WORK/out" "^web2 main side two$"
expect_in "$WORK/server.log" "PATCH /api/v1/namespaces/default/pods/web.*strategic-merge-patch"
k get pods
expect_in "$WORK/out" "^web +[0-9]/2 +Running +0 "
end

begin watch
timeout 20 kubectl get pods -w --request-timeout=4s >"$WORK/watch.out" 2>&1 &
WATCH_PID=$!
for _ in $(seq 1 50); do  # until the watch request reached the server
  grep -q "pods?.*watch=true" "$WORK/server.log" && break
  sleep 0.1
done
k label pod web seen=yes
expect_code $CODE 0
wait $WATCH_PID
WATCH_CODE=$?
[ "$WATCH_CODE" = 124 ] && fail "kubectl get -w did not end at its request timeout"
expect_in "$WORK/watch.out" "^NAME +READY +STATUS"
[ "$(grep -c '^web ' "$WORK/watch.out")" -ge 2 ] || { fail "no MODIFIED row for web"; cat "$WORK/watch.out" >&2; }
end

begin describe_and_logs
k describe pod web
expect_code $CODE 0
expect_in "$WORK/out" "^Name: +web"
expect_in "$WORK/out" "^Status: +Running"
expect_in "$WORK/out" "Normal +Scheduled +.*Successfully assigned default/web to node-1"
k logs web -c main
expect_in "$WORK/out" "^hello from web$"
k logs web --tail=1 -c side
expect_code $CODE 0
k logs web -c nope
expect_code $CODE 1
expect_in "$WORK/out" "container nope is not valid for pod web"
end

begin custom_resources
k apply -f "$WORK/wf.yaml"
expect_in "$WORK/out" "workflow.argoproj.io/hello created"
sed -i 's/team: a/team: b/' "$WORK/wf.yaml"
k apply -f "$WORK/wf.yaml"
expect_in "$WORK/out" "workflow.argoproj.io/hello configured"
expect_in "$WORK/server.log" "PATCH /apis/argoproj.io/v1alpha1/namespaces/default/workflows/hello.*merge-patch"
k get wf --show-labels
expect_in "$WORK/out" "^NAME +STATUS +AGE +MESSAGE +LABELS"
expect_in "$WORK/out" "^hello .*team=b"
k get crd
expect_in "$WORK/out" "^tfjobs.kubeflow.org "
k api-resources
expect_in "$WORK/out" "^workflows +wf +argoproj.io/v1alpha1 +true +Workflow"
end

begin delete
k delete job pi
expect_code $CODE 0
expect_in "$WORK/out" 'job.batch "pi" deleted'
k get pods -l job-name=pi
expect_in "$WORK/out" "No resources found"
# logs -f streams until the pod goes away
timeout 20 kubectl logs -f web -c main >"$WORK/follow.out" 2>&1 &
FOLLOW_PID=$!
for _ in $(seq 1 50); do
  grep -q "pods/web/log?.*follow=true" "$WORK/server.log" && break
  sleep 0.1
done
k delete pod web
expect_in "$WORK/out" 'pod "web" deleted'
wait $FOLLOW_PID
expect_code $? 0
expect_in "$WORK/follow.out" "^hello from web$"
k delete wf hello
expect_code $CODE 0
k get pods,jobs,wf
expect_in "$WORK/out" "No resources found"
end

begin raw_paths
k get --raw /healthz
expect_in "$WORK/out" "^ok$"
k get --raw /openapi/v3
expect_in "$WORK/out" '"apis/batch/v1":\{"serverRelativeURL":"/openapi/v3/apis/batch/v1\?hash='
k get --raw /openapi/v3/apis/batch/v1
expect_in "$WORK/out" '"x-kubernetes-group-version-kind":\[\{"group":"batch","kind":"Job","version":"v1"\}\]'
k get --raw /openapi/v2
expect_code $CODE 1
end

kc_report
