#!/usr/bin/env bash
# The real kubectl against `kbrun sim` (the whole simulator: the model, its
# mirror into the Kubernetes API and the controllers): lists nodes and
# pods, creates a Job from YAML, waits for it to complete, reads its pod's
# logs and deletes it; a Workflow and a TFJob run to completion through
# the CRD path. Loopback only; every kubectl call runs under `timeout 30`.
set -u
. "$(dirname "$0")/kubectl_common.bash"
kc_init kubectl_sim

kc_start_sim

# ---- nodes and pods -------------------------------------------------------------
begin "get nodes"
k get nodes
expect_code "$CODE" 0
expect_in "$WORK/out" "gke-kbrun-pool-1-0 +Ready +<none> +[0-9smhd]+ +v1\.32\.0"
expect_in "$WORK/out" "gke-kbrun-pool-2-2 +Ready"
k get nodes -L cloud.google.com/gke-nodepool
expect_in "$WORK/out" "gke-kbrun-pool-2-0 .* pool-2"
end

begin "get pods (none yet)"
k get pods
expect_code "$CODE" 0
expect_in "$WORK/out" "No resources found in default namespace"
end

# ---- a Job from YAML: create, wait, logs, delete ---------------------------------------
cat >"$WORK/job.yaml" <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: pi
spec:
  template:
    metadata:
      annotations:
        sim.kbrun.io/duration: "30"
    spec:
      containers:
      - name: pi
        image: perl:5.34
        command: ["perl", "-Mbignum=bpi", "-wle", "print bpi(200)"]
        resources:
          requests: {cpu: 500m, memory: 128Mi}
      restartPolicy: Never
  backoffLimit: 2
EOF
begin "create job"
k create -f "$WORK/job.yaml"
expect_code "$CODE" 0
expect_in "$WORK/out" "job.batch/pi created"
end

begin "wait for the job"
k wait --for=condition=complete job/pi --timeout=60s
expect_code "$CODE" 0
expect_in "$WORK/out" "job.batch/pi condition met"
k get job pi
expect_in "$WORK/out" "pi +Complete +1/1"
k get pods -l job-name=pi
expect_in "$WORK/out" "pi-[a-z0-9]{5} +0/1 +Completed +0"
k get pods -l job-name=pi -o jsonpath='{.items[0].spec.nodeName} {.items[0].status.phase}'
expect_in "$WORK/out" "^gke-kbrun-pool-[12]-[0-2] Succeeded$"
end

begin "logs of the job's pod"
k logs job/pi
expect_code "$CODE" 0
expect_in "$WORK/out" "starting step"
expect_in "$WORK/out" "done in 30\.0s"
end

begin "events of the job's pod"
k get events --field-selector involvedObject.kind=Pod
expect_code "$CODE" 0
expect_in "$WORK/out" "Scheduled +pod/pi-[a-z0-9]{5} +Successfully assigned default/pi-[a-z0-9]{5} to gke-kbrun-"
end

begin "delete the job"
k delete job pi
expect_code "$CODE" 0
expect_in "$WORK/out" 'job.batch "pi" deleted'
k get jobs
expect_in "$WORK/out" "No resources found"
k get pods
expect_in "$WORK/out" "No resources found"
end

# ---- a failing Job ----------------------------------------------------------------
cat >"$WORK/bad.yaml" <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: bad
  annotations: {sim.kbrun.io/fail: "true"}
spec:
  backoffLimit: 1
  template:
    spec:
      containers: [{name: main, image: busybox}]
      restartPolicy: Never
EOF
begin "a job told to fail"
k create -f "$WORK/bad.yaml"
expect_code "$CODE" 0
k wait --for=condition=failed job/bad --timeout=60s
expect_code "$CODE" 0
k get job bad -o jsonpath='{.status.failed} {.status.conditions[?(@.type=="Failed")].reason}'
expect_in "$WORK/out" "^2 BackoffLimitExceeded$"
k delete job bad
end

# ---- CRDs: an Argo Workflow and a TFJob ---------------------------------------------
cat >"$WORK/wf.yaml" <<'EOF'
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: hello-
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: a, template: echo}
      - {name: b, template: echo, dependencies: [a]}
  - name: echo
    container: {image: alpine:3.19, command: [echo, hi]}
EOF
begin "a workflow through the CRD path"
k create -f "$WORK/wf.yaml"
expect_code "$CODE" 0
WF=$(sed -n 's|^workflow.argoproj.io/\([a-z0-9-]*\) created$|\1|p' "$WORK/out")
[ -n "$WF" ] || fail "no workflow name in: $(cat "$WORK/out")"
k wait --for=jsonpath='{.status.phase}'=Succeeded "workflow/$WF" --timeout=60s
expect_code "$CODE" 0
k get workflows
expect_in "$WORK/out" "$WF +Succeeded"
k get pods -l "workflows.argoproj.io/workflow=$WF"
expect_in "$WORK/out" "$WF-echo-[0-9]+ +0/2 +Completed"
end

cat >"$WORK/tfjob.yaml" <<'EOF'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: tf-cnn
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: tensorflow
            image: tensorflow/tensorflow:2.15.0
EOF
begin "a TFJob"
k create -f "$WORK/tfjob.yaml"
expect_code "$CODE" 0
k wait --for=condition=Succeeded tfjob/tf-cnn --timeout=60s
expect_code "$CODE" 0
k get pods -l training.kubeflow.org/job-name=tf-cnn
expect_in "$WORK/out" "tf-cnn-worker-0 +0/1 +Completed"
expect_in "$WORK/out" "tf-cnn-worker-1 +0/1 +Completed"
k logs tf-cnn-worker-1
expect_in "$WORK/out" "training finished"
end

kc_report
