/* The store-level controllers as one set (k8s_ctl.h), and what they share:
 * selectors as text, controller references, pod readiness, writes that
 * only happen when something changed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"

enum { CTL_DEPLOY, CTL_RS, CTL_ENDPOINTS, CTL_CRONJOB, CTL_NODELEASE, CTL_PODGC, CTL_N };

struct k8s_ctls {
  k8s_ctl *c[CTL_N];
};

k8s_ctls *kb_k8s_ctls_start(kb_k8s_store *st) {
  k8s_ctls *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->c[CTL_DEPLOY] = kb_k8s_deploy_start(st);
  s->c[CTL_RS] = kb_k8s_replicaset_start(st);
  s->c[CTL_ENDPOINTS] = kb_k8s_endpoints_start(st);
  s->c[CTL_CRONJOB] = kb_k8s_cronjob_start(st);
  s->c[CTL_NODELEASE] = kb_k8s_nodelease_start(st);
  s->c[CTL_PODGC] = kb_k8s_podgc_start(st);
  for (int i = 0; i < CTL_N; i++)
    if (!s->c[i]) {
      kb_k8s_ctls_free(s);
      return NULL;
    }
  return s;
}

void kb_k8s_ctls_set_clock(k8s_ctls *s, kb_vclock *clock) {
  for (int i = 0; s && i < CTL_N; i++)
    if (s->c[i]->set_clock) s->c[i]->set_clock(s->c[i], clock);
}

void kb_k8s_ctls_leases_read(k8s_ctls *s) {
  if (s) kb_k8s_nodelease_read(s->c[CTL_NODELEASE]);
}

void kb_k8s_ctls_set_apiserver(k8s_ctls *s, const char *ip, int port) {
  if (s) kb_k8s_endpoints_set_apiserver(s->c[CTL_ENDPOINTS], ip, port);
}

void kb_k8s_ctls_set_pod_gc(k8s_ctls *s, size_t threshold) {
  if (s) kb_k8s_podgc_set_threshold(s->c[CTL_PODGC], threshold);
}

void kb_k8s_ctls_free(k8s_ctls *s) {
  if (!s) return;
  for (int i = CTL_N - 1; i >= 0; i--)
    if (s->c[i]) s->c[i]->free(s->c[i]);
  free(s);
}

/* ---- helpers ---- */

const cJSON *kb_ctl_controller_ref(const cJSON *obj) {
  const cJSON *r;
  cJSON_ArrayForEach(r, kb_k8s_path(obj, "metadata.ownerReferences"))
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "controller"))) return r;
  return NULL;
}

int kb_ctl_owned_by(const cJSON *obj, const char *kind, const char *uid) {
  const cJSON *r = kb_ctl_controller_ref(obj);
  const char *k = kb_k8s_path_str(r, "kind"), *u = kb_k8s_path_str(r, "uid");
  return k && u && uid && !strcmp(k, kind) && !strcmp(u, uid);
}

cJSON *kb_ctl_owner_ref(const char *api_version, const char *kind, const char *name, const char *uid) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "apiVersion", api_version);
  cJSON_AddStringToObject(r, "kind", kind);
  cJSON_AddStringToObject(r, "name", name);
  cJSON_AddStringToObject(r, "uid", uid ? uid : "");
  cJSON_AddBoolToObject(r, "controller", 1);
  cJSON_AddBoolToObject(r, "blockOwnerDeletion", 1);
  return r;
}

int kb_ctl_pod_ready(const cJSON *pod) {
  const cJSON *c;
  cJSON_ArrayForEach(c, kb_k8s_path(pod, "status.conditions")) {
    const char *t = kb_k8s_path_str(c, "type"), *s = kb_k8s_path_str(c, "status");
    if (t && s && !strcmp(t, "Ready")) return !strcmp(s, "True");
  }
  return 0;
}

int kb_ctl_pod_active(const cJSON *pod) {
  const char *phase = kb_k8s_path_str(pod, "status.phase");
  if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"))) return 0;
  return !kb_k8s_meta_str(pod, "deletionTimestamp");
}

cJSON *kb_ctl_list(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *labels,
                const cJSON **items) {
  kb_k8s_list_opts o = {.ns = ns, .label_selector = labels};
  cJSON *list = NULL;
  if (kb_k8s_list(st, res, &o, &list, NULL)) return NULL;
  *items = cJSON_GetObjectItemCaseSensitive(list, "items");
  return list;
}

int kb_ctl_put_status(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                   const cJSON *status) {
  const cJSON *cur = kb_k8s_peek(st, res, ns, name);
  if (!cur) return -404;
  const cJSON *old = cJSON_GetObjectItemCaseSensitive(cur, "status");
  if (old && cJSON_Compare(old, status, 1)) return 0;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(cJSON_AddObjectToObject(o, "metadata"), "name", cJSON_CreateString(name));
  cJSON_AddItemToObject(o, "status", cJSON_Duplicate(status, 1));
  int rc = kb_k8s_update(st, res, ns, name, o, res->status_subresource ? KB_K8S_STATUS : 0, NULL,
                         NULL);
  cJSON_Delete(o);
  return rc < 0 ? rc : 1;
}

int kb_ctl_merge(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
              const cJSON *patch) {
  char *text = cJSON_PrintUnformatted(patch);
  if (!text) return -500;
  int rc = kb_k8s_patch(st, res, ns, name, KB_K8S_PATCH_MERGE, text, strlen(text), 0, NULL, NULL);
  free(text);
  return rc;
}

const cJSON **kb_ctl_peek_all(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, size_t *n) {
  *n = 0;
  if (!res || res->index < 0 || (size_t)res->index >= st->n_buckets) return NULL;
  const k8s_bucket *b = st->buckets[res->index];
  const cJSON **out = malloc((b->n ? b->n : 1) * sizeof *out);
  if (!out) return NULL;
  for (size_t i = 0; i < b->n; i++)
    if (!ns || !strcmp(b->v[i].ns, ns)) out[(*n)++] = kb_k8s_entry_tree(st, &b->v[i]);
  return out;
}
