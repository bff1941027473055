/* The batch/v1 Job controller: each pod of a Job is one model run of a
 * one-step pipeline built from the pod template (resources, nodeSelector,
 * tolerations, sim.kbrun.io/duration), so the scheduler, pulls and
 * durations apply as to any step. Keeps `parallelism` pods active until
 * `completions` succeeded or more than `backoffLimit` failed, and writes
 * status as the 1.32 controller does: active/ready/succeeded/failed,
 * startTime, completionTime, and SuccessCriteriaMet + Complete (or
 * FailureTarget + Failed, reason BackoffLimitExceeded).
 *
 * completionMode Indexed: each pod gets a completion index (the lowest one
 * neither done nor running), named <job>-<index>-xxxxx with the index as
 * annotation and label batch.kubernetes.io/job-completion-index, hostname
 * <job>-<index> and env JOB_COMPLETION_INDEX in every container, as the
 * 1.32 controller sets them; a failed index is retried, the Job completes
 * when every index succeeded, and status.completedIndexes lists them
 * ("0-2,4").
 *
 * Annotation sim.kbrun.io/fail: "true" on the Job makes every pod fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"
#include "kb/log.h"
#include "sim_glue.h"

#define INDEX_KEY "batch.kubernetes.io/job-completion-index"

typedef struct job_pod {
  int run;
  char *name;
  int counted; /* 1 succeeded, -1 failed */
  int index;   /* completion index; -1 in a NonIndexed Job */
} job_pod;

enum { IDX_PENDING, IDX_RUNNING, IDX_DONE };

typedef struct job_rec {
  struct ctl_job *ctl;
  char *ns, *name, *uid, *container;
  cJSON *tmpl; /* spec.template */
  int completions, parallelism, backoff, fail, pipeline;
  uint8_t *indexes; /* Indexed: IDX_* per completion index; NULL otherwise */
  int active, ready, succeeded, failed;
  job_pod *pods;
  size_t n_pods, cap_pods;
  double start, end;
  int outcome; /* 0 running, 1 complete, -1 failed */
  int gone;
  struct job_rec *next;
} job_rec;

typedef struct ctl_job {
  glue_ctl base;
  sim_glue *g;
  const kb_k8s_res *res;
  kb_k8s_watch *w;
  job_rec *jobs;
} ctl_job;

static job_pod *pod_of(job_rec *j, int run) {
  for (size_t i = 0; i < j->n_pods; i++)
    if (j->pods[i].run == run) return &j->pods[i];
  return NULL;
}

/* ---- the pods ---- */

/* What the Job controller adds to the pod of an index. */
static void set_index(const job_rec *j, cJSON *md, cJSON *spec, int index) {
  char idx[16], host[80];
  snprintf(idx, sizeof idx, "%d", index);
  snprintf(host, sizeof host, "%.56s-%d", j->name, index);
  kb_k8s_set_meta(md, "annotations", INDEX_KEY, idx);
  kb_k8s_set_meta(md, "labels", INDEX_KEY, idx);
  if (!cJSON_GetObjectItemCaseSensitive(spec, "hostname")) cJSON_AddStringToObject(spec, "hostname", host);
  const char *kinds[] = {"initContainers", "containers"};
  for (int k = 0; k < 2; k++) {
    cJSON *ctr;
    cJSON_ArrayForEach(ctr, cJSON_GetObjectItemCaseSensitive(spec, kinds[k])) {
      cJSON *env = cJSON_GetObjectItemCaseSensitive(ctr, "env");
      if (!cJSON_IsArray(env)) env = cJSON_AddArrayToObject(ctr, "env");
      cJSON *var = cJSON_CreateObject();
      cJSON_AddStringToObject(var, "name", "JOB_COMPLETION_INDEX");
      cJSON *ref = cJSON_AddObjectToObject(cJSON_AddObjectToObject(var, "valueFrom"), "fieldRef");
      cJSON_AddStringToObject(ref, "apiVersion", "v1");
      cJSON_AddStringToObject(ref, "fieldPath", "metadata.annotations['" INDEX_KEY "']");
      cJSON_AddItemToArray(env, var);
    }
  }
}

static cJSON *job_pod_object(void *ud, int run, int step) {
  (void)step;
  job_rec *j = ud;
  job_pod *p = pod_of(j, run);
  if (!p) return NULL;
  cJSON *o = cJSON_CreateObject();
  const cJSON *tmd = cJSON_GetObjectItemCaseSensitive(j->tmpl, "metadata");
  cJSON *md = tmd ? cJSON_Duplicate(tmd, 1) : cJSON_CreateObject();
  cJSON_AddItemToObject(o, "metadata", md);
  cJSON_DeleteItemFromObjectCaseSensitive(md, "name");
  cJSON_AddStringToObject(md, "name", p->name);
  char gen[300];
  snprintf(gen, sizeof gen, "%s-", j->name);
  cJSON_DeleteItemFromObjectCaseSensitive(md, "generateName");
  cJSON_AddStringToObject(md, "generateName", gen);
  cJSON_DeleteItemFromObjectCaseSensitive(md, "namespace");
  cJSON_AddStringToObject(md, "namespace", j->ns);
  cJSON *refs = cJSON_AddArrayToObject(md, "ownerReferences");
  cJSON_AddItemToArray(refs, kb_ctl_owner_ref("batch/v1", "Job", j->name, j->uid));
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(j->tmpl, "spec");
  cJSON *pspec = spec ? cJSON_Duplicate(spec, 1) : cJSON_CreateObject();
  cJSON_AddItemToObject(o, "spec", pspec);
  if (p->index >= 0) set_index(j, md, pspec, p->index);
  return o;
}

static const char *job_container(void *ud, int run, int step) {
  (void)run;
  (void)step;
  return ((job_rec *)ud)->container;
}

static void job_changed(void *ud, int run);
static const glue_owner_ops job_ops = {job_pod_object, job_changed, job_container};

static int start_pod(job_rec *j) {
  sim_glue *g = j->ctl->g;
  if (j->n_pods == j->cap_pods) {
    size_t cap = j->cap_pods ? j->cap_pods * 2 : 4;
    job_pod *p = realloc(j->pods, cap * sizeof *p);
    if (!p) return -1;
    j->pods = p;
    j->cap_pods = cap;
  }
  int index = -1;
  if (j->indexes) {
    for (int i = 0; i < j->completions && index < 0; i++)
      if (j->indexes[i] == IDX_PENDING) index = i;
    if (index < 0) return -1; /* every index is done or running */
  }
  char sfx[6], name[320];
  kb_glue_suffix(g, sfx);
  if (index >= 0) snprintf(name, sizeof name, "%.48s-%d-%s", j->name, index, sfx);
  else snprintf(name, sizeof name, "%.56s-%s", j->name, sfx);
  kb_sim_run_opts o = {.name = j->name, .workflow_name = name, .namespace_ = j->ns,
                       .fail_prob = j->fail ? 1 : -1};
  kb_sim_error err = {0};
  int run = kb_sim_run_create(kb_glue_sim(g), j->pipeline, &o, &err);
  if (run < 0) {
    kb_log(KB_LOG_WARN, "simulator: job %s/%s: %s", j->ns, j->name, err.message);
    return -1;
  }
  j->pods[j->n_pods++] = (job_pod){run, strdup(name), 0, index};
  if (index >= 0) j->indexes[index] = IDX_RUNNING;
  kb_glue_own_run(g, run, &job_ops, j);
  kb_glue_event(g, kb_k8s_peek(kb_glue_store(g), j->ctl->res, j->ns, j->name), "Normal",
             "SuccessfulCreate", "job-controller", "Created pod: %s", name);
  if (j->start < 0) j->start = kb_sim_now(kb_glue_sim(g));
  return 0;
}

/* ---- status ---- */

static void add_condition(sim_glue *g, cJSON *arr, const char *type, const char *reason,
                          const char *msg, double t) {
  char ts[32];
  kb_glue_time(g, t, ts);
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", type);
  cJSON_AddStringToObject(c, "status", "True");
  cJSON_AddStringToObject(c, "lastProbeTime", ts);
  cJSON_AddStringToObject(c, "lastTransitionTime", ts);
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", msg);
  cJSON_AddItemToArray(arr, c);
}

/* "0-2,4": the succeeded indexes as ranges, as the controller writes them. */
static void add_completed_indexes(const job_rec *j, cJSON *st) {
  char out[1024];
  size_t n = 0;
  out[0] = 0;
  for (int i = 0; i < j->completions && n + 32 < sizeof out; i++) {
    if (j->indexes[i] != IDX_DONE) continue;
    int end = i;
    while (end + 1 < j->completions && j->indexes[end + 1] == IDX_DONE) end++;
    n += (size_t)snprintf(out + n, sizeof out - n, end > i ? "%s%d-%d" : "%s%d", n ? "," : "", i, end);
    i = end;
  }
  cJSON_AddStringToObject(st, "completedIndexes", out);
}

static void write_status(job_rec *j) {
  sim_glue *g = j->ctl->g;
  cJSON *st = cJSON_CreateObject();
  char ts[32];
  if (j->start >= 0) {
    kb_glue_time(g, j->start, ts);
    cJSON_AddStringToObject(st, "startTime", ts);
  }
  if (j->active) cJSON_AddNumberToObject(st, "active", j->active);
  cJSON_AddNumberToObject(st, "ready", j->ready);
  if (j->succeeded) cJSON_AddNumberToObject(st, "succeeded", j->succeeded);
  if (j->indexes) add_completed_indexes(j, st);
  if (j->failed) cJSON_AddNumberToObject(st, "failed", j->failed);
  cJSON_AddNumberToObject(st, "terminating", 0);
  cJSON_AddObjectToObject(st, "uncountedTerminatedPods");
  if (j->outcome) {
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    if (j->outcome > 0) {
      const char *msg = "Reached expected number of succeeded pods";
      add_condition(g, conds, "SuccessCriteriaMet", "CompletionsReached", msg, j->end);
      add_condition(g, conds, "Complete", "CompletionsReached", msg, j->end);
      kb_glue_time(g, j->end, ts);
      cJSON_AddStringToObject(st, "completionTime", ts);
    } else {
      const char *msg = "Job has reached the specified backoff limit";
      add_condition(g, conds, "FailureTarget", "BackoffLimitExceeded", msg, j->end);
      add_condition(g, conds, "Failed", "BackoffLimitExceeded", msg, j->end);
    }
  }
  kb_glue_put_status(g, j->ctl->res, j->ns, j->name, st);
  cJSON_Delete(st);
}

/* Counts the pods, starts more or finishes the Job, writes status. */
static void reconcile(job_rec *j) {
  sim_glue *g = j->ctl->g;
  kb_sim *sim = kb_glue_sim(g);
  j->active = j->ready = 0;
  for (size_t i = 0; i < j->n_pods; i++) {
    job_pod *p = &j->pods[i];
    kb_sim_run_info ri;
    if (p->counted || kb_sim_run_get(sim, p->run, &ri) < 0) continue;
    int ok = !strcmp(ri.wf_phase, "Succeeded");
    if (ok || !strcmp(ri.wf_phase, "Failed") || !strcmp(ri.wf_phase, "Error") || ri.deleted) {
      p->counted = ok ? 1 : -1;
      if (ok) j->succeeded++;
      else j->failed++;
      if (p->index >= 0) j->indexes[p->index] = ok ? IDX_DONE : IDX_PENDING; /* retried */
      continue;
    }
    j->active++;
    const int *pods;
    size_t n = kb_glue_run_pods(g, p->run, &pods);
    kb_sim_pod_info pi;
    if (n && kb_sim_pod_get(sim, pods[0], &pi) == 0 && pi.phase == KB_SIM_POD_RUNNING) j->ready++;
  }
  if (!j->outcome && j->succeeded >= j->completions) j->outcome = 1;
  if (!j->outcome && j->failed > j->backoff) j->outcome = -1;
  if (j->outcome && j->end < 0) {
    j->end = kb_sim_now(sim);
    const cJSON *obj = kb_k8s_peek(kb_glue_store(g), j->ctl->res, j->ns, j->name);
    if (j->outcome > 0) kb_glue_event(g, obj, "Normal", "Completed", "job-controller", "Job completed");
    else kb_glue_event(g, obj, "Warning", "BackoffLimitExceeded", "job-controller",
                    "Job has reached the specified backoff limit");
    for (size_t i = 0; i < j->n_pods; i++) /* failed: the rest are stopped */
      if (!j->pods[i].counted) kb_sim_run_terminate(sim, j->pods[i].run, NULL);
  }
  while (!j->outcome && j->active < j->parallelism &&
         j->succeeded + j->active < j->completions && start_pod(j) == 0)
    j->active++;
  write_status(j);
}

static void job_changed(void *ud, int run) {
  (void)run;
  job_rec *j = ud;
  if (!j->gone) reconcile(j);
}

/* ---- the hook ---- */

static int int_field(const cJSON *spec, const char *key, int dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, key);
  return cJSON_IsNumber(v) ? v->valueint : dflt;
}

static int build_pipeline(ctl_job *c, job_rec *j, const cJSON *obj) {
  cJSON *wf = cJSON_CreateObject();
  cJSON_AddStringToObject(wf, "apiVersion", "argoproj.io/v1alpha1");
  cJSON_AddStringToObject(wf, "kind", "Workflow");
  char gen[300];
  snprintf(gen, sizeof gen, "%s-", j->name);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(wf, "metadata"), "generateName", gen);
  cJSON *spec = cJSON_AddObjectToObject(wf, "spec");
  cJSON_AddStringToObject(spec, "entrypoint", "job");
  const cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "annotations");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "templates"), kb_glue_template_from_pod("job", j->tmpl, ann));
  kb_sim_error err = {0};
  j->pipeline = kb_sim_pipeline_load(kb_glue_sim(c->g), wf, NULL, &err);
  cJSON_Delete(wf);
  if (j->pipeline < 0) kb_log(KB_LOG_WARN, "simulator: job %s/%s: %s", j->ns, j->name, err.message);
  return j->pipeline;
}

static void job_added(ctl_job *c, const cJSON *obj) {
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
  const cJSON *susp = cJSON_GetObjectItemCaseSensitive(spec, "suspend");
  if (cJSON_IsTrue(susp)) return;
  job_rec *j = calloc(1, sizeof *j);
  if (!j) return;
  j->ctl = c;
  j->ns = strdup(kb_k8s_meta_str(obj, "namespace") ? kb_k8s_meta_str(obj, "namespace") : "default");
  j->name = strdup(kb_k8s_meta_str(obj, "name"));
  j->uid = strdup(kb_k8s_meta_str(obj, "uid") ? kb_k8s_meta_str(obj, "uid") : "");
  j->tmpl = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(spec, "template"), 1);
  const cJSON *c0 = cJSON_GetArrayItem(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j->tmpl, "spec"), "containers"), 0);
  const char *cname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c0, "name"));
  j->container = strdup(cname ? cname : "main");
  j->completions = int_field(spec, "completions", 1);
  j->parallelism = int_field(spec, "parallelism", 1);
  j->backoff = int_field(spec, "backoffLimit", 6);
  const char *mode = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "completionMode"));
  if (j->completions < 1) j->completions = 1;
  if (mode && !strcmp(mode, "Indexed")) j->indexes = calloc((size_t)j->completions, 1);
  const char *fail = kb_k8s_annotation(obj, "sim.kbrun.io/fail");
  j->fail = fail && !strcmp(fail, "true");
  j->start = j->end = -1;
  j->next = c->jobs;
  c->jobs = j;
  if (build_pipeline(c, j, obj) < 0) {
    j->gone = 1;
    return;
  }
  reconcile(j);
}

static void job_release_pipeline(ctl_job *c, job_rec *j) {
  if (j->pipeline >= 0) kb_sim_pipeline_release(kb_glue_sim(c->g), j->pipeline);
  j->pipeline = -1;
}

static void job_deleted(ctl_job *c, const cJSON *obj) {
  const char *uid = kb_k8s_meta_str(obj, "uid");
  for (job_rec *j = c->jobs; j; j = j->next) {
    if (j->gone || !uid || strcmp(j->uid, uid)) continue;
    j->gone = 1;
    /* Its pods go with it (the garbage collector deletes them): their runs
     * are deleted, which frees them in the model. */
    for (size_t i = 0; i < j->n_pods; i++) {
      kb_glue_disown_run(c->g, j->pods[i].run);
      kb_sim_run_delete(kb_glue_sim(c->g), j->pods[i].run, NULL);
      free(j->pods[i].name);
    }
    j->n_pods = 0;
    job_release_pipeline(c, j);
  }
}

static void on_job(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  ctl_job *c = ud;
  if (kb_glue_writing(c->g)) return;
  if (type == KB_K8S_ADDED) job_added(c, obj);
  else if (type == KB_K8S_DELETED) job_deleted(c, obj);
}

static void job_free(glue_ctl *base) {
  ctl_job *c = (ctl_job *)base;
  kb_k8s_watch_cancel(c->w);
  while (c->jobs) {
    job_rec *j = c->jobs;
    c->jobs = j->next;
    job_release_pipeline(c, j);
    for (size_t i = 0; i < j->n_pods; i++) free(j->pods[i].name);
    free(j->pods);
    free(j->indexes);
    cJSON_Delete(j->tmpl);
    free(j->ns);
    free(j->name);
    free(j->uid);
    free(j->container);
    free(j);
  }
  free(c);
}

glue_ctl *kb_glue_job_start(sim_glue *g) {
  ctl_job *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = job_free;
  c->g = g;
  c->res = kb_k8s_store_lookup(kb_glue_store(g), "batch", "v1", "jobs");
  c->w = c->res ? kb_k8s_store_on(kb_glue_store(g), c->res, on_job, c) : NULL;
  if (!c->w) {
    free(c);
    return NULL;
  }
  return &c->base;
}
