#!/usr/bin/env bash
# End-to-end: the Kubebench scenarios through the kbrun binary against the
# embedded simulator. kubebench_tf_cnn.lua must leave the Kubebench layout
# (config/kf-job-manifest.yaml + the params, output/worker0.log,
# result/result.json) and one new row in report.csv; a main job the
# simulator fails (annotation sim.kbrun.io/fail) must exit 99 (its threshold) with a
# "failed" row; pytorch and mpi must pass; argo_storm must account for
# every workflow, job_storm for every Job (and its failures); kbrun render
# must create nothing.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/kubebench.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
expect_code() { [ "$1" = "$2" ] || { fail "exit code $1, expected $2"; sed 's/^/    /' "$WORK/stderr" >&2; }; }
expect_file() { [ -s "$1" ] || fail "missing or empty: ${1#"$WORK"/}"; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in ${1#"$WORK"/}"; sed 's/^/    /' "$1" >&2; }; }
rows() { [ -f "$1" ] && awk 'END { print NR - 1 }' "$1" || echo 0; }
run() { # run OUT ARGS...
  local out=$1; shift
  (cd "$SRC" && "$KBRUN" -q -o "$out" "$@") >"$WORK/stdout" 2>"$WORK/stderr"
}

begin "tf-cnn-dummy: Kubebench layout and one report row"
OUT="$WORK/experiments"
run "$OUT" scenarios/kubebench_tf_cnn.lua
expect_code $? 0
EXP=$(ls -d "$OUT"/tf-cnn-dummy-*/ 2>/dev/null | head -1)  # named after the config, as Kubebench names experiments
EXP=${EXP%/}
if [ -z "$EXP" ]; then fail "no experiment folder"; else
  expect_file "$EXP/config/kf-job-manifest.yaml"
  expect_in "$EXP/config/kf-job-manifest.yaml" "kind: TFJob"
  expect_in "$EXP/config/kf-job-manifest.yaml" "KUBEBENCH_EXP_OUTPUT_PATH"
  expect_file "$EXP/config/tf-cnn-dummy.yaml"
  expect_in "$EXP/config/tf-cnn-dummy.yaml" "model: resnet50"
  expect_file "$EXP/output/worker0.log"
  expect_file "$EXP/result/result.json"
  expect_in "$EXP/result/result.json" '"status": "passed"'
  [ "$(rows "$OUT/report.csv")" = 1 ] || fail "report.csv has $(rows "$OUT/report.csv") rows, expected 1"
  expect_in "$OUT/report.csv" "$(basename "$EXP"),"
  head -1 "$OUT/report.csv" | grep -q '^experiment_id,started_at,status,' || fail "header: $(head -1 "$OUT/report.csv")"
fi
end

begin "a second run adds exactly one row"
run "$OUT" scenarios/kubebench_tf_cnn.lua num_worker=2
expect_code $? 0
[ "$(rows "$OUT/report.csv")" = 2 ] || fail "report.csv has $(rows "$OUT/report.csv") rows, expected 2"
end

begin "a failing main job is reported as failed"
cat > "$WORK/failing.yaml" <<YAML
template: $SRC/scenarios/kubebench/tf_cnn_template.lua
params: $SRC/scenarios/kubebench/tf-cnn-dummy.yaml
kind: TFJob
annotations: {sim.kbrun.io/fail: "true"}
YAML
cat > "$WORK/failing.lua" <<LUA
local kubebench = require "kb.kubebench"
local s = kubebench.scenario { experiment = "$WORK/failing.yaml" }
return s
LUA
run "$OUT" "$WORK/failing.lua"
expect_code $? 99
[ "$(rows "$OUT/report.csv")" = 3 ] || fail "report.csv has $(rows "$OUT/report.csv") rows, expected 3"
tail -1 "$OUT/report.csv" | grep -q '^tf-cnn-dummy-[0-9]*-[0-9a-z]*,[^,]*,failed,' || fail "last row: $(tail -1 "$OUT/report.csv")"
expect_in "$OUT/report.csv" "has failed because 1 Worker replica(s) failed"
end

begin "pytorch and mpi examples pass"
run "$WORK/pt" scenarios/kubebench_pytorch.lua
expect_code $? 0
[ -f "$(ls -d "$WORK"/pt/*/ | head -1)output/master0.log" ] || fail "no master0.log"
run "$WORK/mpi" scenarios/kubebench_mpi.lua
expect_code $? 0
[ -f "$(ls -d "$WORK"/mpi/*/ | head -1)output/launcher0.log" ] || fail "no launcher0.log"
[ -f "$(ls -d "$WORK"/mpi/*/ | head -1)output/post-job.log" ] || fail "no post-job.log"
end

begin "kbrun render creates nothing"
(cd "$SRC" && "$KBRUN" render scenarios/kubebench_tf_cnn.lua) >"$WORK/stdout" 2>"$WORK/stderr"
expect_code $? 0
expect_in "$WORK/stdout" "kind: TFJob"
(cd "$SRC" && "$KBRUN" render --argo scenarios/kubebench/mpi.yaml) >"$WORK/stdout" 2>"$WORK/stderr"
expect_code $? 0
expect_in "$WORK/stdout" "entrypoint: kubebench-workflow"
end

begin "argo_storm accounts for every workflow"
run "$WORK/storm" scenarios/argo_storm.lua workflows=20 concurrency=5
expect_code $? 0
RES=$(ls -d "$WORK"/storm/*/ | head -1)result/result.json
expect_in "$RES" '"submitted": 20'
expect_in "$RES" '"Succeeded": 20'
end

begin "job_storm: every Job completes, pod startup measured from watches"
run "$WORK/jobs" scenarios/job_storm.lua jobs=20 concurrency=5
expect_code $? 0
RES=$(ls -d "$WORK"/jobs/*/ | head -1)result/result.json
expect_in "$RES" '"created": 20'
expect_in "$RES" '"complete": 20'
expect_in "$RES" '"completed_rate": 1'
expect_in "$RES" '"name": "lifecycle.pod.running"'
expect_in "$RES" '"name": "lifecycle.job.complete"'
end

begin "job_storm: failing pods are reported, the threshold fails"
run "$WORK/jobsfail" scenarios/job_storm.lua jobs=5 concurrency=5 duration=fixed:10 \
  fail_probability=1
expect_code $? 99
RES=$(ls -d "$WORK"/jobsfail/*/ | head -1)result/result.json
expect_in "$RES" '"failed": 5'
expect_in "$RES" '"completed_rate": 0'
end

echo "kubebench e2e: $passed passed, $failed failed"
[ "$failed" = 0 ]
