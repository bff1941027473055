/* Delete with finalizers, preconditions and propagation (foreground,
 * background, orphan), and the garbage collection of dependents. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "k8s_internal.h"
#include "kb/base64.h"

#define MAX_GC_DEPTH 16

/* ---- delete -------------------------------------------------------------- */

void kb_k8s_finish_delete(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e, cJSON **out) {
  char *ns = strdup(e->ns), *name = strdup(e->name);
  k8s_obj *o = kb_k8s_take_entry(st, res, e);
  /* the last state as of this write's resourceVersion (the caller bumped
   * the counter): a new state unless the write that deleted it set it */
  char rv[24];
  snprintf(rv, sizeof rv, "%llu", (unsigned long long)st->rv);
  const cJSON *cur = kb_k8s_obj_tree(st, o);
  const char *orv = cur ? kb_k8s_meta_str(cur, "resourceVersion") : NULL;
  k8s_obj *last = o;
  if (!orv || strcmp(orv, rv)) {
    cJSON *c = kb_k8s_obj_copy(o);
    last = c && !kb_k8s_set_rv(c, st->rv) ? kb_k8s_obj_new(st, res->index, c) : NULL;
    if (!last) cJSON_Delete(c);
    kb_k8s_obj_unref(o);
  }
  if (out) *out = last ? kb_k8s_obj_copy(last) : NULL;
  if (last) kb_k8s_emit(st, KB_K8S_DELETED, res, last, NULL); /* out of memory: no event */
  if (ns && name && !strcmp(res->resource, "pods") && !res->group[0])
    kb_k8s_log_drop_pod(st, ns, name);
  kb_k8s_obj_unref(last);
  free(ns);
  free(name);
}

typedef struct dep_ref {
  const kb_k8s_res *res;
  char *ns, *name;
} dep_ref;

static int owned_by(const cJSON *obj, const char *uid) {
  const cJSON *refs =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
                                       "ownerReferences");
  const cJSON *r;
  cJSON_ArrayForEach(r, refs) {
    const char *u = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "uid"));
    if (u && !strcmp(u, uid)) return 1;
  }
  return 0;
}

typedef struct dep_list {
  kb_k8s_store *st;
  dep_ref *v;
  size_t n, cap;
  int oom;
} dep_list;

static void dep_push(dep_list *l, const kb_k8s_res *res, const char *ns, const char *name) {
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 8;
    dep_ref *nv = realloc(l->v, cap * sizeof *nv);
    if (!nv) {
      l->oom = 1;
      return;
    }
    l->v = nv;
    l->cap = cap;
  }
  dep_ref d = {res, strdup(ns), strdup(name)};
  if (!d.ns || !d.name) {
    free(d.ns);
    free(d.name);
    l->oom = 1;
    return;
  }
  l->v[l->n++] = d;
}

static void dep_indexed(void *ud, int res_index, const char *ns, const char *name) {
  dep_list *l = ud;
  if (res_index < 0 || (size_t)res_index >= l->st->n_buckets) return;
  dep_push(l, &l->st->buckets[res_index]->res, ns, name);
}

/* Every object owned by uid (or, for a namespace, in it): from the owners
 * index, or by a scan when the index is incomplete or for a namespace. */
static dep_ref *dependents(kb_k8s_store *st, const char *uid, const char *in_ns, size_t *n) {
  dep_list l = {st, NULL, 0, 0, 0};
  if (in_ns || kb_k8s_owners_dependents(st->owners, uid, dep_indexed, &l) < 0) {
    for (size_t i = 0; i < st->n_buckets; i++) {
      k8s_bucket *b = st->buckets[i];
      for (size_t j = 0; j < b->n; j++) {
        if (in_ns ? strcmp(b->v[j].ns, in_ns) || !b->res.namespaced
                  : !owned_by(kb_k8s_entry_tree(st, &b->v[j]), uid))
          continue;
        dep_push(&l, &b->res, b->v[j].ns, b->v[j].name);
      }
    }
  }
  *n = l.n;
  return l.v;
}

static void free_deps(dep_ref *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(v[i].ns);
    free(v[i].name);
  }
  free(v);
}

static int delete_depth(kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                        const char *name, const kb_k8s_delete_opts *opts, cJSON **out,
                        kb_k8s_error *err, int depth);

static void orphan(kb_k8s_store *st, dep_ref *d, const char *uid) {
  k8s_entry *e = kb_k8s_entry_find(st, d->res, d->ns, d->name);
  if (!e) return;
  cJSON *next = kb_k8s_obj_copy(e->o);
  cJSON *refs = next ? cJSON_GetObjectItemCaseSensitive(kb_k8s_meta(next), "ownerReferences") : NULL;
  cJSON *r = refs ? refs->child : NULL;
  while (r) {
    cJSON *nx = r->next;
    const char *u = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "uid"));
    if (u && !strcmp(u, uid)) cJSON_Delete(cJSON_DetachItemViaPointer(refs, r));
    r = nx;
  }
  if (refs && !refs->child) cJSON_DeleteItemFromObjectCaseSensitive(kb_k8s_meta(next), "ownerReferences");
  if (next) kb_k8s_replace_entry(st, d->res, e, next, 0, NULL, NULL);
}

static void collect_garbage(kb_k8s_store *st, const char *uid, const char *in_ns,
                            kb_k8s_propagation how, int depth) {
  size_t n;
  dep_ref *deps = dependents(st, uid, in_ns, &n);
  kb_k8s_delete_opts o = {KB_K8S_PROPAGATE_BACKGROUND, NULL, NULL, 0};
  for (size_t i = 0; i < n; i++) {
    if (how == KB_K8S_PROPAGATE_ORPHAN && !in_ns) orphan(st, &deps[i], uid);
    else delete_depth(st, deps[i].res, deps[i].ns, deps[i].name, &o, NULL, NULL, depth + 1);
  }
  free_deps(deps, n);
}

static int delete_depth(kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                        const char *name, const kb_k8s_delete_opts *opts, cJSON **out,
                        kb_k8s_error *err, int depth) {
  if (out) *out = NULL;
  if (!kb_k8s_bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  k8s_entry *e = kb_k8s_entry_find(st, res, ns, name);
  if (!e) return kb_k8s_not_found(err, res, name ? name : "");
  kb_k8s_delete_opts dflt = {0};
  if (!opts) opts = &dflt;
  const cJSON *cur = kb_k8s_entry_tree(st, e);
  if (!cur) return kb_k8s_oom(err);
  const char *uid = kb_k8s_meta_str(cur, "uid");
  if (opts->precondition_uid && *opts->precondition_uid &&
      strcmp(opts->precondition_uid, uid ? uid : ""))
    return kb_k8s_err_named(err, name,
                     kb_k8s_error_set(err, 409, "Conflict",
                                      "Precondition failed: UID in precondition: %s, UID in "
                                      "object meta: %s", opts->precondition_uid, uid ? uid : ""));
  if (opts->precondition_rv && *opts->precondition_rv &&
      strcmp(opts->precondition_rv, kb_k8s_meta_str(cur, "resourceVersion")))
    return kb_k8s_conflict(err, res, name);
  if (opts->flags & KB_K8S_DRY_RUN) {
    if (out) *out = cJSON_Duplicate(cur, 1);
    return 0;
  }
  kb_k8s_propagation how = opts->propagation;
  if (how == KB_K8S_PROPAGATE_DEFAULT)
    how = !strcmp(res->group, "batch") && !strcmp(res->resource, "jobs")
              ? KB_K8S_PROPAGATE_ORPHAN
              : KB_K8S_PROPAGATE_BACKGROUND;
  char *uidc = strdup(uid ? uid : "");
  char *nsc = strdup(e->ns), *namec = strdup(e->name);
  if (!uidc || !nsc || !namec) {
    free(uidc); free(nsc); free(namec);
    return kb_k8s_oom(err);
  }
  int is_ns = !res->group[0] && !strcmp(res->resource, "namespaces");
  int rc = 0;
  if (depth < MAX_GC_DEPTH && (how != KB_K8S_PROPAGATE_BACKGROUND || is_ns)) {
    /* foreground (and namespaces): dependents go first; orphan: unlink */
    collect_garbage(st, uidc, is_ns ? namec : NULL, how, depth);
  }
  e = kb_k8s_entry_find(st, res, nsc, namec);
  if (!e) {
    rc = kb_k8s_not_found(err, res, namec);
  } else if (kb_k8s_has_finalizers((cur = kb_k8s_entry_tree(st, e)))) {
    if (!kb_k8s_meta_str(cur, "deletionTimestamp")) {
      char ts[32];
      kb_k8s_format_time(kb_k8s_store_now(st), ts);
      cJSON *next = cJSON_Duplicate(cur, 1);
      cJSON *m = next ? kb_k8s_meta(next) : NULL;
      if (!m || kb_k8s_set_str(m, "deletionTimestamp", ts) ||
          kb_k8s_set_item(m, "deletionGracePeriodSeconds", cJSON_CreateNumber(0))) {
        cJSON_Delete(next);
        rc = kb_k8s_oom(err);
      } else {
        rc = kb_k8s_replace_entry(st, res, e, next, K8S_MARK_DELETED, out, err);
      }
    } else if (out) {
      *out = cJSON_Duplicate(cur, 1);
    }
    if (!rc) rc = 1;
  } else {
    st->rv++;
    kb_k8s_finish_delete(st, res, e, out);
  }
  if (rc >= 0 && depth < MAX_GC_DEPTH && how == KB_K8S_PROPAGATE_BACKGROUND && !is_ns)
    collect_garbage(st, uidc, NULL, how, depth);
  free(uidc); free(nsc); free(namec);
  return rc;
}

int kb_k8s_delete(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  const kb_k8s_delete_opts *opts, cJSON **out, kb_k8s_error *err) {
  return delete_depth(st, res, ns, name, opts, out, err, 0);
}
