/* Runs on the cluster: scheduler (requests, selectors, taints, pending
 * until capacity frees), CPU stretching, failures, lost pools, terminate,
 * persistence-agent lag, determinism, API latency and the taxi
 * calibration (C3). */
#include "sim_test_util.h"

static const char *one_step =
    "apiVersion: argoproj.io/v1alpha1\n"
    "kind: Workflow\n"
    "metadata: {generateName: one-}\n"
    "spec:\n"
    "  entrypoint: s\n"
    "  templates:\n"
    "  - name: s\n"
    "    metadata: {annotations: {sim.kbrun.io/duration: \"fixed:100\"}}\n"
    "    container: {image: alpine, resources: {requests: {cpu: \"%s\"}}}\n";

static int load_one(kb_sim *sim, const char *cpu) {
  char buf[1024];
  snprintf(buf, sizeof buf, one_step, cpu);
  return st_load_text(sim, buf);
}

static const char *small_pool = "cluster: {pools: [{name: p, nodes: 1, cpu: 4, memory: 8Gi}]}\n";

static void test_pending_until_capacity(void) {
  kb_sim *sim = st_sim("fast", small_pool, 1);
  int p = load_one(sim, "3");
  int r1 = st_run(sim, p), r2 = st_run(sim, p);
  KB_CHECK(kb_sim_advance_to(sim, 50) == 0);
  kb_sim_pod_info a, b;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r1, "s"), &a) == 0);
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r2, "s"), &b) == 0);
  KB_CHECK(a.phase == KB_SIM_POD_RUNNING);
  KB_CHECK(b.phase == KB_SIM_POD_PENDING && !b.scheduled);
  KB_CHECK_STR(b.unschedulable_message, "0/1 nodes are available: 1 Insufficient cpu.");
  kb_sim_stats s;
  kb_sim_stats_get(sim, &s);
  KB_CHECK(s.pods_running == 1 && s.pods_pending == 1 && s.pods_unschedulable == 1);
  KB_CHECK(s.cpu_requested_m == 3000 && s.cpu_capacity_m == 4000);
  /* The FailedScheduling event was recorded once. */
  int failed = 0;
  kb_sim_event_info ev;
  for (uint64_t i = kb_sim_event_first(sim); i < kb_sim_event_end(sim); i++)
    if (!kb_sim_event_get(sim, i, &ev) && !strcmp(ev.reason, "FailedScheduling")) {
      failed++;
      KB_CHECK_STR(ev.type, "Warning");
      KB_CHECK(ev.object == b.id);
    }
  KB_CHECK(failed == 1);
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r2, "s"), &b) == 0);
  KB_CHECK(b.phase == KB_SIM_POD_SUCCEEDED);
  KB_CHECK_NEAR(b.scheduled_at, 100, 1e-9); /* placed when the first one ended */
  KB_CHECK_NEAR(st_info(sim, r2).finished_at, 200, 1e-9);
  kb_sim_stats_get(sim, &s);
  KB_CHECK(s.cpu_requested_m == 0 && s.pods_succeeded == 2);
  kb_sim_free(sim);
}

static void test_selector_and_taints(void) {
  const char *cfg =
      "cluster:\n"
      "  pools:\n"
      "  - {name: a, nodes: 2, cpu: 4, memory: 8Gi}\n"
      "  - {name: b, nodes: 1, cpu: 4, memory: 8Gi}\n"
      "  - {name: t, nodes: 1, cpu: 64, memory: 64Gi, taints: [{key: dedicated, value: ml, effect: NoSchedule}]}\n";
  const char *wf =
      "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: sel}\n"
      "spec:\n  entrypoint: m\n  templates:\n"
      "  - name: m\n    dag:\n      tasks:\n"
      "      - {name: onb, template: onb}\n"
      "      - {name: tol, template: tol}\n"
      "      - {name: any, template: any}\n"
      "  - {name: onb, nodeSelector: {cloud.google.com/gke-nodepool: b}, container: {image: x}}\n"
      "  - name: tol\n    nodeSelector: {cloud.google.com/gke-nodepool: t}\n"
      "    tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]\n"
      "    container: {image: x}\n"
      "  - {name: any, container: {image: x, resources: {requests: {cpu: \"8\"}}}}\n";
  kb_sim *sim = st_sim("fast", cfg, 1);
  int p = st_load_text(sim, wf);
  int r = st_run(sim, p);
  kb_sim_advance_to(sim, 0.5);
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "onb"), &pi) == 0);
  KB_CHECK_STR(pi.node, "gke-kbrun-b-0");
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "tol"), &pi) == 0);
  KB_CHECK_STR(pi.node, "gke-kbrun-t-0");
  /* 8 cpu fits only the tainted node, which "any" does not tolerate. */
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "any"), &pi) == 0);
  KB_CHECK(pi.node == NULL);
  KB_CHECK_STR(pi.unschedulable_message,
               "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 3 Insufficient cpu.");
  kb_sim_free(sim);
}

static void test_memory_and_gpu_requests(void) {
  const char *cfg = "cluster: {pools: [{name: g, nodes: 1, cpu: 8, memory: 4Gi, gpu: 1}]}\n";
  const char *wf =
      "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: res}\n"
      "spec:\n  entrypoint: m\n  templates:\n"
      "  - name: m\n    dag:\n      tasks:\n"
      "      - {name: big, template: big}\n"
      "      - {name: gpus, template: gpus}\n"
      "  - {name: big, container: {image: x, resources: {requests: {memory: 5Gi}}}}\n"
      "  - {name: gpus, container: {image: x, resources: {limits: {nvidia.com/gpu: 2}}}}\n";
  kb_sim *sim = st_sim("fast", cfg, 1);
  int r = st_run(sim, st_load_text(sim, wf));
  kb_sim_advance_to(sim, 0.5);
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "big"), &pi) == 0);
  KB_CHECK_STR(pi.unschedulable_message, "0/1 nodes are available: 1 Insufficient memory.");
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "gpus"), &pi) == 0);
  KB_CHECK_STR(pi.unschedulable_message, "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.");
  kb_sim_free(sim);
}

/* No requests: pods are never refused; the node's cpu is shared. */
static void test_cpu_stretching(void) {
  kb_sim *sim = st_sim("fast", "cluster: {pools: [{name: p, nodes: 1, cpu: 2, memory: 64Gi}]}\n"
                       "k8s: {cpu_demand: 1}\n", 1);
  int p = load_one(sim, "0");
  int r = st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK_NEAR(st_info(sim, r).finished_at - st_info(sim, r).created_at, 100, 1e-6);
  /* 10 at once: demand 10 on 2 cpu -> rate 0.2 -> 500 s each. */
  int rs[10];
  double t0 = kb_sim_now(sim);
  for (int i = 0; i < 10; i++) rs[i] = st_run(sim, p);
  kb_sim_advance_to(sim, t0 + 10);
  kb_sim_node_info ni;
  kb_sim_node_get(sim, 0, &ni);
  KB_CHECK_NEAR(ni.cpu_demand, 10, 1e-9);
  KB_CHECK_NEAR(ni.progress_rate, 0.2, 1e-9);
  kb_sim_run_until_idle(sim, 1e6);
  for (int i = 0; i < 10; i++) KB_CHECK_NEAR(st_info(sim, rs[i]).finished_at - t0, 500, 1e-6);
  kb_sim_free(sim);
}

/* Requests that do not fit leave pods Pending: durations grow by waves. */
static void test_durations_grow_when_pool_small(void) {
  const char *big = "cluster: {pools: [{name: p, nodes: 4, cpu: 4, memory: 8Gi}]}\n";
  double med[2];
  for (int k = 0; k < 2; k++) {
    kb_sim *sim = st_sim("fast", k ? small_pool : big, 1);
    int p = load_one(sim, "3");
    double d[4];
    for (int i = 0; i < 4; i++) st_run(sim, p);
    kb_sim_run_until_idle(sim, 1e6);
    for (int i = 0; i < 4; i++) d[i] = st_info(sim, i).finished_at;
    med[k] = st_median(d, 4);
    kb_sim_free(sim);
  }
  KB_CHECK_NEAR(med[0], 100, 1e-9);
  KB_CHECK_NEAR(med[1], 250, 1e-9); /* finish at 100, 200, 300, 400 */
}

static void test_image_pull_serial(void) {
  /* Default profile: 2500 MB at 40 MB/s + 1 s per pull (C5, D9, est.). */
  const char *cfg = "cluster: {pools: [{name: p, nodes: 1, cpu: 8, memory: 30Gi}]}\n"
                    "k8s: {pod_startup: 0}\n";
  const char *wf =
      "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: pull}\n"
      "spec:\n  entrypoint: m\n  templates:\n"
      "  - name: m\n    dag:\n      tasks:\n"
      "      - {name: a, template: a}\n      - {name: b, template: b}\n      - {name: c, template: c}\n"
      "  - {name: a, container: {image: \"tensorflow/tfx:0.15.0\"}}\n"
      "  - {name: b, container: {image: \"tensorflow/tfx:0.15.0\"}}\n"
      "  - {name: c, container: {image: \"tensorflow/tensorflow:1.13.2-py3\"}}\n";
  kb_sim *sim = st_sim("fast", cfg, 1);
  kb_sim_config *c = (kb_sim_config *)kb_sim_config_of(sim);
  c->image_pull_fixed = 1;
  c->image_pull_mb_per_s = 40;
  int r = st_run(sim, st_load_text(sim, wf));
  kb_sim_advance_to(sim, 0.5);
  kb_sim_run_until_idle(sim, 1e6);
  kb_sim_pod_info a, b, cc;
  kb_sim_pod_get(sim, st_pod(sim, r, "a"), &a);
  kb_sim_pod_get(sim, st_pod(sim, r, "b"), &b);
  kb_sim_pod_get(sim, st_pod(sim, r, "c"), &cc);
  KB_CHECK_NEAR(a.started_at, 63.5, 1e-9);    /* 1 + 2500/40 */
  KB_CHECK_NEAR(b.started_at, 63.5, 1e-9);    /* waits for the same pull */
  KB_CHECK_NEAR(cc.started_at, 89.5, 1e-9);   /* serial: after it, 1 + 1000/40 */
  kb_sim_free(sim);
}

static void test_failure_rate(void) {
  kb_sim *sim = st_sim("fast", "steps: {fail_prob: 0.3}\n", 7);
  int p = load_one(sim, "0");
  int n = 400, failed = 0;
  for (int i = 0; i < n; i++) st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e7);
  for (int i = 0; i < n; i++) {
    kb_sim_run_info ri = st_info(sim, i);
    KB_CHECK(ri.state == KB_SIM_RUN_FAILED || ri.state == KB_SIM_RUN_SUCCEEDED);
    if (ri.state == KB_SIM_RUN_FAILED) {
      failed++;
      if (failed == 1) KB_CHECK_STR(ri.error, "step s failed: Error");
    }
  }
  KB_CHECK_NEAR((double)failed / n, 0.3, 0.06);
  /* A failed step stops its DAG: a 3-step chain fails with 1 - 0.7^3. */
  KB_CHECK(kb_sim_set_step_fail_prob(sim, 1.5, NULL) == KB_SIM_EINVAL);
  kb_sim_error err;
  KB_CHECK(kb_sim_set_step_fail_prob(sim, 1.5, &err) == KB_SIM_EINVAL);
  KB_CHECK_STR(err.message, "step failure probability must be within 0..1, got 1.5");
  KB_CHECK(kb_sim_set_step_fail_prob(sim, 0, &err) == 0);
  kb_sim_run_opts o = {.fail_prob = 1};
  int r = kb_sim_run_create(sim, p, &o, &err);
  kb_sim_run_until_idle(sim, 1e7);
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_FAILED);
  kb_sim_free(sim);

  sim = st_sim("fast", "steps: {fail_prob: 0.3}\n", 11);
  p = st_load_file(sim, "data/sim/v2ir_pipeline_with_after.yaml");
  failed = 0;
  for (int i = 0; i < n; i++) st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e7);
  int skipped_pods = 0;
  for (int i = 0; i < n; i++) {
    kb_sim_run_info ri = st_info(sim, i);
    failed += ri.state == KB_SIM_RUN_FAILED;
    skipped_pods += ri.pods_done < ri.pods_total;
  }
  KB_CHECK_NEAR((double)failed / n, 1 - 0.7 * 0.7 * 0.7, 0.06);
  KB_CHECK(skipped_pods > 0);
  kb_sim_free(sim);
}

static void test_lost_pool(void) {
  kb_sim *sim = st_sim("fast", "cluster: {pools: [{name: a, nodes: 2, cpu: 8, memory: 8Gi}, {name: b, nodes: 1, cpu: 8, memory: 8Gi}]}\n", 1);
  const char *wf =
      "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: lost-}\n"
      "spec:\n  entrypoint: s\n  nodeSelector: {cloud.google.com/gke-nodepool: a}\n  templates:\n"
      "  - {name: s, metadata: {annotations: {sim.kbrun.io/duration: \"fixed:100\"}}, container: {image: x}}\n";
  int p = st_load_text(sim, wf);
  for (int i = 0; i < 4; i++) st_run(sim, p);
  kb_sim_advance_to(sim, 10);
  kb_sim_error err;
  KB_CHECK(kb_sim_pool_fail(sim, "nope", &err) == KB_SIM_ENOENT);
  KB_CHECK_STR(err.message, "node pool nope not found");
  KB_CHECK(kb_sim_pool_fail(sim, "a", &err) == 0);
  kb_sim_node_info ni;
  kb_sim_node_get(sim, 0, &ni);
  KB_CHECK(!ni.ready && ni.pods == 0);
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, 0, "s"), &pi) == 0);
  KB_CHECK(pi.phase == KB_SIM_POD_FAILED);
  KB_CHECK_STR(pi.reason, "NodeLost");
  KB_CHECK_NEAR(pi.finished_at, 10, 1e-9);
  kb_sim_run_until_idle(sim, 1e6);
  for (int i = 0; i < 4; i++) KB_CHECK(st_info(sim, i).state == KB_SIM_RUN_FAILED);
  /* New pods cannot land on the lost pool. */
  int r = st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "s"), &pi) == 0);
  KB_CHECK_STR(pi.unschedulable_message,
               "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
               "2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }.");
  KB_CHECK(kb_sim_pool_restore(sim, "a", &err) == 0);
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_SUCCEEDED);
  KB_CHECK(kb_sim_node_fail(sim, 99, &err) == KB_SIM_ENOENT);
  KB_CHECK_STR(err.message, "node 99 not found");
  kb_sim_free(sim);
}

static void test_terminate_and_delete(void) {
  kb_sim *sim = st_sim("default", NULL, 3);
  int p = load_one(sim, "1");
  int r = st_run(sim, p);
  kb_sim_advance_to(sim, 30);
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_RUNNING);
  kb_sim_error err;
  KB_CHECK(kb_sim_run_terminate(sim, r, &err) == 0);
  kb_sim_run_info ri = st_info(sim, r);
  KB_CHECK(ri.state == KB_SIM_RUN_CANCELING);
  KB_CHECK_STR(ri.wf_message, "Stopped with strategy 'Terminate'");
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "s"), &pi) == 0);
  KB_CHECK(pi.phase == KB_SIM_POD_FAILED);
  kb_sim_run_until_idle(sim, 1e6);
  ri = st_info(sim, r);
  KB_CHECK(ri.state == KB_SIM_RUN_CANCELED);
  KB_CHECK_NEAR(ri.finished_at, 30, 1e-9);
  KB_CHECK(kb_sim_run_terminate(sim, r, &err) == KB_SIM_ESTATE);
  KB_CHECK(!strncmp(err.message, "run one-", 8) && strstr(err.message, " has already finished"));
  KB_CHECK(kb_sim_run_terminate(sim, 42, &err) == KB_SIM_ENOENT);
  KB_CHECK_STR(err.message, "run 42 not found");
  KB_CHECK(kb_sim_run_create(sim, 9, NULL, &err) == KB_SIM_ENOENT);
  KB_CHECK_STR(err.message, "pipeline 9 not found");
  /* Delete: pods go away, the run is freed. */
  int r2 = st_run(sim, p);
  kb_sim_advance_to(sim, kb_sim_now(sim) + 20);
  int pod = st_pod(sim, r2, "s");
  KB_CHECK(pod >= 0);
  KB_CHECK(kb_sim_pod_get(sim, pod, &pi) == 0);
  uint32_t pod_gen = pi.gen, run_gen = st_info(sim, r2).gen;
  const char *wf2 = st_info(sim, r2).workflow;
  char old_name[128];
  snprintf(old_name, sizeof old_name, "%s", wf2);
  KB_CHECK(kb_sim_run_delete(sim, r2, &err) == 0);
  KB_CHECK(kb_sim_pod_get(sim, pod, &pi) == KB_SIM_ENOENT);
  KB_CHECK(kb_sim_run_get(sim, r2, &ri) == KB_SIM_ENOENT);
  KB_CHECK(kb_sim_run_workflow_status(sim, r2) == NULL);
  KB_CHECK(kb_sim_run_delete(sim, r2, &err) == KB_SIM_ENOENT);
  /* The next run takes the freed ids, with new generations and its own
   * random draws; the deleted run's pending events do not touch it. */
  double t_new = kb_sim_now(sim);
  int r3 = st_run(sim, p);
  KB_CHECK(r3 == r2);
  KB_CHECK(st_info(sim, r3).gen == run_gen + 1);
  KB_CHECK(strcmp(st_info(sim, r3).workflow, old_name) != 0);
  kb_sim_run_until_idle(sim, 1e6);
  ri = st_info(sim, r3);
  KB_CHECK(ri.state == KB_SIM_RUN_SUCCEEDED);
  KB_CHECK(ri.finished_at - t_new > 50); /* ran its own full step */
  int pod3 = st_pod(sim, r3, "s");
  KB_CHECK(pod3 == pod);
  KB_CHECK(kb_sim_pod_get(sim, pod3, &pi) == 0 && pi.gen == pod_gen + 1);
  KB_CHECK(kb_sim_run_delete(sim, r3, &err) == 0);
  kb_sim_run_until_idle(sim, 1e6);
  kb_sim_stats s;
  kb_sim_stats_get(sim, &s);
  KB_CHECK(s.cpu_requested_m == 0 && s.runs_active == 0);
  kb_sim_free(sim);
}

/* Default profile: the reported state trails the workflow (B6). */
/* A long simulation of create-and-delete cycles reuses its slots: the
 * model's arrays stay at the high-water mark of live objects, and a
 * released pipeline is freed once its last run is. */
static void test_slots_are_recycled(void) {
  kb_sim *sim = st_sim("fast", NULL, 9);
  kb_sim_error err;
  int p = load_one(sim, "1");
  int first = -1;
  for (int cycle = 0; cycle < 500; cycle++) {
    int live[4];
    for (int i = 0; i < 4; i++) live[i] = st_run(sim, p);
    if (cycle == 0) first = live[0];
    kb_sim_run_until_idle(sim, 1e6);
    for (int i = 0; i < 4; i++) KB_CHECK(st_info(sim, live[i]).state == KB_SIM_RUN_SUCCEEDED);
    for (int i = 0; i < 4; i++) KB_CHECK(kb_sim_run_delete(sim, live[i], &err) == 0);
  }
  KB_CHECK(first >= 0);
  KB_CHECK(kb_sim_run_count(sim) <= 4);
  KB_CHECK(kb_sim_pod_count(sim) <= 4);
  kb_sim_stats s;
  kb_sim_stats_get(sim, &s);
  KB_CHECK(s.runs_total == 2000 && s.runs_active == 0);
  /* Released while a run uses it: it lives until the run goes. */
  int r = st_run(sim, p);
  kb_sim_pipeline_release(sim, p);
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 1);
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_SUCCEEDED);
  KB_CHECK(kb_sim_run_delete(sim, r, &err) == 0);
  KB_CHECK(kb_sim_pipeline_name(sim, p) == NULL);
  KB_CHECK(kb_sim_run_create(sim, p, NULL, &err) == KB_SIM_ENOENT);
  KB_CHECK(load_one(sim, "1") == p); /* the freed id is reused */
  kb_sim_free(sim);
}

static void test_persistence_lag(void) {
  kb_sim *sim = st_sim("default", NULL, 5);
  int p = load_one(sim, "1");
  int r = st_run(sim, p);
  int saw_lag = 0;
  for (double t = 0; t < 400; t += 0.25) {
    kb_sim_advance_to(sim, t);
    kb_sim_run_info ri = st_info(sim, r);
    if (ri.wf_finished_at >= 0 && ri.state == KB_SIM_RUN_RUNNING) saw_lag = 1;
  }
  kb_sim_run_info ri = st_info(sim, r);
  KB_CHECK(saw_lag);
  KB_CHECK(ri.state == KB_SIM_RUN_SUCCEEDED);
  KB_CHECK(ri.finished_at == ri.wf_finished_at);
  KB_CHECK(ri.history[ri.n_history - 1].time > ri.wf_finished_at);
  printf("one-step run: %.2f s, reported %.2f s after the workflow ended\n", ri.finished_at - ri.created_at, ri.history[ri.n_history - 1].time - ri.wf_finished_at);
  /* 100 s of work + pull (1 + 200/40) + start-up + wait + detection (1..10). */
  KB_CHECK(ri.finished_at - ri.created_at > 108 && ri.finished_at - ri.created_at < 125);
  kb_sim_free(sim);
}

static void outcome(uint64_t seed, double *out, int n) {
  kb_sim *sim = st_sim("default", NULL, seed);
  int p = st_load_file(sim, "../scenarios/pipelines/taxi_updated_pool.yaml");
  /* Interleave an unrelated pipeline: it must not change taxi draws. */
  int q = load_one(sim, "1");
  for (int i = 0; i < n; i++) st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e6);
  for (int i = 0; i < n; i++) out[i] = st_info(sim, i).finished_at;
  (void)q;
  kb_sim_free(sim);
}

static void test_determinism(void) {
  double a[10], b[10], c[10];
  outcome(99, a, 10);
  outcome(99, b, 10);
  outcome(100, c, 10);
  KB_CHECK(!memcmp(a, b, sizeof a));
  KB_CHECK(memcmp(a, c, sizeof a) != 0);
}

static void test_taxi_calibration(void) {
  kb_sim *sim = st_sim("default", NULL, 2020);
  int p = st_load_file(sim, "../scenarios/pipelines/taxi_updated_pool.yaml");
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 8);
  kb_sim_step_info si;
  kb_sim_pipeline_step(sim, p, (size_t)kb_sim_pipeline_find_step(sim, p, "transform"), &si);
  KB_CHECK(si.duration.kind == KB_SIM_LOGNORMAL && si.duration.a == 150 && si.n_deps == 2);
  enum { N = 50 };
  double d[N], lo = 1e9, hi = 0;
  int ok = 0;
  for (int i = 0; i < N; i++) st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e6);
  for (int i = 0; i < N; i++) {
    kb_sim_run_info ri = st_info(sim, i);
    ok += ri.state == KB_SIM_RUN_SUCCEEDED;
    d[i] = ri.finished_at - ri.created_at;
    lo = d[i] < lo ? d[i] : lo;
    hi = d[i] > hi ? d[i] : hi;
  }
  double med = st_median(d, N);
  printf("taxi 50 runs on pool-1: min %.0f  median %.0f  max %.0f s (C3: 590 / 640 / 701)\n", lo, med, hi);
  KB_CHECK(ok == N);
  KB_CHECK_NEAR(med, 640, 640 * 0.15);
  /* Every pod stayed on pool-1. */
  kb_sim_pod_info pi;
  int off_pool = 0;
  for (size_t i = 0; i < kb_sim_pod_count(sim); i++)
    if (!kb_sim_pod_get(sim, (int)i, &pi) && strncmp(pi.node, "gke-kbrun-pool-1-", 17)) off_pool++;
  KB_CHECK(off_pool == 0);
  kb_sim_free(sim);
}

static void test_api_latency(void) {
  kb_sim *sim = st_sim("fast", NULL, 1);
  KB_CHECK(kb_sim_api_latency(sim, "CreateRun", 1000, 10) == 0);
  kb_sim_free(sim);
  sim = st_sim("default", NULL, 1);
  enum { N = 2001 };
  static double v[N];
  for (int i = 0; i < N; i++) {
    v[i] = kb_sim_api_latency(sim, "CreateRun", 0, 0);
    kb_sim_advance_to(sim, kb_sim_now(sim) + 10); /* no queueing */
  }
  KB_CHECK_NEAR(st_median(v, N), 0.40, 0.02); /* A1 */
  /* Growth with stored rows and items (ListRuns, est. A6/A8). */
  double base = 0, big = 0;
  for (int i = 0; i < 200; i++) {
    base += kb_sim_api_latency(sim, "ListRuns", 0, 0);
    kb_sim_advance_to(sim, kb_sim_now(sim) + 10);
    big += kb_sim_api_latency(sim, "ListRuns", 100000, 20);
    kb_sim_advance_to(sim, kb_sim_now(sim) + 10);
  }
  KB_CHECK_NEAR((big - base) / 200, 1.0 + 0.1, 0.15);
  KB_CHECK(kb_sim_api_latency(sim, "NoSuchCall", 0, 0) > 0); /* "default" */
  kb_sim_free(sim);
  /* Queueing behind max_inflight. */
  sim = st_sim("default", "kfp_api: {max_inflight: 1, GetRun: {fixed: 0.5}}\n", 1);
  KB_CHECK_NEAR(kb_sim_api_latency(sim, "GetRun", 0, 0), 0.5, 1e-9);
  KB_CHECK_NEAR(kb_sim_api_latency(sim, "GetRun", 0, 0), 1.0, 1e-9);
  KB_CHECK_NEAR(kb_sim_api_latency(sim, "GetRun", 0, 0), 1.5, 1e-9);
  kb_sim_advance_to(sim, 10);
  KB_CHECK_NEAR(kb_sim_api_latency(sim, "GetRun", 0, 0), 0.5, 1e-9);
  kb_sim_free(sim);
}

static uint64_t observed;
static void observe(void *ud, kb_sim_kind kind, uint32_t idx, uint64_t rv) {
  (void)ud;
  (void)kind;
  (void)idx;
  observed = rv;
}

static void test_observer(void) {
  kb_sim *sim = st_sim("fast", NULL, 1);
  kb_sim_set_observer(sim, observe, NULL);
  st_run(sim, load_one(sim, "1"));
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK(observed > 5 && observed == kb_sim_resource_version(sim));
  kb_sim_free(sim);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Generated workflow names never collide (random suffixes lost 2 of
 * 10,000 Workflows, and their pods, to collisions): 20,000 runs of one
 * pipeline, 20,000 distinct names of the generateName form. */
static void test_workflow_names_unique(void) {
  kb_sim *sim = st_sim("fast", NULL, 5);
  if (!sim) return;
  int p = st_load_file(sim, "data/sim/v2ir_hello_world.yaml");
  KB_CHECK(p >= 0);
  enum { N = 20000 };
  char **names = calloc(N, sizeof *names);
  int made = 0;
  for (int i = 0; i < N; i++) {
    int r = st_run(sim, p);
    if (r < 0) break;
    kb_sim_run_info ri = st_info(sim, r);
    names[made++] = strdup(ri.workflow);
  }
  KB_CHECK(made == N);
  size_t len = strlen(names[0]);
  for (int i = 0; i < made; i++) KB_CHECK(strlen(names[i]) == len);
  qsort(names, (size_t)made, sizeof *names, cmp_str);
  int dups = 0;
  for (int i = 1; i < made; i++) dups += strcmp(names[i - 1], names[i]) == 0;
  KB_CHECK(dups == 0);
  for (int i = 0; i < made; i++) free(names[i]);
  free(names);
  kb_sim_free(sim);
}

int main(void) {
  KB_RUN(test_workflow_names_unique);
  KB_RUN(test_pending_until_capacity);
  KB_RUN(test_selector_and_taints);
  KB_RUN(test_memory_and_gpu_requests);
  KB_RUN(test_cpu_stretching);
  KB_RUN(test_durations_grow_when_pool_small);
  KB_RUN(test_image_pull_serial);
  KB_RUN(test_failure_rate);
  KB_RUN(test_lost_pool);
  KB_RUN(test_terminate_and_delete);
  KB_RUN(test_slots_are_recycled);
  KB_RUN(test_persistence_lag);
  KB_RUN(test_determinism);
  KB_RUN(test_taxi_calibration);
  KB_RUN(test_api_latency);
  KB_RUN(test_observer);
  return kb_test_report();
}
