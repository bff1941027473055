#!/usr/bin/env bash
# Pods and nodes with the real kubectl against `kbrun sim` (3 nodes n-a-0..2
# of 2 cpu): `kubectl run` -> Running and Ready with its events; cordon,
# taint and uncordon obeyed by the scheduler and still shown after the
# mirror wrote the nodes; `kubectl delete pod` gives the node's cpu back (the
# model's figure from /sim/v1/status and describe's Allocated resources);
# a PodDisruptionBudget with evictions through the pods/eviction
# subresource (201, 429); `kubectl drain` evicts a node's pods, of which
# only the Job's is run again elsewhere, and a drain the budget forbids
# stops with the budget's message; a NoExecute taint evicts what does not
# tolerate it. Loopback only; every kubectl call runs
# under `timeout 30`.
set -u
. "$(dirname "$0")/kubectl_common.bash"
kc_init kubectl_pods
# The model's own figure: a field of /sim/v1/status's cluster object.
model() {
  curl -s "$URL/sim/v1/status" | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"
}
node_of() { kubectl get pod "$1" -o jsonpath='{.spec.nodeName}'; }
# wait_running POD...: each pod Ready (bounded).
wait_running() { k wait --for=condition=Ready "${@/#/pod/}" --timeout=30s; expect_code "$CODE" 0; }
# run_pod NAME CPU [JSON spec fields]: a bare pod requesting CPU.
run_pod() {
  local extra=${3:-}
  k run "$1" --image=busybox --overrides="{\"spec\":{${extra:+$extra,}\"containers\":[{\"name\":\"$1\",\"image\":\"busybox\",\"resources\":{\"requests\":{\"cpu\":\"$2\"}}}]}}"
  expect_code "$CODE" 0
}

# ---- start the simulator ------------------------------------------------------
cat >"$WORK/sim.yaml" <<'EOF'
profile: fast
cluster:
  node_name_prefix: n-
  pools:
  - {name: a, nodes: 3, cpu: 2, memory: 8Gi}
k8s:
  image_pull: {fixed: 1}
EOF
kc_start_sim --config "$WORK/sim.yaml"

# ---- kubectl run -------------------------------------------------------------------
begin "kubectl run: Running and Ready, with its events"
k run web --image=nginx:1.27 --labels=app=web
expect_code "$CODE" 0
expect_in "$WORK/out" "pod/web created"
wait_running web
k get pod web
expect_in "$WORK/out" "web +1/1 +Running +0"
k get pod web -o jsonpath='{.metadata.labels.app} {.spec.restartPolicy} {.status.podIP} {.status.hostIP} {.status.containerStatuses[0].ready}'
expect_in "$WORK/out" "^web Always 10\.[0-9.]+ 10\.128\.[0-9.]+ true$"
k get events --field-selector involvedObject.name=web
for r in "Scheduled +pod/web +Successfully assigned default/web to n-a-[0-2]" \
         'Pulling +pod/web +Pulling image "nginx:1.27"' "Pulled +pod/web" \
         "Created +pod/web +Created container web" "Started +pod/web +Started container web"; do
  expect_in "$WORK/out" "$r"
done
end

# ---- cordon ------------------------------------------------------------------------
begin "cordon: new pods avoid the node, which stays SchedulingDisabled"
k cordon n-a-0
expect_code "$CODE" 0
expect_in "$WORK/out" "node/n-a-0 cordoned"
for i in 1 2 3; do run_pod "c$i" 500m; done
wait_running c1 c2 c3
for i in 1 2 3; do
  n=$(node_of "c$i")
  [ "$n" != n-a-0 ] && [ -n "$n" ] || fail "c$i on '$n'"
done
k get node n-a-0
expect_in "$WORK/out" "n-a-0 +Ready,SchedulingDisabled"
k get node n-a-0 -o jsonpath='{.spec.taints[*].key}'
expect_in "$WORK/out" "node.kubernetes.io/unschedulable"
end

# ---- taint -------------------------------------------------------------------------
begin "taint: untolerated pods avoid the node, a tolerating one may land there"
k taint nodes n-a-1 dedicated=gpu:NoSchedule
expect_code "$CODE" 0
run_pod t1 100m
run_pod t2 100m '"nodeSelector":{"kubernetes.io/hostname":"n-a-1"}'
run_pod t3 100m '"nodeSelector":{"kubernetes.io/hostname":"n-a-1"},"tolerations":[{"key":"dedicated","operator":"Equal","value":"gpu","effect":"NoSchedule"}]'
wait_running t1 t3
expect_eq "$(node_of t1)" n-a-2 "untolerated pod"
expect_eq "$(node_of t3)" n-a-1 "tolerating pod"
k get pod t2
expect_in "$WORK/out" "t2 +0/1 +Pending"
k get events --field-selector involvedObject.name=t2,reason=FailedScheduling
# n-a-0 is cordoned (the first filter), n-a-1 tainted, n-a-2 not the selector's
expect_in "$WORK/out" "0/3 nodes are available: 1 node\(s\) didn't match Pod's node affinity/selector, 1 node\(s\) had untolerated taint \{dedicated: gpu\}, 1 node\(s\) were unschedulable\."
k get node n-a-1 -o jsonpath='{.spec.taints[0].key}={.spec.taints[0].value}:{.spec.taints[0].effect}'
expect_in "$WORK/out" "^dedicated=gpu:NoSchedule$"
k taint nodes n-a-1 dedicated=gpu:NoSchedule-
expect_code "$CODE" 0
wait_running t2
expect_eq "$(node_of t2)" n-a-1 "t2 once the taint is gone"
end

begin "uncordon"
k uncordon n-a-0
expect_code "$CODE" 0
k get node n-a-0
expect_in "$WORK/out" "n-a-0 +Ready +<none>"
run_pod u1 100m '"nodeSelector":{"kubernetes.io/hostname":"n-a-0"}'
wait_running u1
expect_eq "$(node_of u1)" n-a-0 "pod on the uncordoned node"
end

# ---- delete gives the node's resources back -----------------------------------------
begin "kubectl delete pod: the node's cpu back"
before=$(model cpu_requested_m)
N=$(node_of c1)
k describe node "$N"
alloc_before=$(sed -n 's/^ *cpu  *\([0-9m]*\) .*/\1/p' "$WORK/out" | head -n 1)
k delete pod c1
expect_code "$CODE" 0
expect_in "$WORK/out" 'pod "c1" deleted'
after=$(model cpu_requested_m)
expect_eq "$after" "$((before - 500))" "model cpu_requested_m after deleting a 500m pod"
k describe node "$N"
alloc_after=$(sed -n 's/^ *cpu  *\([0-9m]*\) .*/\1/p' "$WORK/out" | head -n 1)
[ -n "$alloc_before" ] && [ "$alloc_before" != "$alloc_after" ] || fail "Allocated cpu on $N: $alloc_before -> $alloc_after"
k get pods c1
expect_in "$WORK/out" 'pods "c1" not found'
end

# ---- budgets and evictions ------------------------------------------------------------
cat >"$WORK/pdb.yaml" <<'EOF'
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
EOF
evict() { # evict POD: POST the Eviction as JSON
  printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s","namespace":"default"}}' "$1" >"$WORK/ev.json"
  k create --raw "/api/v1/namespaces/default/pods/$1/eviction" -f "$WORK/ev.json"
}
begin "a PodDisruptionBudget and evictions"
k create -f "$WORK/pdb.yaml"
expect_code "$CODE" 0
k wait --for=jsonpath='{.status.currentHealthy}'=1 pdb/web --timeout=30s
expect_code "$CODE" 0
k get pdb web
expect_in "$WORK/out" "web +1 +N/A +0 "
evict web
[ "$CODE" != 0 ] || fail "eviction of web allowed"
expect_in "$WORK/out" "TooManyRequests.*Cannot evict pod as it would violate the pod's disruption budget\."
k get pod web
expect_in "$WORK/out" "web +1/1 +Running"
evict t1
expect_code "$CODE" 0
expect_in "$WORK/out" '"status":"Success"'
k get pod t1
expect_in "$WORK/out" 'pods "t1" not found'
end

# ---- drain -----------------------------------------------------------------------------
cat >"$WORK/job.yaml" <<'EOF'
apiVersion: batch/v1
kind: Job
metadata: {name: long}
spec:
  template:
    metadata: {annotations: {sim.kbrun.io/duration: "100000"}}
    spec:
      nodeSelector: {kubernetes.io/hostname: n-a-2}
      containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m}}}]
      restartPolicy: Never
EOF
begin "drain: the node's pods evicted, only the Job's runs again"
k create -f "$WORK/job.yaml"
expect_code "$CODE" 0
k wait --for=jsonpath='{.status.ready}'=1 job/long --timeout=30s
expect_code "$CODE" 0
JP=$(kubectl get pods -l job-name=long -o jsonpath='{.items[0].metadata.name}')
expect_eq "$(node_of "$JP")" n-a-2 "the Job's pod"
run_pod d1 100m '"nodeSelector":{"kubernetes.io/hostname":"n-a-2"}'
wait_running d1
k drain n-a-2 --ignore-daemonsets --delete-emptydir-data --force --timeout=20s
expect_code "$CODE" 0
expect_in "$WORK/out" "node/n-a-2 drained"
expect_in "$WORK/out" "pod/$JP evicted"
expect_in "$WORK/out" "pod/d1 evicted"
k get pods --field-selector spec.nodeName=n-a-2,status.phase=Running
expect_in "$WORK/out" "No resources found"
# The Job counted the evicted pod failed and ran a new one; it waits (its
# selector names the cordoned node), the bare pods are gone for good.
k wait --for=jsonpath='{.status.failed}'=1 job/long --timeout=30s
expect_code "$CODE" 0
k get pods -l job-name=long
expect_in "$WORK/out" "long-[a-z0-9]{5} +0/1 +Pending"
expect_not_in "$WORK/out" "$JP"
k get pod d1
expect_in "$WORK/out" 'pods "d1" not found'
k get node n-a-2
expect_in "$WORK/out" "n-a-2 +Ready,SchedulingDisabled"
k uncordon n-a-2
k wait --for=jsonpath='{.status.ready}'=1 job/long --timeout=30s
expect_code "$CODE" 0
end

begin "drain stopped by the budget"
N=$(node_of web)
k drain "$N" --ignore-daemonsets --delete-emptydir-data --force --timeout=3s
[ "$CODE" != 0 ] || fail "drain of $N went through the budget"
expect_in "$WORK/out" "Cannot evict pod as it would violate the pod's disruption budget"
k get pod web
expect_in "$WORK/out" "web +1/1 +Running"
k uncordon "$N"
end

begin "a NoExecute taint evicts the pods that do not tolerate it"
N=$(node_of web)
k taint nodes "$N" maint=now:NoExecute
expect_code "$CODE" 0
k get pod web
expect_in "$WORK/out" 'pods "web" not found'
k get events --field-selector reason=TaintManagerEviction
expect_in "$WORK/out" "TaintManagerEviction +pod/web +Marking for deletion Pod default/web"
k taint nodes "$N" maint=now:NoExecute-
expect_code "$CODE" 0
end

kc_report
