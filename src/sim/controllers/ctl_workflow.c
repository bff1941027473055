/* The Argo workflow controller: a Workflow created through the API (the
 * CRD path or argo-server's REST) runs through the model exactly like a
 * KFP v1 pipeline (kb_sim_pipeline_load on the Workflow itself, then a
 * run named after it), and its status is written back from the model:
 * phase, startedAt, finishedAt, progress, message, nodes. A workflow the
 * model cannot run (unknown template type, bad DAG) ends in phase Error
 * with the loader's message, as Argo reports invalid specs. Deleting the
 * Workflow stops the run; its pods go with it (ownerReferences).
 * Updates act as Argo's controller does: spec.suspend holds the workflow
 * (no new step starts), spec.shutdown Terminate or Stop ends it, a status
 * set back to Running by argo-server's retry re-runs its failed steps.
 *
 * Annotation sim.kbrun.io/fail: "true" makes every step fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"
#include "sim_glue.h"

typedef struct wf_rec {
  struct ctl_wf *ctl;
  char *ns, *name, *uid;
  int run;
  int suspended, shutdown; /* spec.suspend, spec.shutdown as last acted on */
  char phase[16]; /* the last one reported in an Event */
  struct wf_rec *next;
} wf_rec;

typedef struct ctl_wf {
  glue_ctl base;
  sim_glue *g;
  const kb_k8s_res *res;
  kb_k8s_watch *w;
  wf_rec *wfs;
} ctl_wf;

/* Events as the workflow controller records them on phase changes. */
static void wf_events(wf_rec *w) {
  sim_glue *g = w->ctl->g;
  const cJSON *obj = kb_k8s_peek(kb_glue_store(g), w->ctl->res, w->ns, w->name);
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
  const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "phase"));
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "message"));
  if (!phase || !strcmp(phase, w->phase) || !strcmp(phase, "Pending")) return;
  snprintf(w->phase, sizeof w->phase, "%s", phase);
  if (!strcmp(phase, "Running"))
    kb_glue_event(g, obj, "Normal", "WorkflowRunning", "workflow-controller", "Workflow Running");
  else if (!strcmp(phase, "Succeeded"))
    kb_glue_event(g, obj, "Normal", "WorkflowSucceeded", "workflow-controller", "Workflow completed");
  else
    kb_glue_event(g, obj, "Warning", "WorkflowFailed", "workflow-controller", "%s",
               msg ? msg : "Workflow failed");
}

static void wf_changed(void *ud, int run) {
  wf_rec *w = ud;
  kb_glue_workflow_status(w->ctl->g, run, w->ns, w->name);
  wf_events(w);
}

static const glue_owner_ops wf_ops = {NULL, wf_changed, NULL};

/* spec.shutdown (Terminate, Stop) once; spec.suspend on each change. */
static void wf_spec_changed(wf_rec *w, const cJSON *obj) {
  kb_sim *sim = kb_glue_sim(w->ctl->g);
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
  const char *shutdown = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "shutdown"));
  int suspend = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "suspend"));
  if (shutdown && *shutdown && !w->shutdown) {
    w->shutdown = 1;
    if (!strcmp(shutdown, "Stop")) kb_sim_run_stop(sim, w->run, NULL);
    else kb_sim_run_terminate(sim, w->run, NULL);
  }
  if (suspend != w->suspended && kb_sim_run_suspend(sim, w->run, suspend, NULL) == 0)
    w->suspended = suspend;
}

static void wf_error(ctl_wf *c, const char *ns, const char *name, const char *msg) {
  char ts[32];
  kb_glue_time(c->g, kb_sim_now(kb_glue_sim(c->g)), ts);
  cJSON *st = cJSON_CreateObject();
  cJSON_AddStringToObject(st, "phase", "Error");
  cJSON_AddStringToObject(st, "startedAt", ts);
  cJSON_AddStringToObject(st, "finishedAt", ts);
  cJSON_AddStringToObject(st, "progress", "0/0");
  cJSON_AddStringToObject(st, "message", msg);
  kb_glue_put_status(c->g, c->res, ns, name, st);
  cJSON_Delete(st);
}

static void wf_start(ctl_wf *c, const cJSON *obj);

static void wf_added(ctl_wf *c, const cJSON *obj) {
  if (kb_k8s_annotation(obj, KB_SIM_MIRRORED)) return;
  const cJSON *phase = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "status"), "phase");
  if (cJSON_GetStringValue(phase) && phase->valuestring[0]) return; /* already ran elsewhere */
  wf_start(c, obj);
}

/* Loads the Workflow into the model and starts its run (or ends it in Error). */
static void wf_start(ctl_wf *c, const cJSON *obj) {
  const char *ns = kb_k8s_meta_str(obj, "namespace"), *name = kb_k8s_meta_str(obj, "name");
  kb_sim *sim = kb_glue_sim(c->g);
  kb_sim_error err = {0};
  int pl = kb_sim_pipeline_load(sim, obj, NULL, &err);
  if (pl < 0) {
    wf_error(c, ns, name, err.message);
    return;
  }
  const char *fail = kb_k8s_annotation(obj, "sim.kbrun.io/fail");
  kb_sim_run_opts o = {.name = name, .workflow_name = name, .namespace_ = ns,
                       .fail_prob = fail && !strcmp(fail, "true") ? 1 : -1};
  int run = kb_sim_run_create(sim, pl, &o, &err);
  kb_sim_pipeline_release(sim, pl); /* the run holds it now */
  if (run < 0) {
    wf_error(c, ns, name, err.message);
    return;
  }
  wf_rec *w = calloc(1, sizeof *w);
  if (!w) return;
  w->ctl = c;
  w->ns = strdup(ns);
  w->name = strdup(name);
  w->uid = strdup(kb_k8s_meta_str(obj, "uid") ? kb_k8s_meta_str(obj, "uid") : "");
  w->run = run;
  w->next = c->wfs;
  c->wfs = w;
  kb_glue_own_run(c->g, run, &wf_ops, w);
  wf_spec_changed(w, obj);
  kb_glue_workflow_status(c->g, run, ns, name);
}

/* Suspend nodes argo-server ended (resume, set, stop by node): the model's
 * suspend steps of the same node name end with that phase. */
static void wf_suspend_nodes(wf_rec *w, const cJSON *status) {
  kb_sim *sim = kb_glue_sim(w->ctl->g);
  kb_sim_run_info ri;
  if (kb_sim_run_get(sim, w->run, &ri) < 0) return;
  const cJSON *node;
  cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(status, "nodes")) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "type"));
    const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "phase"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "name"));
    if (!type || strcmp(type, "Suspend") || !phase || !strcmp(phase, "Running") || !name) continue;
    size_t n = kb_sim_pipeline_steps(sim, ri.pipeline), wlen = strlen(w->name);
    for (size_t i = 0; i < n; i++) {
      kb_sim_step_info si;
      if (kb_sim_pipeline_step(sim, ri.pipeline, i, &si) < 0 || si.kind != KB_SIM_STEP_SUSPEND) continue;
      if (!strncmp(name, w->name, wlen) && !strcmp(name + wlen, si.node_suffix))
        kb_sim_run_node_resume(sim, w->run, i, !strcmp(phase, "Succeeded"), NULL);
    }
  }
}

static wf_rec *wf_find(ctl_wf *c, const cJSON *obj) {
  const char *uid = kb_k8s_meta_str(obj, "uid");
  for (wf_rec *w = c->wfs; w; w = w->next)
    if (w->run >= 0 && uid && !strcmp(w->uid, uid)) return w;
  return NULL;
}

/* An update through the API (argo-server's actions patch the Workflow as
 * the real one does): spec.suspend, spec.shutdown, or a status put back to
 * Running by a retry reach the model. */
static void wf_modified(ctl_wf *c, const cJSON *obj) {
  wf_rec *w = wf_find(c, obj);
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
  const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "phase"));
  int running = phase && !strcmp(phase, "Running");
  if (!w) { /* never ran (Error at load, so no nodes): a retry loads it again */
    if (running && !cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "nodes")) &&
        !kb_k8s_annotation(obj, KB_SIM_MIRRORED))
      wf_start(c, obj);
    return;
  }
  kb_sim_run_info ri;
  /* a retry: the status put back to Running after the failure was published */
  int published = !strcmp(w->phase, "Failed") || !strcmp(w->phase, "Error");
  if (running && published && kb_sim_run_get(kb_glue_sim(c->g), w->run, &ri) == 0 &&
      ri.wf_finished_at >= 0 && kb_sim_run_retry(kb_glue_sim(c->g), w->run, NULL) == 0) {
    w->shutdown = 0;
    w->phase[0] = 0;
  }
  wf_spec_changed(w, obj);
  wf_suspend_nodes(w, st);
  kb_glue_workflow_status(c->g, w->run, w->ns, w->name);
  wf_events(w);
}

static void wf_deleted(ctl_wf *c, const cJSON *obj) {
  const char *uid = kb_k8s_meta_str(obj, "uid");
  for (wf_rec *w = c->wfs; w; w = w->next) {
    if (w->run < 0 || !uid || strcmp(w->uid, uid)) continue;
    kb_sim_run_delete(kb_glue_sim(c->g), w->run, NULL);
    kb_glue_disown_run(c->g, w->run);
    w->run = -1;
  }
}

static void on_wf(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  ctl_wf *c = ud;
  if (kb_glue_writing(c->g)) return;
  if (type == KB_K8S_ADDED) wf_added(c, obj);
  else if (type == KB_K8S_MODIFIED) wf_modified(c, obj);
  else if (type == KB_K8S_DELETED) wf_deleted(c, obj);
}

static void wf_free(glue_ctl *base) {
  ctl_wf *c = (ctl_wf *)base;
  kb_k8s_watch_cancel(c->w);
  while (c->wfs) {
    wf_rec *w = c->wfs;
    c->wfs = w->next;
    free(w->ns);
    free(w->name);
    free(w->uid);
    free(w);
  }
  free(c);
}

glue_ctl *kb_glue_workflow_start(sim_glue *g) {
  ctl_wf *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = wf_free;
  c->g = g;
  c->res = kb_k8s_store_lookup(kb_glue_store(g), "argoproj.io", "v1alpha1", "workflows");
  c->w = c->res ? kb_k8s_store_on(kb_glue_store(g), c->res, on_wf, c) : NULL;
  if (!c->w) {
    free(c);
    return NULL;
  }
  return &c->base;
}
