/* argo-server's workflow archive, as with persistence.archive on: every
 * Workflow that completes (label workflows.argoproj.io/completed=true) is
 * copied into the archive, and stays there when the live object is
 * deleted. /api/v1/archived-workflows lists them (newest first: metadata,
 * an empty spec and the status without nodes, as argo's archive query
 * returns them;
 * listOptions.labelSelector, namespace, namePrefix, listOptions.limit and
 * continue), .../{uid} gets one whole, DELETE removes it, PUT
 * .../{uid}/resubmit makes a new Workflow from it. A workflow completing
 * again (after a retry) replaces its copy. The archive is in memory and
 * keeps the newest ARCHIVE_MAX workflows (older ones drop out, so a
 * simulator serving storm after storm stays flat). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argo_internal.h"
#include "k8s_internal.h"

#define ARCHIVE_MAX 1000

struct argo_archive {
  argo_env *env;
  kb_k8s_watch *w;
  cJSON *items; /* array, oldest first */
  int n;        /* its size */
};

static const char *label_of(const cJSON *o, const char *key) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "labels"), key));
}

/* Each archived copy carries a hash of its uid in valueint (unused in an
 * object, never printed), so that finding a uid among ARCHIVE_MAX copies,
 * which every completing workflow does, compares integers, not trees. */
static int uid_hash(const char *uid) {
  uint32_t h = 2166136261u;
  for (; uid && *uid; uid++) h = (h ^ (unsigned char)*uid) * 16777619u;
  return (int)(h & 0x7fffffff);
}

static cJSON *find_uid(const argo_archive *ar, const char *uid, int *index) {
  if (!uid) return NULL;
  int i = 0, h = uid_hash(uid);
  cJSON *w;
  cJSON_ArrayForEach(w, ar->items) {
    const char *u = w->valueint == h ? kb_k8s_meta_str(w, "uid") : NULL;
    if (u && !strcmp(u, uid)) {
      if (index) *index = i;
      return w;
    }
    i++;
  }
  return NULL;
}

static void on_workflow(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  argo_archive *ar = ud;
  if (type != KB_K8S_ADDED && type != KB_K8S_MODIFIED) return;
  const char *done = label_of(obj, "workflows.argoproj.io/completed");
  if (!done || strcmp(done, "true")) return;
  int at = -1;
  if (find_uid(ar, kb_k8s_meta_str(obj, "uid"), &at)) {
    cJSON_DeleteItemFromArray(ar->items, at);
    ar->n--;
  }
  cJSON *copy = cJSON_Duplicate(obj, 1);
  if (!copy) return;
  copy->valueint = uid_hash(kb_k8s_meta_str(obj, "uid"));
  cJSON_AddItemToArray(ar->items, copy);
  if (++ar->n > ARCHIVE_MAX) {
    cJSON_DeleteItemFromArray(ar->items, 0);
    ar->n--;
  }
}

argo_archive *kb_argo_archive_new(argo_env *env) {
  argo_archive *ar = calloc(1, sizeof *ar);
  if (!ar) return NULL;
  ar->env = env;
  ar->items = cJSON_CreateArray();
  ar->w = ar->items ? kb_k8s_store_on(env->st, env->wfs, on_workflow, ar) : NULL;
  if (!ar->w) {
    cJSON_Delete(ar->items);
    free(ar);
    return NULL;
  }
  return ar;
}

void kb_argo_archive_free(argo_archive *ar) {
  if (!ar) return;
  kb_k8s_watch_cancel(ar->w);
  cJSON_Delete(ar->items);
  free(ar);
}

/* What the archive's list returns of a workflow. */
static cJSON *summary(const cJSON *w) {
  cJSON *o = cJSON_CreateObject();
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(w, "metadata");
  cJSON *m = cJSON_AddObjectToObject(o, "metadata");
  static const char *keep[] = {"name", "namespace", "uid", "creationTimestamp", "labels", "annotations"};
  for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, keep[i]);
    if (v) cJSON_AddItemToObject(m, keep[i], cJSON_Duplicate(v, 1));
  }
  cJSON_AddObjectToObject(o, "spec"); /* argo's query selects no spec field: an empty one */
  cJSON *st = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(w, "status"), 1);
  if (st) {
    cJSON_DeleteItemFromObjectCaseSensitive(st, "nodes");
    cJSON_AddItemToObject(o, "status", st);
  }
  return o;
}

static void do_list(argo_archive *ar, kb_httpd_req *req) {
  const char *q = kb_httpd_req_query(req);
  char labels[1024], ns[256], prefix[256], limit[32], cont[32];
  kb_argo_query(q, "listOptions.labelSelector", labels, sizeof labels);
  if (!kb_argo_query(q, "namespace", ns, sizeof ns) || !*ns) kb_argo_query(q, "listOptions.namespace", ns, sizeof ns);
  kb_argo_query(q, "namePrefix", prefix, sizeof prefix);
  kb_argo_query(q, "listOptions.limit", limit, sizeof limit);
  kb_argo_query(q, "listOptions.continue", cont, sizeof cont);
  kb_k8s_error err = {0};
  kb_k8s_selector *sel = kb_k8s_selector_parse(labels, "", ar->env->wfs, &err);
  if (!sel) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  long max = atol(limit), skip = atol(cont), seen = 0, n = 0;
  cJSON *out = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(out, "items");
  cJSON *md = cJSON_AddObjectToObject(out, "metadata");
  int more = 0;
  for (int i = cJSON_GetArraySize(ar->items) - 1; i >= 0; i--) { /* newest first */
    const cJSON *w = cJSON_GetArrayItem(ar->items, i);
    const char *wns = kb_k8s_meta_str(w, "namespace"), *name = kb_k8s_meta_str(w, "name");
    if (*ns && (!wns || strcmp(wns, ns))) continue;
    if (*prefix && (!name || strncmp(name, prefix, strlen(prefix)))) continue;
    if (!kb_k8s_selector_match(sel, w)) continue;
    if (seen++ < skip) continue;
    if (max > 0 && n == max) {
      more = 1;
      break;
    }
    cJSON_AddItemToArray(items, summary(w));
    n++;
  }
  kb_k8s_selector_free(sel);
  if (more) {
    char tok[32];
    snprintf(tok, sizeof tok, "%ld", skip + n);
    cJSON_AddStringToObject(md, "continue", tok);
  }
  kb_argo_send_json(req, 200, out);
}

void kb_argo_archive_route(argo_archive *ar, kb_httpd_req *req, const char *m, int n, char seg[][256]) {
  if (!ar) {
    kb_argo_send_error(req, 500, "the workflow archive is not available");
    return;
  }
  if (n == 1 && !strcmp(m, "GET")) {
    do_list(ar, req);
    return;
  }
  int at = -1;
  cJSON *w = n >= 2 ? find_uid(ar, seg[1], &at) : NULL;
  if (n >= 2 && n <= 3 && !w) {
    kb_argo_send_error(req, 404, "not found");
  } else if (n == 2 && !strcmp(m, "GET")) {
    kb_argo_send_json(req, 200, cJSON_Duplicate(w, 1));
  } else if (n == 2 && !strcmp(m, "DELETE")) {
    cJSON_DeleteItemFromArray(ar->items, at);
    ar->n--;
    kb_argo_send_json(req, 200, cJSON_CreateObject());
  } else if (n == 3 && !strcmp(m, "PUT") && !strcmp(seg[2], "resubmit")) {
    kb_argo_resubmit(ar->env, req, kb_k8s_meta_str(w, "namespace"), kb_k8s_meta_str(w, "name"),
                  cJSON_Duplicate(w, 1));
  } else if (n == 3 && !strcmp(m, "PUT") && !strcmp(seg[2], "retry")) {
    kb_argo_send_error(req, 501, "retry of an archived workflow is not supported by the simulator");
  } else {
    kb_argo_send_error(req, 404, "Not Found");
  }
}
