/* Argo's cron workflow controller: every CronWorkflow (argoproj.io/v1alpha1)
 * spawns a Workflow at each time its schedule matches, on the simulator's
 * virtual clock. Like argo (workflow/cron): the Workflow is named
 * "<cron>-<unix time of the schedule>", labelled
 * workflows.argoproj.io/cron-workflow, annotated with the scheduled time,
 * owned by the CronWorkflow, and carries spec.workflowSpec with
 * spec.workflowMetadata; concurrencyPolicy Allow (default) starts it
 * regardless, Forbid skips while one is active, Replace terminates the
 * active ones first (spec.shutdown Terminate); spec.suspend skips the
 * times that pass. Status: active, lastScheduledTime, phase.
 *
 * Schedules (spec.schedule, or v3.6's spec.schedules) are 5-field cron
 * expressions (cron.c parses them, one parser for both APIs) in UTC;
 * spec.timezone and startingDeadlineSeconds are not modelled (no catch-up:
 * a missed time is skipped). Without a clock (manual mode) nothing fires. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"
#include "kb/vclock.h"
#include "sim_cron.h"
#include "sim_glue.h"

#define CRON_LABEL "workflows.argoproj.io/cron-workflow"
#define SCHEDULED_ANN "workflows.argoproj.io/scheduled-time"
#define MAX_SCHEDULES 8

typedef struct cron_rec {
  char *ns, *name, *uid;
  double next; /* unix seconds of the next schedule time, INFINITY: none */
  struct cron_rec *next_rec;
} cron_rec;

typedef struct ctl_cron {
  glue_ctl base;
  sim_glue *g;
  const kb_k8s_res *res, *wfs;
  kb_k8s_watch *w, *w_wfs;
  kb_vtimer timer;
  int timer_init;
  cron_rec *recs;
} ctl_cron;

static const cJSON *spec_of(const cJSON *o) { return cJSON_GetObjectItemCaseSensitive(o, "spec"); }

/* The earliest time strictly after `after` any of the schedules matches. */
static double schedules_next(const cJSON *spec, double after) {
  double best = INFINITY;
  const char *one = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "schedule"));
  if (one && *one) best = kb_sim_cron_next(one, after);
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(spec, "schedules")) {
    double t = cJSON_IsString(s) ? kb_sim_cron_next(s->valuestring, after) : -1;
    if (t >= 0 && t < best) best = t;
  }
  return best < 0 ? INFINITY : best;
}

static double now_unix(ctl_cron *c) { return kb_glue_unix(c->g, kb_sim_now(kb_glue_sim(c->g))); }

static int wf_active(const cJSON *wf) {
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(wf, "metadata"), "labels");
  const char *done = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(labels, "workflows.argoproj.io/completed"));
  return !done || strcmp(done, "true");
}

/* The cron's Workflows (by label), active ones only. Caller frees. */
static cJSON *active_workflows(ctl_cron *c, const cron_rec *r) {
  char sel[400];
  snprintf(sel, sizeof sel, CRON_LABEL "=%s", r->name);
  kb_k8s_list_opts lo = {.ns = r->ns, .label_selector = sel};
  cJSON *list = NULL, *out = cJSON_CreateArray();
  if (kb_k8s_list(kb_glue_store(c->g), c->wfs, &lo, &list, NULL) == 0) {
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(list, "items"))
      if (wf_active(w)) cJSON_AddItemToArray(out, cJSON_Duplicate(w, 1));
  }
  cJSON_Delete(list);
  return out;
}

static void terminate_workflow(ctl_cron *c, const char *ns, const cJSON *wf) {
  cJSON *o = cJSON_Duplicate(wf, 1);
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
  if (cJSON_IsObject(spec)) {
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "shutdown");
    cJSON_AddStringToObject(spec, "shutdown", "Terminate");
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "resourceVersion");
    kb_k8s_update(kb_glue_store(c->g), c->wfs, ns, kb_k8s_meta_str(wf, "name"), o, 0, NULL, NULL);
  }
  cJSON_Delete(o);
}

static void copy_map(cJSON *md, const char *map, const cJSON *from) {
  const cJSON *kv;
  cJSON_ArrayForEach(kv, from)
    if (cJSON_IsString(kv)) kb_k8s_set_meta(md, map, kv->string, kv->valuestring);
}

/* The Workflow of one schedule time (argo's ConvertCronWorkflowToWorkflow). */
static cJSON *child_workflow(const cJSON *cron, const cron_rec *r, double t) {
  const cJSON *spec = spec_of(cron);
  cJSON *wf = cJSON_CreateObject();
  cJSON_AddStringToObject(wf, "apiVersion", "argoproj.io/v1alpha1");
  cJSON_AddStringToObject(wf, "kind", "Workflow");
  cJSON *md = cJSON_AddObjectToObject(wf, "metadata");
  char name[320], ts[32];
  snprintf(name, sizeof name, "%s-%lld", r->name, (long long)t);
  cJSON_AddStringToObject(md, "name", name);
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(spec, "workflowMetadata");
  copy_map(md, "labels", cJSON_GetObjectItemCaseSensitive(wm, "labels"));
  copy_map(md, "annotations", cJSON_GetObjectItemCaseSensitive(wm, "annotations"));
  kb_k8s_set_meta(md, "labels", CRON_LABEL, r->name);
  kb_k8s_format_time(t, ts);
  kb_k8s_set_meta(md, "annotations", SCHEDULED_ANN, ts);
  cJSON *refs = cJSON_AddArrayToObject(md, "ownerReferences");
  cJSON_AddItemToArray(refs, kb_ctl_owner_ref("argoproj.io/v1alpha1", "CronWorkflow", r->name, r->uid));
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(spec, "workflowSpec");
  cJSON_AddItemToObject(wf, "spec", cJSON_IsObject(ws) ? cJSON_Duplicate(ws, 1) : cJSON_CreateObject());
  return wf;
}

static void put_status(ctl_cron *c, const cron_rec *r, double last) {
  const cJSON *cur = kb_k8s_peek(kb_glue_store(c->g), c->res, r->ns, r->name);
  if (!cur) return;
  cJSON *o = cJSON_Duplicate(cur, 1);
  cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
  if (!cJSON_IsObject(st)) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, "status");
    st = cJSON_AddObjectToObject(o, "status");
  }
  cJSON *active = active_workflows(c, r), *refs = cJSON_CreateArray();
  const cJSON *w;
  cJSON_ArrayForEach(w, active) {
    cJSON *ref = cJSON_CreateObject();
    cJSON_AddStringToObject(ref, "kind", "Workflow");
    cJSON_AddStringToObject(ref, "namespace", r->ns);
    cJSON_AddStringToObject(ref, "name", kb_k8s_meta_str(w, "name"));
    cJSON_AddStringToObject(ref, "uid", kb_k8s_meta_str(w, "uid") ? kb_k8s_meta_str(w, "uid") : "");
    cJSON_AddStringToObject(ref, "apiVersion", "argoproj.io/v1alpha1");
    cJSON_AddItemToArray(refs, ref);
  }
  cJSON_Delete(active);
  cJSON_DeleteItemFromObjectCaseSensitive(st, "active");
  cJSON_AddItemToObject(st, "active", refs);
  if (last >= 0) {
    char ts[32];
    kb_k8s_format_time(last, ts);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "lastScheduledTime");
    cJSON_AddStringToObject(st, "lastScheduledTime", ts);
  }
  cJSON_DeleteItemFromObjectCaseSensitive(st, "phase");
  cJSON_AddStringToObject(st, "phase", "Active");
  if (!cJSON_GetObjectItemCaseSensitive(st, "conditions")) cJSON_AddArrayToObject(st, "conditions");
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "resourceVersion");
  kb_glue_write_begin(c->g);
  kb_k8s_update(kb_glue_store(c->g), c->res, r->ns, r->name, o, 0, NULL, NULL);
  kb_glue_write_end(c->g);
  cJSON_Delete(o);
}

/* One schedule time of one cron: its concurrency policy, then the Workflow. */
static void fire(ctl_cron *c, const cron_rec *r, const cJSON *cron, double t) {
  const char *policy = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec_of(cron), "concurrencyPolicy"));
  cJSON *active = active_workflows(c, r);
  int n_active = cJSON_GetArraySize(active);
  if (policy && !strcmp(policy, "Forbid") && n_active) {
    cJSON_Delete(active);
    return;
  }
  if (policy && !strcmp(policy, "Replace")) {
    const cJSON *w;
    cJSON_ArrayForEach(w, active) terminate_workflow(c, r->ns, w);
  }
  cJSON_Delete(active);
  /* a terminated workflow updates the cron's status: the object changed */
  if (!(cron = kb_k8s_peek(kb_glue_store(c->g), c->res, r->ns, r->name))) return;
  cJSON *wf = child_workflow(cron, r, t);
  kb_k8s_error err = {0};
  if (kb_k8s_create(kb_glue_store(c->g), c->wfs, r->ns, wf, 0, NULL, &err) < 0)
    kb_glue_event(c->g, cron, "Warning", "WorkflowSubmissionError", "cron-workflow-controller",
               "Failed to submit Workflow: %s", err.message);
  else
    kb_glue_event(c->g, cron, "Normal", "WorkflowCreated", "cron-workflow-controller",
               "Created workflow %s", kb_k8s_meta_str(wf, "name"));
  cJSON_Delete(wf);
  put_status(c, r, t);
}

static void tick(ctl_cron *c);

static void on_timer(kb_vtimer *t) {
  ctl_cron *c = t->data;
  kb_glue_flush(c->g); /* the store as of now: which workflows are still active */
  tick(c);
}

/* Fires what is due, then waits on the clock for the next time. */
static void tick(ctl_cron *c) {
  double now = now_unix(c), wake = INFINITY;
  kb_k8s_store *st = kb_glue_store(c->g);
  for (cron_rec *r = c->recs; r; r = r->next_rec) {
    const cJSON *cron = kb_k8s_peek(st, c->res, r->ns, r->name);
    if (!cron) continue;
    int suspended = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec_of(cron), "suspend"));
    for (int guard = 0; guard < 100 && r->next <= now; guard++) {
      if (!suspended) fire(c, r, cron, r->next);
      cron = kb_k8s_peek(st, c->res, r->ns, r->name); /* the status write replaced it */
      if (!cron) break;
      r->next = schedules_next(spec_of(cron), r->next);
    }
    if (r->next < wake) wake = r->next;
  }
  kb_vclock *clock = kb_sim_clock(kb_glue_sim(c->g));
  if (!clock || !isfinite(wake)) return;
  if (!c->timer_init) {
    kb_vtimer_init(clock, &c->timer, on_timer, c);
    c->timer_init = 1;
  }
  /* a hair after the schedule time, so it is due when the timer fires */
  kb_vtimer_start(&c->timer, wake - now + 1e-6);
}

static void rec_free(cron_rec *r) {
  free(r->ns), free(r->name), free(r->uid);
  free(r);
}

static cron_rec *rec_find(ctl_cron *c, const cJSON *obj) {
  const char *uid = kb_k8s_meta_str(obj, "uid");
  for (cron_rec *r = c->recs; r; r = r->next_rec)
    if (uid && !strcmp(r->uid, uid)) return r;
  return NULL;
}

static void on_cron(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  ctl_cron *c = ud;
  if (kb_glue_writing(c->g)) return;
  cron_rec *r = rec_find(c, obj);
  if (type == KB_K8S_DELETED) {
    for (cron_rec **p = &c->recs; r && *p; p = &(*p)->next_rec)
      if (*p == r) {
        *p = r->next_rec;
        rec_free(r);
        break;
      }
    return;
  }
  if (type != KB_K8S_ADDED && type != KB_K8S_MODIFIED) return;
  if (!r) {
    if (!(r = calloc(1, sizeof *r))) return;
    const char *uid = kb_k8s_meta_str(obj, "uid");
    r->ns = strdup(kb_k8s_meta_str(obj, "namespace") ? kb_k8s_meta_str(obj, "namespace") : "default");
    r->name = strdup(kb_k8s_meta_str(obj, "name") ? kb_k8s_meta_str(obj, "name") : "");
    r->uid = strdup(uid ? uid : "");
    if (!r->ns || !r->name || !r->uid) {
      rec_free(r);
      return;
    }
    r->next_rec = c->recs;
    c->recs = r;
  }
  /* a new or changed schedule counts from now: no catch-up */
  r->next = schedules_next(spec_of(obj), now_unix(c));
  tick(c);
}

/* A spawned Workflow finished or went: argo drops it from status.active. */
static void on_workflow(void *ud, kb_k8s_event_type type, const cJSON *wf) {
  ctl_cron *c = ud;
  if (type != KB_K8S_MODIFIED && type != KB_K8S_DELETED) return;
  if (type == KB_K8S_MODIFIED && wf_active(wf)) return;
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(wf, "metadata");
  const char *owner = cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "labels"), CRON_LABEL));
  const char *ns = kb_k8s_meta_str(wf, "namespace"), *uid = kb_k8s_meta_str(wf, "uid");
  if (!owner || !ns || !uid) return;
  for (cron_rec *r = c->recs; r; r = r->next_rec) {
    if (strcmp(r->name, owner) || strcmp(r->ns, ns)) continue;
    const cJSON *cron = kb_k8s_peek(kb_glue_store(c->g), c->res, r->ns, r->name);
    const cJSON *ref;
    cJSON_ArrayForEach(ref, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cron, "status"), "active")) {
      const char *u = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "uid"));
      if (u && !strcmp(u, uid)) {
        put_status(c, r, -1);
        return;
      }
    }
  }
}

static void cron_free(glue_ctl *base) {
  ctl_cron *c = (ctl_cron *)base;
  kb_k8s_watch_cancel(c->w);
  kb_k8s_watch_cancel(c->w_wfs);
  if (c->timer_init) kb_vtimer_stop(&c->timer);
  while (c->recs) {
    cron_rec *r = c->recs;
    c->recs = r->next_rec;
    rec_free(r);
  }
  free(c);
}

glue_ctl *kb_glue_cron_start(sim_glue *g) {
  ctl_cron *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = cron_free;
  c->g = g;
  c->res = kb_k8s_store_lookup(kb_glue_store(g), "argoproj.io", "v1alpha1", "cronworkflows");
  c->wfs = kb_k8s_store_lookup(kb_glue_store(g), "argoproj.io", "v1alpha1", "workflows");
  c->w = c->res && c->wfs ? kb_k8s_store_on(kb_glue_store(g), c->res, on_cron, c) : NULL;
  c->w_wfs = c->w ? kb_k8s_store_on(kb_glue_store(g), c->wfs, on_workflow, c) : NULL;
  if (!c->w_wfs) {
    kb_k8s_watch_cancel(c->w);
    free(c);
    return NULL;
  }
  return &c->base;
}
