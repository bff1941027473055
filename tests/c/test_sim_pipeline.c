/* Pipeline expansion (KFP v1 Argo, v2 backend Argo, v2 IR) and runs of
 * every sample to SUCCEEDED with the modelled timestamps (fast profile:
 * no overheads, 1 s steps unless hinted). */
#include "sim_test_util.h"

/* Clusters able to host every sample: cpu pools plus tainted GPU pools
 * labelled for the samples' accelerators. */
static const char *cluster_yaml =
    "cluster:\n"
    "  pools:\n"
    "  - {name: pool-1, nodes: 2, cpu: 8, memory: 30Gi}\n"
    "  - name: k80\n"
    "    nodes: 1\n"
    "    cpu: 8\n"
    "    memory: 30Gi\n"
    "    gpu: 2\n"
    "    labels: {cloud.google.com/gke-accelerator: nvidia-tesla-k80}\n"
    "  - name: p4\n"
    "    nodes: 1\n"
    "    cpu: 8\n"
    "    memory: 30Gi\n"
    "    gpu: 1\n"
    "    labels: {cloud.google.com/gke-accelerator: nvidia-tesla-p4}\n"
    "    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n";

static kb_sim_step_info step(kb_sim *sim, int p, const char *name) {
  kb_sim_step_info si;
  memset(&si, 0, sizeof si);
  int i = kb_sim_pipeline_find_step(sim, p, name);
  KB_CHECK(i >= 0);
  if (i >= 0) kb_sim_pipeline_step(sim, p, (size_t)i, &si);
  return si;
}

static int depends_on(kb_sim *sim, int p, const char *a, const char *b) {
  kb_sim_step_info si = step(sim, p, a);
  int j = kb_sim_pipeline_find_step(sim, p, b);
  for (size_t i = 0; i < si.n_deps; i++)
    if (si.deps[i] == j) return 1;
  return 0;
}

static const char *selector(kb_sim_step_info si, const char *key) {
  for (size_t i = 0; i < si.n_node_selector; i++)
    if (!strcmp(si.node_selector[i].key, key)) return si.node_selector[i].value;
  return NULL;
}

static kb_sim_run_info run_to_end(kb_sim *sim, int p) {
  int r = st_run(sim, p);
  KB_CHECK(r >= 0);
  KB_CHECK(kb_sim_run_until_idle(sim, 1e6) > 0);
  return st_info(sim, r);
}

static void test_v2_hello_world(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v2ir_hello_world.yaml");
  KB_CHECK(p == 0);
  KB_CHECK_STR(kb_sim_pipeline_format(sim, p), "v2");
  KB_CHECK_STR(kb_sim_pipeline_name(sim, p), "echo");
  /* B1: root dag driver, container driver, executor. */
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 3);
  kb_sim_step_info drv = step(sim, p, "echo-driver"), ex = step(sim, p, "echo");
  KB_CHECK(step(sim, p, "root-driver").kind == KB_SIM_STEP_DAG_DRIVER);
  KB_CHECK(drv.kind == KB_SIM_STEP_DRIVER && drv.cpu_m == 100 && drv.memory == 64 << 20); /* B2 */
  KB_CHECK_STR(drv.template_name, "system-container-driver");
  KB_CHECK_STR(ex.template_name, "system-container-impl");
  KB_CHECK_STR(ex.node_suffix, ".root.echo.executor");
  KB_CHECK_STR(ex.image, "registry.access.redhat.com/ubi9/python-311:latest");
  KB_CHECK(depends_on(sim, p, "echo", "echo-driver") && depends_on(sim, p, "echo-driver", "root-driver"));
  kb_sim_run_info ri = run_to_end(sim, p);
  KB_CHECK(ri.state == KB_SIM_RUN_SUCCEEDED);
  KB_CHECK(ri.pods_done == 3 && ri.pods_total == 3);
  /* fast: drivers take 0 s, the step 1 s. */
  KB_CHECK_NEAR(ri.finished_at - ri.created_at, 1.0, 1e-9);
  KB_CHECK(ri.n_history == 3 && ri.history[1].state == KB_SIM_RUN_RUNNING);
  kb_sim_free(sim);

  /* Without driver pods: one pod. */
  sim = st_sim("fast", "kfp_run: {v2_driver_pods: false}\n", 1);
  p = st_load_file(sim, "data/sim/v2ir_hello_world.yaml");
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 1);
  KB_CHECK(run_to_end(sim, p).state == KB_SIM_RUN_SUCCEEDED);
  kb_sim_free(sim);
}

static void test_v2_with_after(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v2ir_pipeline_with_after.yaml");
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 7);
  KB_CHECK(depends_on(sim, p, "print-text-2-driver", "print-text"));
  KB_CHECK(depends_on(sim, p, "print-text-3-driver", "print-text"));
  KB_CHECK(depends_on(sim, p, "print-text-3-driver", "print-text-2"));
  KB_CHECK(!depends_on(sim, p, "print-text-driver", "print-text-2"));
  kb_sim_run_info ri = run_to_end(sim, p);
  KB_CHECK(ri.state == KB_SIM_RUN_SUCCEEDED);
  KB_CHECK_NEAR(ri.finished_at - ri.created_at, 3.0, 1e-9); /* a chain of three 1 s steps */
  /* Pod times follow the chain. */
  kb_sim_pod_info a, b;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, 0, "print-text"), &a) == 0);
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, 0, "print-text-3"), &b) == 0);
  KB_CHECK_NEAR(a.started_at, 0, 1e-9);
  KB_CHECK_NEAR(a.finished_at, 1, 1e-9);
  KB_CHECK_NEAR(b.started_at, 2, 1e-9);
  KB_CHECK_NEAR(b.finished_at, 3, 1e-9);
  KB_CHECK(b.phase == KB_SIM_POD_SUCCEEDED && b.exit_code == 0);
  KB_CHECK_STR(b.container_state, "terminated");
  KB_CHECK_STR(b.reason, "Completed");
  kb_sim_free(sim);
}

static void test_v2_node_selector(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v2ir_node_selector.yaml");
  kb_sim_step_info ex = step(sim, p, "comp");
  KB_CHECK(ex.n_node_selector == 1);
  KB_CHECK_STR(selector(ex, "cloud.google.com/gke-accelerator"), "nvidia-tesla-p4");
  KB_CHECK(ex.n_tolerations == 0);
  int r = st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e6);
  /* The only p4 pool is tainted and the sample has no toleration. */
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "comp"), &pi) == 0);
  KB_CHECK(pi.phase == KB_SIM_POD_PENDING && !pi.scheduled && pi.node == NULL);
  KB_CHECK_STR(pi.unschedulable_message,
               "0/4 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
               "3 node(s) didn't match Pod's node affinity/selector.");
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_RUNNING);
  kb_sim_free(sim);
}

static void test_v2_gpu_toleration(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v2ir_nvidia_gpu_scheduling_check.yaml");
  kb_sim_step_info ex = step(sim, p, "verify-gpu-scheduled");
  KB_CHECK(ex.gpu == 1 && ex.n_tolerations == 1);
  int r = st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_SUCCEEDED);
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "verify-gpu-scheduled"), &pi) == 0);
  /* Only the two GPU pools have GPUs; least loaded is k80 (index 2). */
  KB_CHECK(pi.node && (!strcmp(pi.node, "gke-kbrun-k80-0") || !strcmp(pi.node, "gke-kbrun-p4-0")));
  KB_CHECK(pi.gpu == 1);
  kb_sim_free(sim);
}

static void test_v2_machine_fields(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v2ir_machine_fields_pipeline_input.yaml");
  kb_sim_step_info ex = step(sim, p, "sum-numbers");
  /* Limits from pipeline inputs' defaults become the requests. */
  KB_CHECK(ex.cpu_m == 4000);
  KB_CHECK(ex.memory == 15000000000LL);
  KB_CHECK(ex.gpu == 1);
  KB_CHECK_NEAR(ex.cpu_demand, 4.0, 1e-9);
  /* Run parameters override the defaults. */
  size_t len;
  char *text = st_read_file("data/sim/v2ir_machine_fields_pipeline_input.yaml", &len);
  cJSON *params = cJSON_Parse("{\"cpu_limit\": \"2\", \"memory_limit\": \"1Gi\", \"accelerator_limit\": \"0\"}");
  kb_sim_error err = {0};
  int p2 = kb_sim_pipeline_load_yaml(sim, text, len, params, &err);
  KB_CHECK(p2 == 1);
  ex = step(sim, p2, "sum-numbers");
  KB_CHECK(ex.cpu_m == 2000 && ex.memory == 1LL << 30 && ex.gpu == 0);
  KB_CHECK(run_to_end(sim, p2).state == KB_SIM_RUN_SUCCEEDED);
  cJSON_Delete(params);
  free(text);
  kb_sim_free(sim);
}

static void test_v2_backend_argo(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v2_backend_compiled_argo_hello_world.yaml");
  KB_CHECK_STR(kb_sim_pipeline_format(sim, p), "v1");
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 3);
  kb_sim_step_info root = step(sim, p, "root-driver"), drv = step(sim, p, "echo-driver"),
                   ex = step(sim, p, "executor");
  KB_CHECK(root.kind == KB_SIM_STEP_DAG_DRIVER && drv.kind == KB_SIM_STEP_DRIVER);
  KB_CHECK(ex.kind == KB_SIM_STEP_EXECUTOR);
  KB_CHECK(drv.cpu_m == 100 && drv.memory == 64 << 20);
  KB_CHECK_NEAR(drv.cpu_demand, 0.5, 1e-9); /* limit 500m */
  KB_CHECK_STR(ex.node_suffix, ".root.echo.executor");
  /* `depends: echo-driver.Succeeded` */
  KB_CHECK(depends_on(sim, p, "executor", "echo-driver"));
  KB_CHECK(depends_on(sim, p, "echo-driver", "root-driver"));
  kb_sim_error err;
  kb_sim_run_opts o = {.workflow_name = "hello-world-abcde", .fail_prob = -1};
  int r = kb_sim_run_create(sim, p, &o, &err);
  kb_sim_run_until_idle(sim, 1e6);
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_SUCCEEDED);
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "executor"), &pi) == 0);
  /* Argo POD_NAMES=v2: <wf>-<template>-<fnv32a(node name)> */
  char want[128];
  uint32_t h = 2166136261u;
  for (const char *s = "hello-world-abcde.root.echo.executor"; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  snprintf(want, sizeof want, "hello-world-abcde-system-container-impl-%u", h);
  KB_CHECK_STR(pi.name, want);
  KB_CHECK_STR(pi.node_name, "hello-world-abcde.root.echo.executor");
  snprintf(want, sizeof want, "hello-world-abcde-%u", h);
  KB_CHECK_STR(pi.node_id, want);
  kb_sim_free(sim);
}

static void test_v1_basic(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v1_argo_basic_nodeselector.yaml");
  KB_CHECK_STR(kb_sim_pipeline_name(sim, p), "Save Most Frequent");
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 3);
  kb_sim_step_info gf = step(sim, p, "get-frequent"), save = step(sim, p, "save"),
                   ex = step(sim, p, "onExit");
  KB_CHECK(gf.memory == 200000000 && gf.cpu_m == 0);
  KB_CHECK(save.cpu_m == 500 && save.gpu == 2); /* limits only: requests = limits */
  KB_CHECK_STR(selector(save, "cloud.google.com/gke-accelerator"), "nvidia-tesla-k80");
  KB_CHECK(gf.n_node_selector == 0);
  KB_CHECK(depends_on(sim, p, "save", "get-frequent"));
  KB_CHECK(ex.exit_handler && !save.exit_handler && ex.n_deps == 0);
  KB_CHECK_STR(save.node_suffix, ".exit-handler-1.save");
  KB_CHECK_STR(ex.template_name, "exiting");
  int r = st_run(sim, p);
  kb_sim_run_until_idle(sim, 1e6);
  kb_sim_run_info ri = st_info(sim, r);
  KB_CHECK(ri.state == KB_SIM_RUN_SUCCEEDED);
  KB_CHECK_NEAR(ri.finished_at - ri.created_at, 3.0, 1e-9); /* 2 steps + exit handler */
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "save"), &pi) == 0);
  KB_CHECK_STR(pi.node, "gke-kbrun-k80-0");
  KB_CHECK(kb_sim_pod_get(sim, st_pod(sim, r, "onExit"), &pi) == 0);
  KB_CHECK_NEAR(pi.started_at, 2.0, 1e-9);
  /* The workflow status: root DAG, exit-handler DAG, 2 pods, onExit. */
  cJSON *st = kb_sim_run_workflow_status(sim, r);
  KB_CHECK_STR(cJSON_GetObjectItem(st, "phase")->valuestring, "Succeeded");
  KB_CHECK_STR(cJSON_GetObjectItem(st, "progress")->valuestring, "3/3");
  cJSON *nodes = cJSON_GetObjectItem(st, "nodes");
  KB_CHECK(cJSON_GetArraySize(nodes) == 5);
  cJSON *root = cJSON_GetObjectItem(nodes, ri.workflow);
  KB_CHECK(root && !strcmp(cJSON_GetObjectItem(root, "type")->valuestring, "DAG"));
  KB_CHECK(root && cJSON_GetArraySize(cJSON_GetObjectItem(root, "children")) == 1);
  KB_CHECK_STR(cJSON_GetObjectItem(st, "startedAt")->valuestring, "2024-01-01T00:00:00Z");
  KB_CHECK_STR(cJSON_GetObjectItem(st, "finishedAt")->valuestring, "2024-01-01T00:00:03Z");
  cJSON_Delete(st);
  kb_sim_free(sim);
}

static void test_v1_benchmark_10_nodes(void) {
  kb_sim *sim = st_sim("fast", cluster_yaml, 1);
  int p = st_load_file(sim, "data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml");
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 11);
  KB_CHECK(step(sim, p, "add-op").n_deps == 0);
  KB_CHECK(step(sim, p, "add-op-10").n_deps == 2);
  KB_CHECK(depends_on(sim, p, "add-op-11", "add-op-10") && depends_on(sim, p, "add-op-11", "add-op-8"));
  KB_CHECK(depends_on(sim, p, "add-op-9", "add-op-6"));
  KB_CHECK_STR(step(sim, p, "add-op-9").image, "tensorflow/tensorflow:1.13.2-py3");
  kb_sim_run_info ri = run_to_end(sim, p);
  KB_CHECK(ri.state == KB_SIM_RUN_SUCCEEDED);
  /* Longest chain: add-op, 2, 3, 6, 9, 10, 11 (or via 7, 8): 7 steps. */
  KB_CHECK_NEAR(ri.finished_at - ri.created_at, 7.0, 1e-9);
  kb_sim_free(sim);
}

static void test_duration_hints(void) {
  const char *wf =
      "apiVersion: argoproj.io/v1alpha1\n"
      "kind: Workflow\n"
      "metadata: {generateName: hints-}\n"
      "spec:\n"
      "  entrypoint: main\n"
      "  nodeSelector: {cloud.google.com/gke-nodepool: pool-1}\n"
      "  templates:\n"
      "  - name: main\n"
      "    steps:\n"
      "    - [{name: a, template: slow}, {name: b, template: plain}]\n"
      "    - [{name: c, template: plain}]\n"
      "  - name: slow\n"
      "    metadata: {annotations: {sim.kbrun.io/duration: \"fixed:30\", sim.kbrun.io/cpu: 250m}}\n"
      "    container: {image: alpine}\n"
      "  - name: plain\n"
      "    container: {image: alpine, resources: {requests: {cpu: \"2\", memory: 1Gi}}}\n";
  kb_sim *sim = st_sim("fast", "steps: {durations: {c: \"fixed:4\"}}\n", 1);
  int p = st_load_text(sim, wf);
  KB_CHECK(kb_sim_pipeline_steps(sim, p) == 3);
  kb_sim_step_info a = step(sim, p, "a"), c = step(sim, p, "c");
  KB_CHECK(a.duration.kind == KB_SIM_FIXED && a.duration.a == 30);
  KB_CHECK_NEAR(a.cpu_demand, 0.25, 1e-9);
  KB_CHECK(c.duration.a == 4 && c.cpu_m == 2000 && c.memory == 1LL << 30);
  KB_CHECK_STR(c.node_suffix, "[1].c");
  KB_CHECK_STR(selector(c, "cloud.google.com/gke-nodepool"), "pool-1");
  KB_CHECK(depends_on(sim, p, "c", "a") && depends_on(sim, p, "c", "b"));
  kb_sim_run_info ri = run_to_end(sim, p);
  KB_CHECK_NEAR(ri.finished_at - ri.created_at, 34.0, 1e-9);
  cJSON *st = kb_sim_run_workflow_status(sim, 0);
  cJSON *nodes = cJSON_GetObjectItem(st, "nodes");
  KB_CHECK(cJSON_GetArraySize(nodes) == 6); /* Steps, 2 groups, 3 pods */
  cJSON *root = cJSON_GetObjectItem(nodes, ri.workflow);
  KB_CHECK(root && !strcmp(cJSON_GetObjectItem(root, "type")->valuestring, "Steps"));
  cJSON_Delete(st);
  kb_sim_free(sim);
}

static void load_error(const char *yaml, const char *want) {
  kb_sim *sim = st_sim("fast", NULL, 1);
  kb_sim_error err = {0};
  int rc = kb_sim_pipeline_load_yaml(sim, yaml, strlen(yaml), NULL, &err);
  KB_CHECK(rc == KB_SIM_EPARSE);
  KB_CHECK_STR(err.message, want);
  KB_CHECK(kb_sim_pipeline_count(sim) == 0);
  kb_sim_free(sim);
}

static void test_pipeline_errors(void) {
  load_error("kind: Pod\n",
             "unknown template format: expected an Argo Workflow (apiVersion argoproj.io/*, kind "
             "Workflow) or a KFP v2 pipeline spec (pipelineInfo, root)");
  load_error("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec: {entrypoint: x, templates: []}\n",
             "template x not found");
  load_error("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec: {templates: []}\n",
             "workflow: spec.entrypoint and spec.templates are required");
  load_error("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec:\n  entrypoint: m\n  templates:\n"
             "  - {name: m, dag: {tasks: [{name: a, template: c, dependencies: [zz]}]}}\n"
             "  - {name: c, container: {image: x}}\n",
             "template m: task a depends on unknown task zz");
  load_error("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec:\n  entrypoint: m\n  templates:\n"
             "  - {name: m, dag: {tasks: [{name: a, template: m}]}}\n",
             "templates nest deeper than 32 (recursive template m?)");
  load_error("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec:\n  entrypoint: m\n  templates:\n"
             "  - {name: m, resource: {action: create}}\n",
             "template m: unsupported template type (container, script, suspend, dag and steps are modelled)");
  load_error("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec:\n  entrypoint: m\n  templates:\n"
             "  - name: m\n    metadata: {annotations: {sim.kbrun.io/duration: \"slow\"}}\n"
             "    container: {image: x}\n",
             "m: annotation sim.kbrun.io/duration: distribution \"slow\": fixed takes 1 number");
  load_error("pipelineInfo: {name: p}\nroot: {dag: {tasks: {a: {componentRef: {name: nope}}}}}\n",
             "task a: component nope not found");
  load_error("a: [\n", "pipeline YAML: line 2 column 1: did not find expected node content");
}

int main(void) {
  KB_RUN(test_v2_hello_world);
  KB_RUN(test_v2_with_after);
  KB_RUN(test_v2_node_selector);
  KB_RUN(test_v2_gpu_toleration);
  KB_RUN(test_v2_machine_fields);
  KB_RUN(test_v2_backend_argo);
  KB_RUN(test_v1_basic);
  KB_RUN(test_v1_benchmark_10_nodes);
  KB_RUN(test_duration_hints);
  KB_RUN(test_pipeline_errors);
  return kb_test_report();
}
