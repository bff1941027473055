/* The store-level controllers as one set (k8s_ctl.h), and what they share:
 * selectors as text, controller references, pod readiness, writes that
 * only happen when something changed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"

enum { CTL_DEPLOY, CTL_RS, CTL_ENDPOINTS, CTL_CRONJOB, CTL_NODELEASE, CTL_N };

struct k8s_ctls {
  k8s_ctl *c[CTL_N];
};

k8s_ctls *k8s_ctls_start(kb_k8s_store *st) {
  k8s_ctls *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->c[CTL_DEPLOY] = k8s_deploy_start(st);
  s->c[CTL_RS] = k8s_replicaset_start(st);
  s->c[CTL_ENDPOINTS] = k8s_endpoints_start(st);
  s->c[CTL_CRONJOB] = k8s_cronjob_start(st);
  s->c[CTL_NODELEASE] = k8s_nodelease_start(st);
  for (int i = 0; i < CTL_N; i++)
    if (!s->c[i]) {
      k8s_ctls_free(s);
      return NULL;
    }
  return s;
}

void k8s_ctls_set_clock(k8s_ctls *s, kb_vclock *clock) {
  for (int i = 0; s && i < CTL_N; i++)
    if (s->c[i]->set_clock) s->c[i]->set_clock(s->c[i], clock);
}

void k8s_ctls_set_apiserver(k8s_ctls *s, const char *ip, int port) {
  if (s) k8s_endpoints_set_apiserver(s->c[CTL_ENDPOINTS], ip, port);
}

void k8s_ctls_free(k8s_ctls *s) {
  if (!s) return;
  for (int i = CTL_N - 1; i >= 0; i--)
    if (s->c[i]) s->c[i]->free(s->c[i]);
  free(s);
}

/* ---- helpers ---- */

static int append(char *out, size_t n, size_t *at, const char *fmt, const char *a, const char *b) {
  int w = snprintf(out + *at, n - *at, fmt, *at ? "," : "", a, b);
  if (w < 0 || (size_t)w >= n - *at) return -1;
  *at += (size_t)w;
  return 0;
}

int ctl_selector_text(const cJSON *sel, char *out, size_t n) {
  size_t at = 0;
  out[0] = 0;
  const cJSON *kv, *e;
  cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(sel, "matchLabels")) {
    if (!cJSON_IsString(kv) || append(out, n, &at, "%s%s=%s", kv->string, kv->valuestring))
      return -1;
  }
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(sel, "matchExpressions")) {
    const char *key = ctl_str(e, "key"), *op = ctl_str(e, "operator");
    if (!key || !op) return -1;
    char vals[512];
    size_t vn = 0;
    vals[0] = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(e, "values")) {
      if (!cJSON_IsString(v) || append(vals, sizeof vals, &vn, "%s%s%s", v->valuestring, ""))
        return -1;
    }
    int rc = !strcmp(op, "In")       ? append(out, n, &at, "%s%s in (%s)", key, vals)
             : !strcmp(op, "NotIn")  ? append(out, n, &at, "%s%s notin (%s)", key, vals)
             : !strcmp(op, "Exists") ? append(out, n, &at, "%s%s%s", key, "")
             : !strcmp(op, "DoesNotExist") ? append(out, n, &at, "%s!%s%s", key, "")
                                           : -1;
    if (rc) return -1;
  }
  return 0;
}

const cJSON *ctl_controller_ref(const cJSON *obj) {
  const cJSON *r;
  cJSON_ArrayForEach(r, k8s_path(obj, "metadata.ownerReferences"))
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "controller"))) return r;
  return NULL;
}

int ctl_owned_by(const cJSON *obj, const char *kind, const char *uid) {
  const cJSON *r = ctl_controller_ref(obj);
  const char *k = ctl_str(r, "kind"), *u = ctl_str(r, "uid");
  return k && u && uid && !strcmp(k, kind) && !strcmp(u, uid);
}

cJSON *ctl_owner_ref(const char *api_version, const char *kind, const char *name, const char *uid) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "apiVersion", api_version);
  cJSON_AddStringToObject(r, "kind", kind);
  cJSON_AddStringToObject(r, "name", name);
  cJSON_AddStringToObject(r, "uid", uid ? uid : "");
  cJSON_AddBoolToObject(r, "controller", 1);
  cJSON_AddBoolToObject(r, "blockOwnerDeletion", 1);
  return r;
}

int ctl_pod_ready(const cJSON *pod) {
  const cJSON *c;
  cJSON_ArrayForEach(c, k8s_path(pod, "status.conditions")) {
    const char *t = ctl_str(c, "type"), *s = ctl_str(c, "status");
    if (t && s && !strcmp(t, "Ready")) return !strcmp(s, "True");
  }
  return 0;
}

int ctl_pod_active(const cJSON *pod) {
  const char *phase = ctl_str(pod, "status.phase");
  if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"))) return 0;
  return !k8s_meta_str(pod, "deletionTimestamp");
}

cJSON *ctl_list(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *labels,
                const cJSON **items) {
  kb_k8s_list_opts o = {.ns = ns, .label_selector = labels};
  cJSON *list = NULL;
  if (kb_k8s_list(st, res, &o, &list, NULL)) return NULL;
  *items = cJSON_GetObjectItemCaseSensitive(list, "items");
  return list;
}

int ctl_put_status(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
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

int ctl_merge(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
              const cJSON *patch) {
  char *text = cJSON_PrintUnformatted(patch);
  if (!text) return -500;
  int rc = kb_k8s_patch(st, res, ns, name, KB_K8S_PATCH_MERGE, text, strlen(text), 0, NULL, NULL);
  free(text);
  return rc;
}

double ctl_num(const cJSON *obj, const char *path, double dflt) {
  const cJSON *v = k8s_path(obj, path);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *ctl_str(const cJSON *obj, const char *path) {
  return cJSON_GetStringValue(k8s_path(obj, path));
}

const cJSON **ctl_peek_all(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, size_t *n) {
  *n = 0;
  if (!res || res->index < 0 || (size_t)res->index >= st->n_buckets) return NULL;
  const k8s_bucket *b = st->buckets[res->index];
  const cJSON **out = malloc((b->n ? b->n : 1) * sizeof *out);
  if (!out) return NULL;
  for (size_t i = 0; i < b->n; i++)
    if (!ns || !strcmp(b->v[i].ns, ns)) out[(*n)++] = b->v[i].obj;
  return out;
}
