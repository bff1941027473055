/* The pod controller: every Pod created through the API that the model did
 * not make itself (a bare pod from `kubectl run`, a pod another controller
 * writes into the store) becomes a model run of one pod built from its
 * spec (first container's image and resources, nodeSelector, tolerations,
 * required node affinity, spec.nodeName as a hostname selector), so the
 * scheduler, pulls, start-up and the CPU model apply to it as to any step.
 * The object stays the client's (name, uid, labels, spec): the mirror
 * adopts it and writes only spec.nodeName and status, and the model's
 * events (Scheduled, FailedScheduling, Pulling, Pulled, Created, Started)
 * name it.
 *
 * How long it runs: the annotation sim.kbrun.io/duration, then Succeeded
 * (Failed with sim.kbrun.io/fail: "true"); without one, restartPolicy
 * Always (the default) runs until the pod is deleted, Never and OnFailure
 * for steps.default. Deleting the pod deletes the run, which frees its
 * node's resources. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"
#include "kb/log.h"
#include "sim_glue.h"

#define POD_BUCKETS 4096

typedef struct pod_rec {
  char *ns, *name, *uid, *container;
  int run, pipeline;
  struct pod_rec *next; /* hash chain, by uid */
} pod_rec;

typedef struct ctl_pod {
  glue_ctl base;
  sim_glue *g;
  kb_k8s_watch *w;
  pod_rec *buckets[POD_BUCKETS];
} ctl_pod;

static pod_rec **slot_of(ctl_pod *c, const char *uid) {
  uint32_t h = 2166136261u;
  for (const char *p = uid; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  return &c->buckets[h % POD_BUCKETS];
}

static const char *rec_container(void *ud, int run, int step) {
  (void)run, (void)step;
  return ((pod_rec *)ud)->container;
}

static const glue_owner_ops pod_ops = {NULL, NULL, rec_container};

static void rec_free(ctl_pod *c, pod_rec *p) {
  if (p->pipeline >= 0) kb_sim_pipeline_release(kb_glue_sim(c->g), p->pipeline);
  free(p->ns), free(p->name), free(p->uid), free(p->container);
  free(p);
}

/* The one-template workflow the model runs for the pod. */
static cJSON *pod_workflow(const cJSON *pod) {
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
  const char *restart = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "restartPolicy"));
  cJSON *extra = cJSON_CreateObject();
  /* A restarting pod without a duration is a server: it runs until deleted. */
  if (!kb_k8s_annotation(pod, "sim.kbrun.io/duration") && (!restart || !strcmp(restart, "Always")))
    cJSON_AddStringToObject(extra, "sim.kbrun.io/duration", "forever");
  cJSON *t = kb_glue_template_from_pod("pod", pod, extra);
  cJSON_Delete(extra);
  const char *node = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "nodeName"));
  if (node) { /* bound by the client: only that node will do */
    cJSON *sel = cJSON_GetObjectItemCaseSensitive(t, "nodeSelector");
    if (!cJSON_IsObject(sel)) {
      cJSON_DeleteItemFromObjectCaseSensitive(t, "nodeSelector");
      sel = cJSON_AddObjectToObject(t, "nodeSelector");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(sel, "kubernetes.io/hostname");
    cJSON_AddStringToObject(sel, "kubernetes.io/hostname", node);
  }
  cJSON *wf = cJSON_CreateObject();
  cJSON_AddStringToObject(wf, "apiVersion", "argoproj.io/v1alpha1");
  cJSON_AddStringToObject(wf, "kind", "Workflow");
  char gen[300];
  snprintf(gen, sizeof gen, "%s-", kb_k8s_meta_str(pod, "name"));
  cJSON_AddStringToObject(cJSON_AddObjectToObject(wf, "metadata"), "generateName", gen);
  cJSON *ws = cJSON_AddObjectToObject(wf, "spec");
  cJSON_AddStringToObject(ws, "entrypoint", "pod");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(ws, "templates"), t);
  return wf;
}

static void pod_added(ctl_pod *c, const cJSON *obj) {
  sim_glue *g = c->g;
  kb_sim *sim = kb_glue_sim(g);
  const char *ns = kb_k8s_meta_str(obj, "namespace"), *name = kb_k8s_meta_str(obj, "name");
  const char *uid = kb_k8s_meta_str(obj, "uid");
  const char *phase = cJSON_GetStringValue(kb_k8s_path(obj, "status.phase"));
  if (!ns || !name || !uid || kb_k8s_meta_str(obj, "deletionTimestamp")) return;
  if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"))) return;
  pod_rec *p = calloc(1, sizeof *p);
  if (!p) return;
  const cJSON *c0 = cJSON_GetArrayItem(kb_k8s_path(obj, "spec.containers"), 0);
  const char *cname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c0, "name"));
  p->ns = strdup(ns), p->name = strdup(name), p->uid = strdup(uid);
  p->container = strdup(cname ? cname : "main");
  p->run = p->pipeline = -1;
  if (!p->ns || !p->name || !p->uid || !p->container) {
    rec_free(c, p);
    return;
  }
  cJSON *wf = pod_workflow(obj);
  kb_sim_error err = {0};
  p->pipeline = kb_sim_pipeline_load(sim, wf, NULL, &err);
  cJSON_Delete(wf);
  if (p->pipeline >= 0) {
    const char *fail = kb_k8s_annotation(obj, "sim.kbrun.io/fail");
    kb_sim_run_opts o = {.name = name, .workflow_name = name, .namespace_ = ns,
                         .fail_prob = fail && !strcmp(fail, "true") ? 1 : -1};
    p->run = kb_sim_run_create(sim, p->pipeline, &o, &err);
  }
  if (p->run < 0) {
    kb_log(KB_LOG_WARN, "simulator: pod %s/%s cannot run: %s", ns, name, err.message);
    kb_glue_event(g, obj, "Warning", "FailedCreate", "kbrun-sim", "the simulator cannot run this pod: %s",
               err.message);
    rec_free(c, p);
    return;
  }
  kb_glue_own_run(g, p->run, &pod_ops, p);
  kb_glue_adopt_pod(g, p->run, ns, name);
  pod_rec **s = slot_of(c, uid);
  p->next = *s;
  *s = p;
}

static void pod_deleted(ctl_pod *c, const cJSON *obj) {
  const char *uid = kb_k8s_meta_str(obj, "uid");
  if (!uid) return;
  for (pod_rec **s = slot_of(c, uid); *s; s = &(*s)->next) {
    pod_rec *p = *s;
    if (strcmp(p->uid, uid)) continue;
    *s = p->next;
    /* The object is gone already: the mirror must not delete by name. */
    kb_glue_forget_run(c->g, p->run);
    kb_glue_disown_run(c->g, p->run);
    kb_sim_run_delete(kb_glue_sim(c->g), p->run, NULL);
    rec_free(c, p);
    return;
  }
  if (!kb_glue_writing(c->g)) kb_glue_pod_deleted(c->g, obj);
}

static void on_pod(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  ctl_pod *c = ud;
  /* Any pod the mirror did not make is ours, whoever made it (another
   * controller may write pods from inside its own glue writes). */
  if (type == KB_K8S_ADDED && !kb_glue_creating_pod(c->g)) pod_added(c, obj);
  else if (type == KB_K8S_DELETED) pod_deleted(c, obj);
}

static void pod_ctl_free(glue_ctl *base) {
  ctl_pod *c = (ctl_pod *)base;
  kb_k8s_watch_cancel(c->w);
  for (size_t i = 0; i < POD_BUCKETS; i++)
    while (c->buckets[i]) {
      pod_rec *p = c->buckets[i];
      c->buckets[i] = p->next;
      rec_free(c, p);
    }
  free(c);
}

glue_ctl *kb_glue_pod_start(sim_glue *g) {
  ctl_pod *c = calloc(1, sizeof *c);
  const kb_k8s_res *res = kb_glue_res(g, "", "pods");
  if (!c || !res) {
    free(c);
    return NULL;
  }
  c->base.free = pod_ctl_free;
  c->g = g;
  c->w = kb_k8s_store_on(kb_glue_store(g), res, on_pod, c);
  if (!c->w) {
    free(c);
    return NULL;
  }
  return &c->base;
}
