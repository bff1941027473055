/* The Kubeflow training operator (kubeflow.org/v1 TFJob, PyTorchJob,
 * MPIJob): every replica is one step of a model run whose steps all start
 * together, so the job runs as long as its slowest replica and fails when
 * one fails (the default success policy). Pods are named as the operator
 * names them: <job>-<replica type>-<index> (tf-cnn-worker-0), and for an
 * MPIJob <job>-launcher and <job>-worker-<i>; labels
 * training.kubeflow.org/{job-name,replica-type,replica-index,operator-name}.
 *
 * Status follows the operator: conditions Created, Running, then
 * Succeeded or Failed (type, status "True", reason TFJobSucceeded ...,
 * message, lastUpdateTime, lastTransitionTime; Running turns "False" at
 * the end), replicaStatuses {Type: {active, succeeded, failed}},
 * startTime, and completionTime, which the operator also sets when the
 * job failed.
 *
 * A job can be told to fail: annotation sim.kbrun.io/fail: "true" (every
 * replica fails at the end of its work) or sim.kbrun.io/fail-probability
 * on a replica's pod template. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"
#include "kb/log.h"
#include "sim_glue.h"

#define MAX_TYPES 8

typedef struct tkind {
  const char *resource, *kind, *specs_key, *container, *operator_name;
} tkind;

static const tkind kinds[] = {
    {"tfjobs", "TFJob", "tfReplicaSpecs", "tensorflow", "tfjob-controller"},
    {"pytorchjobs", "PyTorchJob", "pytorchReplicaSpecs", "pytorch", "pytorchjob-controller"},
    {"mpijobs", "MPIJob", "mpiReplicaSpecs", "mpi", "mpijob-controller"},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

typedef struct treplica { /* one pod */
  int type;               /* index into job->types */
  int index;
  char *pod, *container;
} treplica;

typedef struct tjob {
  struct ctl_train *ctl;
  const tkind *k;
  const kb_k8s_res *res;
  char *ns, *name, *uid;
  char *types[MAX_TYPES]; /* "Worker" as in the spec */
  size_t n_types;
  cJSON *templates[MAX_TYPES];
  treplica *reps; /* by step index */
  size_t n_reps;
  int run;
  double created, running_at, end;
  int outcome; /* 0, 1 succeeded, -1 failed */
  int reported; /* the outcome's Event was recorded */
  struct tjob *next;
} tjob;

typedef struct ctl_train {
  glue_ctl base;
  sim_glue *g;
  kb_k8s_watch *w[N_KINDS];
  tjob *jobs;
} ctl_train;

static void lower(const char *s, char *out, size_t n) {
  size_t i = 0;
  for (; s[i] && i + 1 < n; i++) out[i] = (char)tolower((unsigned char)s[i]);
  out[i] = 0;
}

/* ---- pods ---- */

static cJSON *train_pod(void *ud, int run, int step) {
  (void)run;
  tjob *j = ud;
  if (step < 0 || (size_t)step >= j->n_reps) return NULL;
  treplica *r = &j->reps[step];
  const cJSON *tmpl = j->templates[r->type];
  cJSON *o = cJSON_CreateObject();
  const cJSON *tmd = cJSON_GetObjectItemCaseSensitive(tmpl, "metadata");
  cJSON *md = tmd ? cJSON_Duplicate(tmd, 1) : cJSON_CreateObject();
  cJSON_AddItemToObject(o, "metadata", md);
  cJSON_DeleteItemFromObjectCaseSensitive(md, "name");
  cJSON_AddStringToObject(md, "name", r->pod);
  cJSON_DeleteItemFromObjectCaseSensitive(md, "namespace");
  cJSON_AddStringToObject(md, "namespace", j->ns);
  cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
  if (!cJSON_IsObject(labels)) {
    cJSON_DeleteItemFromObjectCaseSensitive(md, "labels");
    labels = cJSON_AddObjectToObject(md, "labels");
  }
  char type[64], index[16];
  lower(j->types[r->type], type, sizeof type);
  snprintf(index, sizeof index, "%d", r->index);
  cJSON_AddStringToObject(labels, "training.kubeflow.org/job-name", j->name);
  cJSON_AddStringToObject(labels, "training.kubeflow.org/operator-name", j->k->operator_name);
  cJSON_AddStringToObject(labels, "training.kubeflow.org/replica-type", type);
  cJSON_AddStringToObject(labels, "training.kubeflow.org/replica-index", index);
  if (!strcmp(type, "chief") || !strcmp(type, "master") || !strcmp(type, "launcher"))
    cJSON_AddStringToObject(labels, "training.kubeflow.org/job-role", "master");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"),
                       kb_ctl_owner_ref("kubeflow.org/v1", j->k->kind, j->name, j->uid));
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(tmpl, "spec");
  cJSON *ps = spec ? cJSON_Duplicate(spec, 1) : cJSON_CreateObject();
  cJSON_DeleteItemFromObjectCaseSensitive(ps, "restartPolicy");
  cJSON_AddStringToObject(ps, "restartPolicy", "Never");
  cJSON_AddItemToObject(o, "spec", ps);
  return o;
}

static const char *train_container(void *ud, int run, int step) {
  (void)run;
  tjob *j = ud;
  return step >= 0 && (size_t)step < j->n_reps ? j->reps[step].container : NULL;
}

static void train_changed(void *ud, int run);
static const glue_owner_ops train_ops = {train_pod, train_changed, train_container};

/* ---- status ---- */

static void condition(tjob *j, cJSON *arr, const char *type, const char *status,
                      const char *what, double t) {
  sim_glue *g = j->ctl->g;
  char ts[32], reason[96], msg[512];
  kb_glue_time(g, t, ts);
  snprintf(reason, sizeof reason, "%s%s", j->k->kind, what);
  if (!strcmp(type, "Created")) snprintf(msg, sizeof msg, "%s %s is created.", j->k->kind, j->name);
  else if (!strcmp(type, "Running"))
    snprintf(msg, sizeof msg, "%s %s/%s is running.", j->k->kind, j->ns, j->name);
  else if (!strcmp(type, "Succeeded"))
    snprintf(msg, sizeof msg, "%s %s/%s successfully completed.", j->k->kind, j->ns, j->name);
  else
    msg[0] = 0;
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", type);
  cJSON_AddStringToObject(c, "status", status);
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", msg);
  cJSON_AddStringToObject(c, "lastUpdateTime", ts);
  cJSON_AddStringToObject(c, "lastTransitionTime", ts);
  cJSON_AddItemToArray(arr, c);
}

static void write_status(tjob *j) {
  sim_glue *g = j->ctl->g;
  kb_sim *sim = kb_glue_sim(g);
  int active[MAX_TYPES] = {0}, ok[MAX_TYPES] = {0}, bad[MAX_TYPES] = {0};
  const int *pods;
  size_t n = kb_glue_run_pods(g, j->run, &pods);
  double first_start = -1;
  for (size_t i = 0; i < n; i++) {
    kb_sim_pod_info pi;
    if (kb_sim_pod_get(sim, pods[i], &pi) < 0 || pi.step < 0 || (size_t)pi.step >= j->n_reps) continue;
    int t = j->reps[pi.step].type;
    if (pi.phase == KB_SIM_POD_SUCCEEDED) ok[t]++;
    else if (pi.phase == KB_SIM_POD_FAILED) bad[t]++;
    else active[t]++;
    /* the first start of any replica, as the model recorded it: a status
     * written only once the pods are done still has its Running condition */
    if (pi.started_at >= 0 && (first_start < 0 || pi.started_at < first_start))
      first_start = pi.started_at;
  }
  kb_sim_run_info ri;
  if (kb_sim_run_get(sim, j->run, &ri) == 0 && !j->outcome) {
    if (!strcmp(ri.wf_phase, "Succeeded")) j->outcome = 1;
    else if (!strcmp(ri.wf_phase, "Failed") || !strcmp(ri.wf_phase, "Error")) j->outcome = -1;
    if (j->outcome) j->end = kb_sim_now(sim);
  }
  if (first_start >= 0 && j->running_at < 0) j->running_at = first_start;
  cJSON *st = cJSON_CreateObject();
  cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
  condition(j, conds, "Created", "True", "Created", j->created);
  if (j->running_at >= 0)
    condition(j, conds, "Running", j->outcome ? "False" : "True", "Running",
              j->outcome ? j->end : j->running_at);
  if (j->outcome > 0) condition(j, conds, "Succeeded", "True", "Succeeded", j->end);
  if (j->outcome < 0) {
    condition(j, conds, "Failed", "True", "Failed", j->end);
    cJSON *msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(conds, cJSON_GetArraySize(conds) - 1), "message");
    char text[512];
    int failed_type = 0;
    for (size_t t = 0; t < j->n_types; t++)
      if (bad[t]) failed_type = (int)t;
    snprintf(text, sizeof text, "%s %s/%s has failed because %d %s replica(s) failed.",
             j->k->kind, j->ns, j->name, bad[failed_type] ? bad[failed_type] : 1,
             j->types[failed_type]);
    cJSON_SetValuestring(msg, text);
  }
  cJSON *rs = cJSON_AddObjectToObject(st, "replicaStatuses");
  for (size_t t = 0; t < j->n_types; t++) {
    cJSON *r = cJSON_AddObjectToObject(rs, j->types[t]);
    if (active[t]) cJSON_AddNumberToObject(r, "active", active[t]);
    if (ok[t]) cJSON_AddNumberToObject(r, "succeeded", ok[t]);
    if (bad[t]) cJSON_AddNumberToObject(r, "failed", bad[t]);
  }
  char ts[32];
  kb_glue_time(g, j->created, ts);
  cJSON_AddStringToObject(st, "startTime", ts);
  if (j->outcome) { /* the operator sets it on failure too */
    kb_glue_time(g, j->end, ts);
    cJSON_AddStringToObject(st, "completionTime", ts);
  }
  kb_glue_time(g, kb_sim_now(sim), ts);
  cJSON_AddStringToObject(st, "lastReconcileTime", ts);
  if (j->outcome && !j->reported) {
    j->reported = 1;
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(conds, cJSON_GetArraySize(conds) - 1), "message");
    kb_glue_event(g, kb_k8s_peek(kb_glue_store(g), j->res, j->ns, j->name),
               j->outcome > 0 ? "Normal" : "Warning",
               cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(conds, cJSON_GetArraySize(conds) - 1), "reason")),
               j->k->operator_name, "%s", cJSON_GetStringValue(msg));
  }
  kb_glue_put_status(g, j->res, j->ns, j->name, st);
  cJSON_Delete(st);
}

static void train_changed(void *ud, int run) {
  (void)run;
  write_status(ud);
}

/* ---- the hook ---- */

static void tjob_free(tjob *j) {
  for (size_t i = 0; i < j->n_reps; i++) {
    free(j->reps[i].pod);
    free(j->reps[i].container);
  }
  free(j->reps);
  for (size_t t = 0; t < j->n_types; t++) {
    free(j->types[t]);
    cJSON_Delete(j->templates[t]);
  }
  free(j->ns);
  free(j->name);
  free(j->uid);
  free(j);
}

/* The pipeline: one template per replica type, one DAG task per replica. */
static cJSON *build_workflow(tjob *j, const cJSON *specs, const cJSON *annotations) {
  cJSON *wf = cJSON_CreateObject();
  cJSON_AddStringToObject(wf, "apiVersion", "argoproj.io/v1alpha1");
  cJSON_AddStringToObject(wf, "kind", "Workflow");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(wf, "metadata"), "name", j->name);
  cJSON *spec = cJSON_AddObjectToObject(wf, "spec");
  cJSON_AddStringToObject(spec, "entrypoint", "replicas");
  cJSON *templates = cJSON_AddArrayToObject(spec, "templates");
  cJSON *dag = cJSON_CreateObject();
  cJSON_AddStringToObject(dag, "name", "replicas");
  cJSON *tasks = cJSON_AddArrayToObject(cJSON_AddObjectToObject(dag, "dag"), "tasks");
  cJSON_AddItemToArray(templates, dag);
  const cJSON *rs;
  cJSON_ArrayForEach(rs, specs) {
    if (j->n_types == MAX_TYPES || !rs->string) break;
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(rs, "template");
    const cJSON *nrep = cJSON_GetObjectItemCaseSensitive(rs, "replicas");
    int n = cJSON_IsNumber(nrep) ? nrep->valueint : 1;
    size_t t = j->n_types++;
    j->types[t] = strdup(rs->string);
    j->templates[t] = cJSON_Duplicate(tmpl, 1);
    char type[64];
    lower(rs->string, type, sizeof type);
    cJSON_AddItemToArray(templates, kb_glue_template_from_pod(type, tmpl, annotations));
    for (int i = 0; i < n && i < 1000; i++) {
      char task[96];
      snprintf(task, sizeof task, "%s-%d", type, i);
      cJSON *tk = cJSON_CreateObject();
      cJSON_AddStringToObject(tk, "name", task);
      cJSON_AddStringToObject(tk, "template", type);
      cJSON_AddItemToArray(tasks, tk);
    }
  }
  return wf;
}

/* Step index -> replica, from the expanded pipeline's task names. */
static int map_replicas(tjob *j, int pipeline) {
  kb_sim *sim = kb_glue_sim(j->ctl->g);
  size_t n = kb_sim_pipeline_steps(sim, pipeline);
  j->reps = calloc(n ? n : 1, sizeof *j->reps);
  if (!j->reps) return -1;
  j->n_reps = n;
  for (size_t s = 0; s < n; s++) {
    kb_sim_step_info si;
    if (kb_sim_pipeline_step(sim, pipeline, s, &si) < 0) return -1;
    const char *dash = strrchr(si.name, '-');
    treplica *r = &j->reps[s];
    r->index = dash ? atoi(dash + 1) : 0;
    for (size_t t = 0; t < j->n_types; t++) {
      char type[64];
      lower(j->types[t], type, sizeof type);
      if (dash && strlen(type) == (size_t)(dash - si.name) && !strncmp(si.name, type, strlen(type)))
        r->type = (int)t;
    }
    char type[64], pod[512];
    lower(j->types[r->type], type, sizeof type);
    if (!strcmp(j->k->kind, "MPIJob") && !strcmp(type, "launcher"))
      snprintf(pod, sizeof pod, "%s-launcher", j->name);
    else
      snprintf(pod, sizeof pod, "%s-%s-%d", j->name, type, r->index);
    r->pod = strdup(pod);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j->templates[r->type], "spec"), "containers"), 0);
    const char *cname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c0, "name"));
    r->container = strdup(cname ? cname : j->k->container);
  }
  return 0;
}

static void train_added(ctl_train *c, const tkind *k, const kb_k8s_res *res, const cJSON *obj) {
  const char *ns = kb_k8s_meta_str(obj, "namespace"), *name = kb_k8s_meta_str(obj, "name");
  const cJSON *specs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "spec"), k->specs_key);
  tjob *j = calloc(1, sizeof *j);
  if (!j) return;
  j->ctl = c;
  j->k = k;
  j->res = res;
  j->ns = strdup(ns ? ns : "default");
  j->name = strdup(name);
  j->uid = strdup(kb_k8s_meta_str(obj, "uid") ? kb_k8s_meta_str(obj, "uid") : "");
  j->run = -1;
  j->created = kb_sim_now(kb_glue_sim(c->g));
  j->running_at = j->end = -1;
  j->next = c->jobs;
  c->jobs = j;
  kb_sim_error err = {0};
  if (!cJSON_IsObject(specs) || !specs->child) {
    snprintf(err.message, sizeof err.message, "spec.%s: at least one replica type is required",
             k->specs_key);
  } else {
    const cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "annotations");
    cJSON *wf = build_workflow(j, specs, ann);
    int pl = kb_sim_pipeline_load(kb_glue_sim(c->g), wf, NULL, &err);
    cJSON_Delete(wf);
    const char *fail = kb_k8s_annotation(obj, "sim.kbrun.io/fail");
    kb_sim_run_opts o = {.name = name, .workflow_name = name, .namespace_ = j->ns,
                         .fail_prob = fail && !strcmp(fail, "true") ? 1 : -1};
    if (pl >= 0 && map_replicas(j, pl) == 0)
      j->run = kb_sim_run_create(kb_glue_sim(c->g), pl, &o, &err);
    if (pl >= 0) kb_sim_pipeline_release(kb_glue_sim(c->g), pl); /* the run holds it */
  }
  if (j->run < 0) {
    kb_log(KB_LOG_WARN, "simulator: %s %s/%s: %s", k->kind, j->ns, j->name, err.message);
    cJSON *st = cJSON_CreateObject();
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    j->outcome = -1;
    j->end = j->created;
    condition(j, conds, "Failed", "True", "Failed", j->end);
    cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(conds, 0), "message"),
                         err.message);
    kb_glue_put_status(c->g, res, j->ns, j->name, st);
    cJSON_Delete(st);
    return;
  }
  kb_glue_own_run(c->g, j->run, &train_ops, j);
  for (size_t i = 0; i < j->n_reps; i++)
    kb_glue_event(c->g, obj, "Normal", "SuccessfulCreatePod", k->operator_name, "Created pod: %s",
               j->reps[i].pod);
  write_status(j);
}

static void train_deleted(ctl_train *c, const cJSON *obj) {
  const char *uid = kb_k8s_meta_str(obj, "uid");
  for (tjob *j = c->jobs; j; j = j->next) {
    if (j->run < 0 || !uid || strcmp(j->uid, uid)) continue;
    kb_sim_run_delete(kb_glue_sim(c->g), j->run, NULL);
    kb_glue_disown_run(c->g, j->run);
    j->run = -1;
  }
}

typedef struct hook_ud { /* one per kind, inside ctl_train */
  ctl_train *c;
  size_t kind;
} hook_ud;

static void on_train(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  hook_ud *h = ud;
  ctl_train *c = h->c;
  if (kb_glue_writing(c->g)) return;
  const tkind *k = &kinds[h->kind];
  if (type == KB_K8S_ADDED)
    train_added(c, k, kb_k8s_store_lookup(kb_glue_store(c->g), "kubeflow.org", "v1", k->resource), obj);
  else if (type == KB_K8S_DELETED)
    train_deleted(c, obj);
}

typedef struct ctl_train_full {
  ctl_train c;
  hook_ud hooks[N_KINDS];
} ctl_train_full;

static hook_ud *hooks_of(ctl_train *c) { return ((ctl_train_full *)c)->hooks; }

static void train_free(glue_ctl *base) {
  ctl_train *c = (ctl_train *)base;
  for (size_t i = 0; i < N_KINDS; i++) kb_k8s_watch_cancel(c->w[i]);
  while (c->jobs) {
    tjob *j = c->jobs;
    c->jobs = j->next;
    tjob_free(j);
  }
  free(c);
}

glue_ctl *kb_glue_training_start(sim_glue *g) {
  ctl_train_full *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  ctl_train *c = &f->c;
  c->base.free = train_free;
  c->g = g;
  for (size_t i = 0; i < N_KINDS; i++) {
    const kb_k8s_res *res = kb_k8s_store_lookup(kb_glue_store(g), "kubeflow.org", "v1", kinds[i].resource);
    hook_ud *h = &hooks_of(c)[i];
    h->c = c;
    h->kind = i;
    c->w[i] = res ? kb_k8s_store_on(kb_glue_store(g), res, on_train, h) : NULL;
    if (!c->w[i]) {
      train_free(&c->base);
      return NULL;
    }
  }
  return &c->base;
}
