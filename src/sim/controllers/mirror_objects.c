/* The Kubernetes objects the mirror writes for model state: Nodes as a
 * kubelet registers them, Pod status as a kubelet reports it, Argo pods
 * and a Workflow spec rebuilt from a pipeline's steps. Pure functions of
 * the model's info structs. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sim_glue.h"

void kb_glue_cpu_str(int64_t m, char out[32]) {
  if (m % 1000 == 0) snprintf(out, 32, "%" PRId64, m / 1000);
  else snprintf(out, 32, "%" PRId64 "m", m);
}

void kb_glue_mem_str(int64_t bytes, char out[32]) {
  if (bytes % (1024 * 1024) == 0) snprintf(out, 32, "%" PRId64 "Mi", bytes / (1024 * 1024));
  else if (bytes % 1024 == 0) snprintf(out, 32, "%" PRId64 "Ki", bytes / 1024);
  else snprintf(out, 32, "%" PRId64, bytes);
}

static void add_time(sim_glue *g, cJSON *o, const char *key, double t) {
  char ts[32];
  kb_glue_time(g, t, ts);
  cJSON_AddStringToObject(o, key, ts);
}

/* A stable fake hex id (container ids, image digests, machine ids). */
static void hex_id(const char *a, uint64_t b, char *out, size_t n) {
  uint64_t h = 1469598103934665603ull ^ b;
  size_t i = 0;
  for (const char *p = a; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  for (; i + 1 < n; i++) {
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    out[i] = "0123456789abcdef"[h >> 60];
  }
  out[i] = 0;
}

/* ---- nodes ---- */

static cJSON *resources_of(const kb_sim_node_info *ni) {
  char cpu[32], mem[32], pods[32], gpu[32];
  kb_glue_cpu_str(ni->cpu_m, cpu);
  kb_glue_mem_str(ni->memory, mem);
  snprintf(pods, sizeof pods, "%d", ni->max_pods);
  snprintf(gpu, sizeof gpu, "%d", ni->gpu);
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "cpu", cpu);
  cJSON_AddStringToObject(r, "ephemeral-storage", "98831908Ki");
  cJSON_AddStringToObject(r, "memory", mem);
  if (ni->gpu) cJSON_AddStringToObject(r, "nvidia.com/gpu", gpu);
  cJSON_AddStringToObject(r, "pods", pods);
  return r;
}

static void node_condition(sim_glue *g, cJSON *arr, const char *type, const char *status,
                           const char *reason, const char *msg, double since) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", type);
  cJSON_AddStringToObject(c, "status", status);
  add_time(g, c, "lastHeartbeatTime", kb_sim_now(kb_glue_sim(g)));
  add_time(g, c, "lastTransitionTime", since);
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", msg);
  cJSON_AddItemToArray(arr, c);
}

cJSON *kb_glue_node_object(sim_glue *g, const kb_sim_node_info *ni) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "apiVersion", "v1");
  cJSON_AddStringToObject(o, "kind", "Node");
  cJSON *md = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddStringToObject(md, "name", ni->name);
  cJSON *labels = cJSON_AddObjectToObject(md, "labels");
  cJSON_AddStringToObject(labels, "beta.kubernetes.io/arch", "amd64");
  cJSON_AddStringToObject(labels, "beta.kubernetes.io/os", "linux");
  cJSON_AddStringToObject(labels, "kubernetes.io/arch", "amd64");
  cJSON_AddStringToObject(labels, "kubernetes.io/os", "linux");
  for (size_t i = 0; i < ni->n_labels; i++) {
    cJSON_DeleteItemFromObjectCaseSensitive(labels, ni->labels[i].key);
    cJSON_AddStringToObject(labels, ni->labels[i].key, ni->labels[i].value);
  }
  cJSON *ann = cJSON_AddObjectToObject(md, "annotations");
  cJSON_AddStringToObject(ann, "node.alpha.kubernetes.io/ttl", "0");
  cJSON *spec = cJSON_AddObjectToObject(o, "spec");
  char cidr[32];
  snprintf(cidr, sizeof cidr, "10.%d.%d.0/24", 64 + ni->id / 256, ni->id % 256);
  cJSON_AddStringToObject(spec, "podCIDR", cidr);
  if (ni->n_taints || !ni->ready) {
    cJSON *taints = cJSON_AddArrayToObject(spec, "taints");
    for (size_t i = 0; i < ni->n_taints; i++) {
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "key", ni->taints[i].key);
      if (ni->taints[i].value && ni->taints[i].value[0])
        cJSON_AddStringToObject(t, "value", ni->taints[i].value);
      cJSON_AddStringToObject(t, "effect", ni->taints[i].effect);
      cJSON_AddItemToArray(taints, t);
    }
    if (!ni->ready) { /* what the node lifecycle controller adds */
      static const char *effects[] = {"NoSchedule", "NoExecute"};
      for (int i = 0; i < 2; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "key", "node.kubernetes.io/unreachable");
        cJSON_AddStringToObject(t, "effect", effects[i]);
        cJSON_AddItemToArray(taints, t);
      }
    }
  }
  cJSON *st = cJSON_AddObjectToObject(o, "status");
  cJSON_AddItemToObject(st, "capacity", resources_of(ni));
  cJSON_AddItemToObject(st, "allocatable", resources_of(ni));
  cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
  node_condition(g, conds, "MemoryPressure", "False", "KubeletHasSufficientMemory",
                 "kubelet has sufficient memory available", ni->created_at);
  node_condition(g, conds, "DiskPressure", "False", "KubeletHasNoDiskPressure",
                 "kubelet has no disk pressure", ni->created_at);
  node_condition(g, conds, "PIDPressure", "False", "KubeletHasSufficientPID",
                 "kubelet has sufficient PID available", ni->created_at);
  if (ni->ready)
    node_condition(g, conds, "Ready", "True", "KubeletReady",
                   "kubelet is posting ready status", ni->created_at);
  else
    node_condition(g, conds, "Ready", "False", "NodeStatusUnknown",
                   "Kubelet stopped posting node status.", kb_sim_now(kb_glue_sim(g)));
  cJSON *addrs = cJSON_AddArrayToObject(st, "addresses");
  char ip[32];
  snprintf(ip, sizeof ip, "10.128.%d.%d", ni->id / 250, 2 + ni->id % 250);
  const char *types[] = {"InternalIP", "Hostname"}, *vals[] = {ip, ni->name};
  for (int i = 0; i < 2; i++) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "type", types[i]);
    cJSON_AddStringToObject(a, "address", vals[i]);
    cJSON_AddItemToArray(addrs, a);
  }
  cJSON *info = cJSON_AddObjectToObject(st, "nodeInfo");
  char id[40];
  hex_id(ni->name, 1, id, 33);
  cJSON_AddStringToObject(info, "machineID", id);
  hex_id(ni->name, 2, id, 33);
  cJSON_AddStringToObject(info, "systemUUID", id);
  hex_id(ni->name, 3, id, 33);
  cJSON_AddStringToObject(info, "bootID", id);
  cJSON_AddStringToObject(info, "kernelVersion", "6.1.100+");
  cJSON_AddStringToObject(info, "osImage", "Container-Optimized OS from Google");
  cJSON_AddStringToObject(info, "containerRuntimeVersion", "containerd://1.7.24");
  cJSON_AddStringToObject(info, "kubeletVersion", "v1.32.0");
  cJSON_AddStringToObject(info, "kubeProxyVersion", "v1.32.0");
  cJSON_AddStringToObject(info, "operatingSystem", "linux");
  cJSON_AddStringToObject(info, "architecture", "amd64");
  return o;
}

/* ---- pods ---- */

static void pod_condition(sim_glue *g, cJSON *arr, const char *type, int ok, double since,
                          const char *reason, const char *msg) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", type);
  cJSON_AddStringToObject(c, "status", ok ? "True" : "False");
  cJSON_AddNullToObject(c, "lastProbeTime");
  add_time(g, c, "lastTransitionTime", since);
  if (reason) cJSON_AddStringToObject(c, "reason", reason);
  if (msg) cJSON_AddStringToObject(c, "message", msg);
  cJSON_AddItemToArray(arr, c);
}

static cJSON *container_status(sim_glue *g, const kb_sim_pod_info *pi, const char *name,
                               const char *image, int main) {
  cJSON *c = cJSON_CreateObject();
  int started = pi->started_at >= 0;
  int running = !strcmp(pi->container_state, "running");
  int done = !strcmp(pi->container_state, "terminated");
  cJSON_AddStringToObject(c, "name", name);
  cJSON_AddStringToObject(c, "image", image);
  char id[80], buf[160];
  if (started) {
    hex_id(image, 7, id, 65);
    snprintf(buf, sizeof buf, "%s%s@sha256:%s", strchr(image, '/') ? "" : "docker.io/library/",
             image, id);
    cJSON_AddStringToObject(c, "imageID", buf);
    hex_id(pi->name, (uint64_t)main + 11, id, 65);
    snprintf(buf, sizeof buf, "containerd://%s", id);
    cJSON_AddStringToObject(c, "containerID", buf);
  } else {
    cJSON_AddStringToObject(c, "imageID", "");
  }
  cJSON_AddBoolToObject(c, "ready", running);
  cJSON_AddBoolToObject(c, "started", running);
  cJSON_AddNumberToObject(c, "restartCount", 0);
  cJSON *state = cJSON_AddObjectToObject(c, "state");
  if (running) {
    add_time(g, cJSON_AddObjectToObject(state, "running"), "startedAt", pi->started_at);
  } else if (done) {
    cJSON *t = cJSON_AddObjectToObject(state, "terminated");
    int failed = main && pi->exit_code != 0;
    cJSON_AddNumberToObject(t, "exitCode", main ? pi->exit_code : 0);
    cJSON_AddStringToObject(t, "reason", failed && pi->reason ? pi->reason : "Completed");
    if (failed && pi->message && pi->message[0]) cJSON_AddStringToObject(t, "message", pi->message);
    if (started) add_time(g, t, "startedAt", pi->started_at);
    add_time(g, t, "finishedAt", pi->finished_at >= 0 ? pi->finished_at : kb_sim_now(kb_glue_sim(g)));
    if (started) cJSON_AddStringToObject(t, "containerID", buf);
  } else {
    cJSON_AddStringToObject(cJSON_AddObjectToObject(state, "waiting"), "reason",
                            "ContainerCreating");
  }
  return c;
}

/* "containers with unready status: [wait main]", as the kubelet words it. */
static void unready_names(const cJSON *containers, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "containers with unready status: [");
  const cJSON *c;
  int first = 1;
  cJSON_ArrayForEach(c, containers) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
    if (!name || n + strlen(name) + 3 >= cap) continue;
    n += (size_t)snprintf(out + n, cap - n, "%s%s", first ? "" : " ", name);
    first = 0;
  }
  if (first && n + 6 < cap) n += (size_t)snprintf(out + n, cap - n, "main");
  if (n + 2 <= cap) snprintf(out + n, cap - n, "]");
}

cJSON *kb_glue_pod_status(sim_glue *g, const kb_sim_pod_info *pi, const cJSON *containers) {
  cJSON *st = cJSON_CreateObject();
  cJSON_AddStringToObject(st, "phase", kb_sim_pod_phase_name(pi->phase));
  int running = !strcmp(pi->container_state, "running");
  int done = !strcmp(pi->container_state, "terminated");
  cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
  if (pi->scheduled) {
    double now = kb_sim_now(kb_glue_sim(g));
    double since = running ? pi->started_at : done ? (pi->finished_at >= 0 ? pi->finished_at : now)
                                                   : pi->scheduled_at;
    const char *reason = running ? NULL : done ? "PodCompleted" : "ContainersNotReady";
    char unready[512];
    unready_names(containers, unready, sizeof unready);
    const char *msg = running || done ? NULL : unready;
    pod_condition(g, conds, "PodReadyToStartContainers", pi->started_at >= 0 && !done,
                  pi->started_at >= 0 ? pi->started_at : pi->scheduled_at, NULL, NULL);
    pod_condition(g, conds, "Initialized", 1, pi->scheduled_at, done ? "PodCompleted" : NULL, NULL);
    pod_condition(g, conds, "Ready", running, since, reason, msg);
    pod_condition(g, conds, "ContainersReady", running, since, reason, msg);
    pod_condition(g, conds, "PodScheduled", 1, pi->scheduled_at, NULL, NULL);
  } else {
    pod_condition(g, conds, "PodScheduled", 0, pi->created_at, "Unschedulable",
                  pi->unschedulable_message);
  }
  if (pi->reason && pi->phase == KB_SIM_POD_FAILED && !strcmp(pi->reason, "NodeLost")) {
    cJSON_AddStringToObject(st, "reason", "NodeLost");
    cJSON_AddStringToObject(st, "message", pi->message ? pi->message : "node lost");
  }
  if (pi->node) {
    int nid = kb_sim_node_find(kb_glue_sim(g), pi->node);
    char ip[32];
    snprintf(ip, sizeof ip, "10.128.%d.%d", nid / 250, 2 + nid % 250);
    cJSON_AddStringToObject(st, "hostIP", ip);
    snprintf(ip, sizeof ip, "10.%d.%d.%d", 64 + nid / 256, nid % 256, 2 + pi->id % 250);
    cJSON_AddStringToObject(st, "podIP", ip);
    cJSON *ips = cJSON_AddArrayToObject(st, "podIPs");
    cJSON *one = cJSON_CreateObject();
    cJSON_AddStringToObject(one, "ip", ip);
    cJSON_AddItemToArray(ips, one);
    add_time(g, st, "startTime", pi->scheduled_at);
    cJSON *cs = cJSON_AddArrayToObject(st, "containerStatuses");
    const cJSON *c;
    cJSON_ArrayForEach(c, containers) {
      const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
      const char *image = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "image"));
      if (!name || !image) continue;
      int is_main = strcmp(name, "wait") != 0;
      cJSON_AddItemToArray(cs, container_status(g, pi, name, image, is_main));
    }
  }
  cJSON_AddStringToObject(st, "qosClass", pi->cpu_m || pi->memory ? "Burstable" : "BestEffort");
  return st;
}

cJSON *kb_glue_step_resources(const kb_sim_step_info *si) {
  cJSON *r = cJSON_CreateObject();
  if (!si->cpu_m && !si->memory && !si->gpu) return r;
  cJSON *req = cJSON_AddObjectToObject(r, "requests");
  char q[32];
  if (si->cpu_m) {
    kb_glue_cpu_str(si->cpu_m, q);
    cJSON_AddStringToObject(req, "cpu", q);
  }
  if (si->memory) {
    kb_glue_mem_str(si->memory, q);
    cJSON_AddStringToObject(req, "memory", q);
  }
  if (si->gpu) {
    snprintf(q, sizeof q, "%d", si->gpu);
    cJSON_AddStringToObject(req, "nvidia.com/gpu", q);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "limits"), "nvidia.com/gpu", q);
  }
  return r;
}

static cJSON *selector_of(const kb_sim_step_info *si) {
  cJSON *s = cJSON_CreateObject();
  for (size_t i = 0; i < si->n_node_selector; i++)
    cJSON_AddStringToObject(s, si->node_selector[i].key, si->node_selector[i].value);
  return s;
}

#define ARGOEXEC "quay.io/argoproj/argoexec:v3.4.17"

cJSON *kb_argo_server_pod(sim_glue *g, const kb_sim_pod_info *pi, const char *wf_uid) {
  kb_sim *sim = kb_glue_sim(g);
  kb_sim_run_info ri;
  kb_sim_step_info si;
  if (kb_sim_run_get(sim, pi->run, &ri) < 0 || kb_sim_pipeline_step(sim, ri.pipeline, (size_t)pi->step, &si) < 0)
    return NULL;
  cJSON *o = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddStringToObject(md, "name", pi->name);
  cJSON_AddStringToObject(md, "namespace", pi->namespace_);
  cJSON *labels = cJSON_AddObjectToObject(md, "labels");
  cJSON_AddStringToObject(labels, "workflows.argoproj.io/completed", "false");
  cJSON_AddStringToObject(labels, "workflows.argoproj.io/workflow", pi->workflow);
  cJSON *ann = cJSON_AddObjectToObject(md, "annotations");
  cJSON_AddStringToObject(ann, "kubectl.kubernetes.io/default-container", "main");
  cJSON_AddStringToObject(ann, "workflows.argoproj.io/node-id", pi->node_id);
  cJSON_AddStringToObject(ann, "workflows.argoproj.io/node-name", pi->node_name);
  if (wf_uid) {
    cJSON *ref = cJSON_CreateObject();
    cJSON_AddStringToObject(ref, "apiVersion", "argoproj.io/v1alpha1");
    cJSON_AddStringToObject(ref, "kind", "Workflow");
    cJSON_AddStringToObject(ref, "name", pi->workflow);
    cJSON_AddStringToObject(ref, "uid", wf_uid);
    cJSON_AddBoolToObject(ref, "controller", 1);
    cJSON_AddBoolToObject(ref, "blockOwnerDeletion", 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"), ref);
  }
  cJSON *spec = cJSON_AddObjectToObject(o, "spec");
  cJSON *cs = cJSON_AddArrayToObject(spec, "containers");
  cJSON *wait = cJSON_CreateObject();
  cJSON_AddStringToObject(wait, "name", "wait");
  cJSON_AddStringToObject(wait, "image", ARGOEXEC);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(wait, "command"), cJSON_CreateString("argoexec"));
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(wait, "command"), cJSON_CreateString("wait"));
  cJSON_AddItemToArray(cs, wait);
  cJSON *main = cJSON_CreateObject();
  cJSON_AddStringToObject(main, "name", "main");
  cJSON_AddStringToObject(main, "image", si.image ? si.image : "alpine:3.19");
  cJSON_AddItemToObject(main, "resources", kb_glue_step_resources(&si));
  cJSON_AddItemToArray(cs, main);
  if (si.n_node_selector) cJSON_AddItemToObject(spec, "nodeSelector", selector_of(&si));
  cJSON_AddStringToObject(spec, "restartPolicy", "Never");
  cJSON_AddStringToObject(spec, "serviceAccountName", "default");
  return o;
}

cJSON *kb_glue_workflow_spec(sim_glue *g, int pipeline) {
  kb_sim *sim = kb_glue_sim(g);
  cJSON *spec = cJSON_CreateObject();
  cJSON_AddStringToObject(spec, "entrypoint", "main");
  cJSON_AddStringToObject(spec, "serviceAccountName", "pipeline-runner");
  cJSON *templates = cJSON_AddArrayToObject(spec, "templates");
  cJSON *dag = cJSON_CreateObject();
  cJSON_AddStringToObject(dag, "name", "main");
  cJSON *tasks = cJSON_AddArrayToObject(cJSON_AddObjectToObject(dag, "dag"), "tasks");
  cJSON_AddItemToArray(templates, dag);
  size_t n = kb_sim_pipeline_steps(sim, pipeline);
  for (size_t i = 0; i < n; i++) {
    kb_sim_step_info si;
    if (kb_sim_pipeline_step(sim, pipeline, i, &si) < 0) continue;
    if (si.kind != KB_SIM_STEP_EXECUTOR) continue;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", si.name);
    cJSON_AddStringToObject(t, "template", si.template_name);
    if (si.n_deps) {
      cJSON *deps = cJSON_AddArrayToObject(t, "dependencies");
      for (size_t d = 0; d < si.n_deps; d++) {
        kb_sim_step_info di;
        if (kb_sim_pipeline_step(sim, pipeline, si.deps[d], &di) == 0 && di.kind == KB_SIM_STEP_EXECUTOR)
          cJSON_AddItemToArray(deps, cJSON_CreateString(di.name));
      }
    }
    cJSON_AddItemToArray(tasks, t);
    int seen = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, templates) seen |= !strcmp(cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring, si.template_name);
    if (seen) continue;
    cJSON *tp = cJSON_CreateObject();
    cJSON_AddStringToObject(tp, "name", si.template_name);
    cJSON *c = cJSON_AddObjectToObject(tp, "container");
    cJSON_AddStringToObject(c, "image", si.image ? si.image : "alpine:3.19");
    cJSON_AddItemToObject(c, "resources", kb_glue_step_resources(&si));
    if (si.n_node_selector) cJSON_AddItemToObject(tp, "nodeSelector", selector_of(&si));
    cJSON_AddItemToArray(templates, tp);
  }
  return spec;
}

cJSON *kb_glue_template_from_pod(const char *name, const cJSON *pod_template,
                              const cJSON *annotations) {
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod_template, "spec");
  const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(spec, "containers"), 0);
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "name", name);
  cJSON *md = cJSON_AddObjectToObject(t, "metadata");
  const cJSON *tann = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(pod_template, "metadata"), "annotations");
  cJSON *ann = cJSON_IsObject(tann) ? cJSON_Duplicate(tann, 1) : cJSON_CreateObject();
  const cJSON *a;
  cJSON_ArrayForEach(a, annotations) {
    if (a->string && !strncmp(a->string, "sim.kbrun.io/", 13) && cJSON_IsString(a) &&
        !cJSON_GetObjectItemCaseSensitive(ann, a->string))
      cJSON_AddStringToObject(ann, a->string, a->valuestring);
  }
  cJSON_AddItemToObject(md, "annotations", ann);
  cJSON *c = c0 ? cJSON_Duplicate(c0, 1) : cJSON_CreateObject();
  if (!cJSON_GetObjectItemCaseSensitive(c, "image")) cJSON_AddStringToObject(c, "image", "busybox");
  cJSON_AddItemToObject(t, "container", c);
  const char *keys[] = {"nodeSelector", "tolerations", "affinity"};
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, keys[i]);
    if (v) cJSON_AddItemToObject(t, keys[i], cJSON_Duplicate(v, 1));
  }
  return t;
}

