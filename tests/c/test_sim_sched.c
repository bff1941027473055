/* The scheduler's predicates (src/sim/model/scheduler.c) on the model alone:
 * cordon (spec.unschedulable) and its toleration, taints written to a node
 * (NoSchedule, NoExecute, PreferNoSchedule) against tolerations, required
 * node affinity (In, NotIn, Exists, DoesNotExist, Gt; terms ORed),
 * nodeSelector on labels a client set, resource requests filling nodes to
 * exactly their capacity, the FailedScheduling message in kube-scheduler's
 * words, and a killed pod giving its node's resources back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_test_util.h"

/* 3 nodes a-0..a-2 of 2 cpu, 4Gi; no overheads (fast). */
#define CLUSTER                                                                              \
  "cluster:\n  node_name_prefix: n-\n  pools:\n  - {name: a, nodes: 3, cpu: 2, memory: 4Gi}\n"

/* A one-pod workflow: `extra` is YAML spliced into the template (4 spaces). */
static int load_pod(kb_sim *sim, const char *cpu, const char *extra) {
  char y[4096];
  snprintf(y, sizeof y,
           "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: p-}\n"
           "spec:\n  entrypoint: main\n  templates:\n  - name: main\n"
           "    metadata: {annotations: {sim.kbrun.io/duration: forever}}\n"
           "    container: {image: busybox, resources: {requests: {cpu: \"%s\"}}}\n%s",
           cpu, extra ? extra : "");
  return st_load_text(sim, y);
}

/* The node index the run's pod is bound to, -1 while Pending. */
static int node_of(kb_sim *sim, int run) {
  int pod = st_pod(sim, run, "main");
  kb_sim_pod_info pi;
  if (pod < 0 || kb_sim_pod_get(sim, pod, &pi) || !pi.node) return -1;
  return kb_sim_node_find(sim, pi.node);
}

static const char *unsched_msg(kb_sim *sim, int run) {
  kb_sim_pod_info pi;
  int pod = st_pod(sim, run, "main");
  return pod >= 0 && !kb_sim_pod_get(sim, pod, &pi) ? pi.unschedulable_message : NULL;
}

/* Sets the node's spec keeping its labels; taints as given. */
static void set_node(kb_sim *sim, int node, int unsched, const kb_sim_taint *t, size_t nt) {
  kb_sim_node_info ni;
  kb_sim_node_get(sim, node, &ni);
  KB_CHECK(kb_sim_node_set_spec(sim, node, unsched, ni.labels, ni.n_labels, t, nt, NULL) == 0);
}

static void settle(kb_sim *sim) { kb_sim_run_until_idle(sim, kb_sim_now(sim) + 100); }

static void test_cordon(void) {
  kb_sim *sim = st_sim("fast", CLUSTER, 1);
  set_node(sim, 0, 1, NULL, 0);
  kb_sim_node_info ni;
  kb_sim_node_get(sim, 0, &ni);
  KB_CHECK(ni.unschedulable == 1);
  int p = load_pod(sim, "1500m", NULL);
  int r[3];
  for (int i = 0; i < 3; i++) r[i] = st_run(sim, p);
  settle(sim);
  KB_CHECK(node_of(sim, r[0]) == 1);
  KB_CHECK(node_of(sim, r[1]) == 2);
  KB_CHECK(node_of(sim, r[2]) == -1);
  KB_CHECK_STR(unsched_msg(sim, r[2]),
               "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.");
  /* Uncordon: the waiting pod is retried and lands on the freed node. */
  set_node(sim, 0, 0, NULL, 0);
  settle(sim);
  KB_CHECK(node_of(sim, r[2]) == 0);
  /* A pod tolerating node.kubernetes.io/unschedulable may use a cordoned node. */
  set_node(sim, 1, 1, NULL, 0);
  int tol = load_pod(sim, "100m",
                     "    tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}]\n"
                     "    nodeSelector: {kubernetes.io/hostname: n-a-1}\n");
  int plain = load_pod(sim, "100m", "    nodeSelector: {kubernetes.io/hostname: n-a-1}\n");
  int rt = st_run(sim, tol), rp = st_run(sim, plain);
  settle(sim);
  KB_CHECK(node_of(sim, rt) == 1);
  KB_CHECK(node_of(sim, rp) == -1);
  KB_CHECK_STR(unsched_msg(sim, rp), "0/3 nodes are available: 1 node(s) were unschedulable, "
                                     "2 node(s) didn't match Pod's node affinity/selector.");
  kb_sim_free(sim);
}

static void test_taints(void) {
  kb_sim *sim = st_sim("fast", CLUSTER, 2);
  kb_sim_taint gpu = {"dedicated", "gpu", "NoSchedule"};
  kb_sim_taint noexec = {"maint", "", "NoExecute"};
  kb_sim_taint soft = {"soft", "x", "PreferNoSchedule"};
  set_node(sim, 0, 0, &gpu, 1);
  set_node(sim, 1, 0, &noexec, 1);
  set_node(sim, 2, 0, &soft, 1);
  kb_sim_node_info ni;
  kb_sim_node_get(sim, 0, &ni);
  KB_CHECK(ni.n_taints == 1 && !strcmp(ni.taints[0].key, "dedicated"));
  /* Untolerated: only the PreferNoSchedule node; 2 cpu fill it. */
  int p = load_pod(sim, "1", NULL);
  int r[3];
  for (int i = 0; i < 3; i++) r[i] = st_run(sim, p);
  settle(sim);
  KB_CHECK(node_of(sim, r[0]) == 2 && node_of(sim, r[1]) == 2);
  KB_CHECK(node_of(sim, r[2]) == -1);
  KB_CHECK_STR(unsched_msg(sim, r[2]),
               "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
               "{dedicated: gpu}, 1 node(s) had untolerated taint {maint: }.");
  /* Equal with the right value, Exists on the key, an empty-key Exists. */
  int eq = load_pod(sim, "1", "    tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]\n");
  int wrong = load_pod(sim, "1", "    tolerations: [{key: dedicated, operator: Equal, value: cpu}, {key: maint, effect: NoSchedule, operator: Exists}]\n");
  int ex = load_pod(sim, "1", "    tolerations: [{key: maint, operator: Exists}]\n");
  int all = load_pod(sim, "1", "    tolerations: [{operator: Exists}]\n");
  int re = st_run(sim, eq), rw = st_run(sim, wrong), rx = st_run(sim, ex), ra = st_run(sim, all);
  settle(sim);
  KB_CHECK(node_of(sim, re) == 0);
  KB_CHECK(node_of(sim, rw) == -1); /* wrong value; the NoExecute taint needs a NoExecute toleration */
  KB_CHECK(node_of(sim, rx) == 1);
  KB_CHECK(node_of(sim, ra) == 0 || node_of(sim, ra) == 1);
  /* Taints removed: the waiting pods are retried in their order; 1 cpu is
   * left (6 - 5 placed), so the first gets it and the second waits. */
  set_node(sim, 0, 0, NULL, 0);
  set_node(sim, 1, 0, NULL, 0);
  settle(sim);
  KB_CHECK(node_of(sim, r[2]) >= 0);
  KB_CHECK(node_of(sim, rw) == -1);
  KB_CHECK_STR(unsched_msg(sim, rw), "0/3 nodes are available: 3 Insufficient cpu.");
  kb_sim_free(sim);
}

static void test_affinity(void) {
  kb_sim *sim = st_sim("fast", CLUSTER, 3);
  /* Labels as a client writes them (kubectl label). */
  for (int i = 0; i < 3; i++) {
    kb_sim_node_info ni;
    kb_sim_node_get(sim, i, &ni);
    kb_sim_kv kv[16];
    size_t n = 0;
    for (size_t k = 0; k < ni.n_labels && n < 14; k++) kv[n++] = ni.labels[k];
    char zone[8], gen[8];
    snprintf(zone, sizeof zone, "z%d", i);
    snprintf(gen, sizeof gen, "%d", i + 1);
    kv[n++] = (kb_sim_kv){"zone", zone};
    if (i) kv[n++] = (kb_sim_kv){"gen", gen};
    KB_CHECK(kb_sim_node_set_spec(sim, i, 0, kv, n, NULL, 0, NULL) == 0);
  }
#define AFF(exprs)                                                                           \
  "    affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "         \
  "{nodeSelectorTerms: [" exprs "]}}}\n"
  struct {
    const char *extra;
    int want;
  } cases[] = {
      {AFF("{matchExpressions: [{key: zone, operator: In, values: [z1]}]}"), 1},
      {AFF("{matchExpressions: [{key: zone, operator: NotIn, values: [z0, z1]}]}"), 2},
      {AFF("{matchExpressions: [{key: gen, operator: DoesNotExist}]}"), 0},
      {AFF("{matchExpressions: [{key: gen, operator: Exists}, {key: zone, operator: In, values: [z2]}]}"), 2},
      {AFF("{matchExpressions: [{key: gen, operator: Gt, values: [\"2\"]}]}"), 2},
      {AFF("{matchExpressions: [{key: zone, operator: In, values: [nowhere]}]}, "
           "{matchExpressions: [{key: zone, operator: In, values: [z0]}]}"), 0},
      {AFF("{matchExpressions: [{key: zone, operator: In, values: [nowhere]}]}"), -1},
      {"    nodeSelector: {zone: z1}\n", 1},
      {"    nodeSelector: {kubernetes.io/os: linux, zone: z2}\n", 2}, /* the kubelet's labels */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int r = st_run(sim, load_pod(sim, "10m", cases[i].extra));
    settle(sim);
    if (node_of(sim, r) != cases[i].want)
      fprintf(stderr, "affinity case %zu: node %d, want %d\n", i, node_of(sim, r), cases[i].want);
    KB_CHECK(node_of(sim, r) == cases[i].want);
    if (cases[i].want < 0)
      KB_CHECK_STR(unsched_msg(sim, r), "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.");
  }
  kb_sim_free(sim);
}

/* Ground truth: floor(node cpu / request) pods per node; the rest wait. */
static void test_requests_fill(void) {
  kb_sim *sim = st_sim("fast", CLUSTER, 4);
  int p = load_pod(sim, "600m", NULL); /* 3 per 2-cpu node: 9 fit */
  int r[20];
  for (int i = 0; i < 20; i++) r[i] = st_run(sim, p);
  settle(sim);
  int bound = 0, per[3] = {0};
  for (int i = 0; i < 20; i++) {
    int n = node_of(sim, r[i]);
    if (n >= 0) bound++, per[n]++;
  }
  KB_CHECK(bound == 9);
  KB_CHECK(per[0] == 3 && per[1] == 3 && per[2] == 3);
  kb_sim_stats s;
  kb_sim_stats_get(sim, &s);
  KB_CHECK(s.cpu_requested_m == 9 * 600);
  KB_CHECK(s.pods_running == 9 && s.pods_pending == 11 && s.pods_unschedulable == 11);
  /* 200m is left on each node: a smaller pod fits where the alike 600m ones
   * were refused (refusals are only reused for the same requests). */
  int small = st_run(sim, load_pod(sim, "200m", NULL));
  settle(sim);
  KB_CHECK(node_of(sim, small) == 0);
  int small2 = st_run(sim, load_pod(sim, "200m", NULL));
  int big = st_run(sim, load_pod(sim, "300m", NULL));
  settle(sim);
  KB_CHECK(node_of(sim, small2) == 1);
  KB_CHECK(node_of(sim, big) == -1);
  KB_CHECK_STR(unsched_msg(sim, big), "0/3 nodes are available: 3 Insufficient cpu.");
  kb_sim_pod_kill(sim, st_pod(sim, small, "main"), NULL, NULL, NULL);
  kb_sim_pod_kill(sim, st_pod(sim, small2, "main"), NULL, NULL, NULL);
  kb_sim_pod_kill(sim, st_pod(sim, big, "main"), NULL, NULL, NULL);
  settle(sim);
  kb_sim_stats_get(sim, &s);
  /* Killing a pod (its object deleted) gives its 600m back; one waiting pod takes it. */
  int victim = st_pod(sim, r[0], "main");
  int node = node_of(sim, r[0]);
  KB_CHECK(kb_sim_pod_kill(sim, victim, "Deleted", "the pod was deleted", NULL) == 0);
  kb_sim_node_info ni;
  kb_sim_node_get(sim, node, &ni);
  KB_CHECK(ni.cpu_requested_m == 1200);
  settle(sim);
  kb_sim_node_get(sim, node, &ni);
  KB_CHECK(ni.cpu_requested_m == 1800 && ni.pods == 3);
  kb_sim_stats_get(sim, &s);
  KB_CHECK(s.pods_running == 9 && s.pods_unschedulable == 10 && s.pods_failed == 4);
  kb_sim_pod_info pi;
  kb_sim_pod_get(sim, victim, &pi);
  KB_CHECK(pi.phase == KB_SIM_POD_FAILED && pi.exit_code == 137 && !strcmp(pi.reason, "Deleted"));
  KB_CHECK(kb_sim_pod_kill(sim, 99999, NULL, NULL, NULL) == KB_SIM_ENOENT);
  kb_sim_free(sim);
}

int main(void) {
  KB_RUN(test_cordon);
  KB_RUN(test_taints);
  KB_RUN(test_affinity);
  KB_RUN(test_requests_fill);
  return kb_test_report();
}
