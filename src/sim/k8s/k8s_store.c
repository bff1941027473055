/* The in-memory object store (include/kb/k8s_store.h): resource types,
 * keyed access, and create/update/patch with the apiserver's metadata
 * rules. Objects are held as k8s_obj (k8s_obj.c), the watch history and
 * event delivery are k8s_watch.c's, delete and garbage collection
 * k8s_delete.c's, lists k8s_list.c's, errors and Status k8s_status.c's;
 * selectors live in k8s_select.c, logs in k8s_log.c, the built-in types in
 * k8s_builtin.c, patches in k8s_patch.c. */
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

#define DEFAULT_HISTORY 4096

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static uint64_t rng_next(kb_k8s_store *st) {
  /* splitmix64: deterministic ids from the configured seed */
  uint64_t z = (st->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void new_uid(kb_k8s_store *st, char out[37]) {
  uint64_t a = rng_next(st), b = rng_next(st);
  a = (a & ~0xf000ull) | 0x4000ull;                 /* version 4 */
  b = (b & 0x3fffffffffffffffull) | 0x8000000000000000ull; /* variant */
  snprintf(out, 37, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32),
           (unsigned)((a >> 16) & 0xffff), (unsigned)(a & 0xffff), (unsigned)(b >> 48),
           (unsigned long long)(b & 0xffffffffffffull));
}

/* ---- the store and its types ---------------------------------------- */

kb_k8s_store *kb_k8s_store_new(const kb_k8s_store_config *cfg) {
  kb_k8s_store *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  if (cfg) st->cfg = *cfg;
  if (!st->cfg.history) st->cfg.history = DEFAULT_HISTORY;
  snprintf(st->service_cidr, sizeof st->service_cidr, "%s",
           st->cfg.service_cidr ? st->cfg.service_cidr : "10.96.0.0/12");
  st->cfg.service_cidr = NULL; /* the copy is the one read */
  st->rng = st->cfg.seed ? st->cfg.seed : 1;
  st->ring = calloc(st->cfg.history, sizeof *st->ring);
  st->owners = kb_k8s_owners_new();
  if (!st->ring || !st->owners) {
    free(st->ring);
    kb_k8s_owners_free(st->owners);
    free(st);
    return NULL;
  }
  return st;
}

void kb_k8s_event_unref(k8s_event *ev) {
  if (ev && --ev->refs == 0) {
    kb_k8s_obj_unref(ev->obj);
    kb_k8s_obj_unref(ev->prev);
    free(ev);
  }
}

static void res_free(kb_k8s_res *r) {
  free(r->group); free(r->version); free(r->resource); free(r->kind); free(r->singular);
  free(r->list_kind); free(r->short_names); free(r->categories); free(r->field_labels);
  free(r->api_version);
  for (size_t i = 0; i < r->n_columns; i++) {
    free((char *)r->columns[i].name); free((char *)r->columns[i].type);
    free((char *)r->columns[i].json_path); free((char *)r->columns[i].description);
  }
  free(r->columns);
}

void kb_k8s_watch_free(kb_k8s_watch *w) {
  kb_k8s_selector_free(w->sel);
  free(w->ns);
  free(w);
}

void kb_k8s_store_free(kb_k8s_store *st) {
  if (!st) return;
  kb_k8s_owners_free(st->owners);
  while (st->watches) {
    kb_k8s_watch *w = st->watches;
    st->watches = w->next;
    kb_k8s_watch_free(w);
  }
  while (st->pend_head) {
    k8s_pending *p = st->pend_head;
    st->pend_head = p->next;
    kb_k8s_event_unref(p->ev);
    free(p);
  }
  for (size_t i = 0; i < st->ring_count; i++)
    kb_k8s_event_unref(st->ring[(st->ring_head + i) % st->cfg.history]);
  free(st->ring);
  for (size_t i = 0; i < st->n_buckets; i++) {
    k8s_bucket *b = st->buckets[i];
    for (size_t j = 0; j < b->n; j++) {
      free(b->v[j].ns);
      free(b->v[j].name);
      kb_k8s_obj_unref(b->v[j].o);
    }
    free(b->v);
    res_free(&b->res);
    free(b);
  }
  free(st->buckets);
  free(st->hot);
  kb_k8s_pack_free(st);
  kb_k8s_log_free_all(st);
  free(st);
}

const kb_k8s_res *kb_k8s_store_lookup(const kb_k8s_store *st, const char *group,
                                      const char *version, const char *resource) {
  for (size_t i = 0; i < st->n_buckets; i++) {
    const kb_k8s_res *r = &st->buckets[i]->res;
    if (!strcmp(r->group, group ? group : "") && (!version || !strcmp(r->version, version)) &&
        !strcmp(r->resource, resource))
      return r;
  }
  return NULL;
}

static int in_csv(const char *csv, const char *name) {
  size_t n = strlen(name);
  for (const char *p = csv; p && *p;) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == n && !strncasecmp(p, name, n)) return 1;
    p = c ? c + 1 : NULL;
  }
  return 0;
}

const kb_k8s_res *kb_k8s_store_find(const kb_k8s_store *st, const char *group,
                                    const char *name) {
  for (size_t i = 0; i < st->n_buckets; i++) {
    const kb_k8s_res *r = &st->buckets[i]->res;
    if (group && strcmp(r->group, group)) continue;
    if (!strcmp(r->resource, name) || !strcmp(r->singular, name) ||
        !strcasecmp(r->kind, name) || in_csv(r->short_names, name))
      return r;
  }
  return NULL;
}

size_t kb_k8s_store_resource_count(const kb_k8s_store *st) { return st->n_buckets; }

const kb_k8s_res *kb_k8s_store_resource_at(const kb_k8s_store *st, size_t i) {
  return i < st->n_buckets ? &st->buckets[i]->res : NULL;
}

uint64_t kb_k8s_store_rv(const kb_k8s_store *st) { return st->rv; }

const kb_k8s_res *kb_k8s_store_add_resource(kb_k8s_store *st, const kb_k8s_resdef *d) {
  if (!d->version || !d->resource || !d->kind) return NULL;
  if (kb_k8s_store_lookup(st, d->group, NULL, d->resource)) return NULL;
  k8s_bucket *b = calloc(1, sizeof *b);
  k8s_bucket **nb = realloc(st->buckets, (st->n_buckets + 1) * sizeof *nb);
  if (!b || !nb) {
    free(b);
    if (nb) st->buckets = nb;
    return NULL;
  }
  st->buckets = nb;
  kb_k8s_res *r = &b->res;
  char tmp[256];
  r->group = strdup(d->group ? d->group : "");
  r->version = strdup(d->version);
  r->resource = strdup(d->resource);
  r->kind = strdup(d->kind);
  if (d->singular) {
    r->singular = strdup(d->singular);
  } else {
    r->singular = strdup(d->kind);
    for (char *p = r->singular; p && *p; p++) *p = (char)tolower((unsigned char)*p);
  }
  snprintf(tmp, sizeof tmp, "%sList", d->kind);
  r->list_kind = strdup(tmp);
  if (r->group && r->group[0]) snprintf(tmp, sizeof tmp, "%s/%s", r->group, d->version);
  else snprintf(tmp, sizeof tmp, "%s", d->version);
  r->api_version = strdup(tmp);
  r->short_names = strdup(d->short_names ? d->short_names : "");
  r->categories = strdup(d->categories ? d->categories : "");
  r->field_labels = strdup(d->field_labels ? d->field_labels : "");
  r->namespaced = d->namespaced;
  r->status_subresource = d->status_subresource;
  r->custom = d->custom;
  r->index = (int)st->n_buckets;
  int bad = !r->group || !r->version || !r->resource || !r->kind || !r->singular ||
            !r->list_kind || !r->api_version || !r->short_names || !r->categories ||
            !r->field_labels;
  if (!bad && d->n_columns) {
    r->columns = calloc(d->n_columns, sizeof *r->columns);
    bad = !r->columns;
    for (size_t i = 0; !bad && i < d->n_columns; i++) {
      kb_k8s_column *c = &r->columns[i];
      r->n_columns++;
      c->name = xstrdup(d->columns[i].name);
      c->type = xstrdup(d->columns[i].type ? d->columns[i].type : "string");
      c->json_path = xstrdup(d->columns[i].json_path);
      c->description = xstrdup(d->columns[i].description ? d->columns[i].description : "");
      c->priority = d->columns[i].priority;
      bad = !c->name || !c->type || !c->json_path || !c->description;
    }
  }
  if (bad) {
    res_free(r);
    free(b);
    return NULL;
  }
  st->buckets[st->n_buckets++] = b;
  return r;
}

k8s_bucket *kb_k8s_bucket_of(const kb_k8s_store *st, const kb_k8s_res *res) {
  if (!res || res->index < 0 || (size_t)res->index >= st->n_buckets) return NULL;
  k8s_bucket *b = st->buckets[res->index];
  return &b->res == res ? b : NULL;
}

/* ---- keyed access ------------------------------------------------------ */

static int key_cmp(const char *ns1, const char *n1, const char *ns2, const char *n2) {
  int c = strcmp(ns1, ns2);
  return c ? c : strcmp(n1, n2);
}

/* Index of the first entry >= (ns, name); *found when equal. */
size_t kb_k8s_bucket_search(const k8s_bucket *b, const char *ns, const char *name, int *found) {
  size_t lo = 0, hi = b->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (key_cmp(b->v[mid].ns, b->v[mid].name, ns, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  if (found) *found = lo < b->n && !key_cmp(b->v[lo].ns, b->v[lo].name, ns, name);
  return lo;
}

static const char *ns_of(const kb_k8s_res *res, const char *ns) {
  return res->namespaced ? (ns && *ns ? ns : "default") : "";
}

k8s_entry *kb_k8s_entry_find(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                             const char *name) {
  k8s_bucket *b = kb_k8s_bucket_of(st, res);
  if (!b || !name) return NULL;
  int found;
  size_t i = kb_k8s_bucket_search(b, ns_of(res, ns), name, &found);
  return found ? &b->v[i] : NULL;
}

size_t kb_k8s_store_count(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns) {
  k8s_bucket *b = kb_k8s_bucket_of(st, res);
  if (!b) return 0;
  if (!ns || !*ns || !res->namespaced) return b->n;
  size_t n = 0;
  for (size_t i = kb_k8s_bucket_search(b, ns, "", NULL); i < b->n && !strcmp(b->v[i].ns, ns); i++) n++;
  return n;
}

int kb_k8s_not_found(kb_k8s_error *err, const kb_k8s_res *res, const char *name) {
  char q[160];
  kb_k8s_qualified(res, q, sizeof q);
  return kb_k8s_err_named(err, name,
                   kb_k8s_error_set(err, 404, "NotFound", "%s \"%s\" not found", q, name));
}

const cJSON *kb_k8s_peek(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                         const char *name) {
  k8s_entry *e = kb_k8s_entry_find(st, res, ns, name);
  return e ? kb_k8s_entry_tree(st, e) : NULL;
}

cJSON *kb_k8s_get(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  kb_k8s_error *err) {
  k8s_entry *e = kb_k8s_entry_find(st, res, ns, name);
  if (!e) {
    kb_k8s_not_found(err, res, name ? name : "");
    return NULL;
  }
  cJSON *c = kb_k8s_obj_copy(e->o);
  if (!c) kb_k8s_oom(err);
  return c;
}

/* ---- metadata rules ----------------------------------------------------- */

int kb_k8s_set_rv(cJSON *obj, uint64_t rv) {
  char s[24];
  snprintf(s, sizeof s, "%llu", (unsigned long long)rv);
  cJSON *m = kb_k8s_meta(obj);
  return m ? kb_k8s_set_str(m, "resourceVersion", s) : -1;
}

static int check_kind(const kb_k8s_res *res, const cJSON *obj, kb_k8s_error *err) {
  const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "kind"));
  const char *av = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "apiVersion"));
  if (kind && *kind && strcmp(kind, res->kind))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "the object provided is unrecognized (kind %s does not match the "
                            "resource, expected %s)", kind, res->kind);
  if (av && *av && strcmp(av, res->api_version))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "the API version in the data (%s) does not match the expected API "
                            "version (%s)", av, res->api_version);
  return 0;
}

/* Stores o (the entry takes the caller's reference). */
static int put_entry(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                     k8s_obj *o) {
  k8s_bucket *b = kb_k8s_bucket_of(st, res);
  int found;
  size_t i = kb_k8s_bucket_search(b, ns, name, &found);
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 16;
    k8s_entry *v = realloc(b->v, cap * sizeof *v);
    if (!v) return -1;
    b->v = v;
    b->cap = cap;
  }
  char *n1 = strdup(ns), *n2 = strdup(name);
  if (!n1 || !n2) {
    free(n1);
    free(n2);
    return -1;
  }
  memmove(&b->v[i + 1], &b->v[i], (b->n - i) * sizeof *b->v);
  b->v[i] = (k8s_entry){n1, n2, o};
  kb_k8s_obj_set_current(o, 1);
  b->n++;
  kb_k8s_owners_track(st->owners, res->index, n1, n2, kb_k8s_obj_tree(st, o), +1);
  return 0;
}

k8s_obj *kb_k8s_take_entry(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e) {
  k8s_bucket *b = kb_k8s_bucket_of(st, res);
  size_t i = (size_t)(e - b->v);
  k8s_obj *obj = e->o;
  kb_k8s_obj_set_current(obj, 0);
  kb_k8s_owners_track(st->owners, res->index, e->ns, e->name, kb_k8s_obj_tree(st, obj), -1);
  free(e->ns);
  free(e->name);
  memmove(&b->v[i], &b->v[i + 1], (b->n - i - 1) * sizeof *b->v);
  b->n--;
  return obj;
}

static int namespace_exists(kb_k8s_store *st, const char *ns) {
  const kb_k8s_res *nsr = kb_k8s_store_lookup(st, "", "v1", "namespaces");
  return !nsr || kb_k8s_peek(st, nsr, NULL, ns) != NULL;
}

static int gen_name(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *base,
                    char *out, size_t n) {
  static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  for (int attempt = 0; attempt < 16; attempt++) {
    char suffix[6];
    for (int i = 0; i < 5; i++) suffix[i] = alphabet[rng_next(st) % (sizeof alphabet - 1)];
    suffix[5] = '\0';
    snprintf(out, n, "%.58s%s", base, suffix);
    if (!kb_k8s_entry_find(st, res, ns, out)) return 0;
  }
  return -1;
}

/* A Secret's stringData becomes base64 data, as the apiserver stores it
 * (stringData is write-only: never stored or echoed). 0 or -1 (memory). */
static int secret_string_data(const kb_k8s_res *res, cJSON *obj) {
  if (strcmp(res->kind, "Secret") != 0) return 0;
  cJSON *sd = cJSON_DetachItemFromObjectCaseSensitive(obj, "stringData");
  if (!sd) return 0;
  int rc = 0;
  if (cJSON_IsObject(sd) && sd->child) {
    cJSON *data = cJSON_GetObjectItemCaseSensitive(obj, "data");
    if (!cJSON_IsObject(data)) {
      cJSON_DeleteItemFromObjectCaseSensitive(obj, "data");
      data = cJSON_AddObjectToObject(obj, "data");
    }
    for (cJSON *kv = sd->child; kv && data && !rc; kv = kv->next) {
      const char *v = cJSON_IsString(kv) ? kv->valuestring : "";
      size_t n = strlen(v);
      char *b64 = malloc(4 * ((n + 2) / 3) + 1);
      if (!b64) rc = -1;
      else {
        kb_k8s_base64_encode(v, n, b64);
        cJSON_DeleteItemFromObjectCaseSensitive(data, kv->string); /* stringData wins */
        if (!cJSON_AddStringToObject(data, kv->string, b64)) rc = -1;
        free(b64);
      }
    }
    if (!data) rc = -1;
  }
  cJSON_Delete(sd);
  return rc;
}

/* ---- create -------------------------------------------------------------- */

int kb_k8s_create(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const cJSON *in,
                  unsigned flags, cJSON **out, kb_k8s_error *err) {
  if (out) *out = NULL;
  if (!kb_k8s_bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  if (!cJSON_IsObject(in))
    return kb_k8s_error_set(err, 400, "BadRequest", "the body must be a JSON object");
  cJSON *obj = cJSON_Duplicate(in, 1);
  if (!obj) return kb_k8s_oom(err);
  return kb_k8s_create_take(st, res, ns, obj, flags, out, err);
}

int kb_k8s_create_take(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, cJSON *obj,
                       unsigned flags, cJSON **out, kb_k8s_error *err) {
  if (out) *out = NULL;
  if (!kb_k8s_bucket_of(st, res))
    return cJSON_Delete(obj), kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  if (!cJSON_IsObject(obj))
    return cJSON_Delete(obj), kb_k8s_error_set(err, 400, "BadRequest", "the body must be a JSON object");
  int rc = check_kind(res, obj, err);
  if (rc) return cJSON_Delete(obj), rc;
  cJSON *m = kb_k8s_meta(obj);
  if (!m || secret_string_data(res, obj)) return cJSON_Delete(obj), kb_k8s_oom(err);
  const char *ons = kb_k8s_meta_str(obj, "namespace");
  char nsbuf[256];
  if (res->namespaced) {
    if (ns && *ns && ons && *ons && strcmp(ns, ons)) {
      cJSON_Delete(obj);
      return kb_k8s_error_set(err, 400, "BadRequest",
                              "the namespace of the provided object does not match the "
                              "namespace sent on the request");
    }
    snprintf(nsbuf, sizeof nsbuf, "%s", ns && *ns ? ns : ons && *ons ? ons : "default");
  } else {
    nsbuf[0] = '\0';
    cJSON_DeleteItemFromObjectCaseSensitive(m, "namespace");
  }
  const char *name = kb_k8s_meta_str(obj, "name");
  const char *gen = kb_k8s_meta_str(obj, "generateName");
  char namebuf[256];
  if ((!name || !*name) && gen && *gen) {
    if (gen_name(st, res, nsbuf, gen, namebuf, sizeof namebuf)) {
      cJSON_Delete(obj);
      return kb_k8s_error_set(err, 409, "AlreadyExists",
                              "no unique name could be generated from %s", gen);
    }
  } else if (name && *name) {
    snprintf(namebuf, sizeof namebuf, "%s", name);
  } else {
    cJSON_Delete(obj);
    return kb_k8s_error_set(err, 422, "Invalid",
                            "%s \"\" is invalid: metadata.name: Required value: name or "
                            "generateName is required", res->kind);
  }
  /* the name, labels and annotations, as the apiserver words their errors */
  kb_k8s_set_str(kb_k8s_meta(obj), "name", namebuf);
  rc = kb_k8s_valid_name(res, namebuf, err);
  if (!rc) rc = kb_k8s_valid_meta(res, obj, err);
  if (rc) {
    cJSON_Delete(obj);
    return kb_k8s_err_named(err, namebuf, rc);
  }
  if (res->namespaced && !namespace_exists(st, nsbuf)) {
    cJSON_Delete(obj);
    return kb_k8s_err_named(err, nsbuf,
                     kb_k8s_error_set(err, 404, "NotFound", "namespaces \"%s\" not found",
                                      nsbuf));
  }
  if (kb_k8s_entry_find(st, res, nsbuf, namebuf)) {
    char q[160];
    kb_k8s_qualified(res, q, sizeof q);
    cJSON_Delete(obj);
    return kb_k8s_err_named(err, namebuf,
                     kb_k8s_error_set(err, 409, "AlreadyExists", "%s \"%s\" already exists", q,
                                      namebuf));
  }
  char uid[37], ts[32];
  new_uid(st, uid);
  kb_k8s_format_time(kb_k8s_store_now(st), ts);
  static const char *drop[] = {"deletionTimestamp", "deletionGracePeriodSeconds",
                               "resourceVersion", "managedFields"};
  size_t n_drop = sizeof drop / sizeof drop[0] - ((flags & K8S_KEEP_MANAGED) ? 1 : 0);
  for (size_t i = 0; i < n_drop; i++) cJSON_DeleteItemFromObjectCaseSensitive(m, drop[i]);
  int bad = kb_k8s_set_str(obj, "apiVersion", res->api_version) || kb_k8s_set_str(obj, "kind", res->kind) ||
            kb_k8s_set_str(m, "name", namebuf) || kb_k8s_set_str(m, "uid", uid) ||
            kb_k8s_set_str(m, "creationTimestamp", ts) ||
            kb_k8s_set_item(m, "generation", cJSON_CreateNumber(1)) ||
            (res->namespaced && kb_k8s_set_str(m, "namespace", nsbuf));
  if (bad) return cJSON_Delete(obj), kb_k8s_oom(err);
  /* K8S_WHOLE: the status is the caller's, not the defaults' (Pending) */
  cJSON *status = (flags & K8S_WHOLE) ? cJSON_DetachItemFromObjectCaseSensitive(obj, "status") : NULL;
  rc = kb_k8s_default(st, res, obj, 1, err);
  if (status) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON_AddItemToObject(obj, "status", status);
  }
  if (rc) {
    cJSON_Delete(obj);
    return kb_k8s_err_named(err, namebuf, rc);
  }
  kb_k8s_managed_record(st, res, NULL, obj);
  if (flags & KB_K8S_DRY_RUN) {
    if (out) *out = obj;
    else cJSON_Delete(obj);
    return 0;
  }
  if (kb_k8s_set_rv(obj, st->rv + 1)) return cJSON_Delete(obj), kb_k8s_oom(err);
  k8s_obj *o = kb_k8s_obj_new(st, res->index, obj);
  if (!o) return cJSON_Delete(obj), kb_k8s_oom(err);
  if (put_entry(st, res, nsbuf, namebuf, o)) return kb_k8s_obj_unref(o), kb_k8s_oom(err);
  st->rv++;
  if (out) *out = cJSON_Duplicate(obj, 1);
  kb_k8s_emit(st, KB_K8S_ADDED, res, o, NULL);
  return 0;
}

/* ---- update ------------------------------------------------------------ */

static int spec_changed(const cJSON *a, const cJSON *b) {
  for (const cJSON *x = a->child; x; x = x->next) {
    if (!strcmp(x->string, "metadata") || !strcmp(x->string, "status") ||
        !strcmp(x->string, "kind") || !strcmp(x->string, "apiVersion"))
      continue;
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
    if (!y || !cJSON_Compare(x, y, 1)) return 1;
  }
  for (const cJSON *y = b->child; y; y = y->next)
    if (!cJSON_GetObjectItemCaseSensitive(a, y->string) && strcmp(y->string, "metadata") &&
        strcmp(y->string, "status"))
      return 1;
  return 0;
}

int kb_k8s_conflict(kb_k8s_error *err, const kb_k8s_res *res, const char *name) {
  char q[160];
  kb_k8s_qualified(res, q, sizeof q);
  return kb_k8s_err_named(err, name,
                   kb_k8s_error_set(err, 409, "Conflict",
                                    "Operation cannot be fulfilled on %s \"%s\": the object has "
                                    "been modified; please apply your changes to the latest "
                                    "version and try again", q, name));
}

int kb_k8s_has_finalizers(const cJSON *obj) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
                                                    "finalizers");
  return cJSON_GetArraySize(f) > 0;
}


/* Stores `next` (consumed) in place of entry e after the metadata rules. */
int kb_k8s_replace_entry(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e, cJSON *next,
                         unsigned flags, cJSON **out, kb_k8s_error *err) {
  const cJSON *old = kb_k8s_entry_tree(st, e);
  if (!old) return cJSON_Delete(next), kb_k8s_oom(err);
  cJSON *m = kb_k8s_meta(next);
  cJSON *om = cJSON_GetObjectItemCaseSensitive(old, "metadata");
  if (!m) return cJSON_Delete(next), kb_k8s_oom(err);
  const char *rv = kb_k8s_meta_str(next, "resourceVersion");
  if (rv && *rv && strcmp(rv, kb_k8s_meta_str(old, "resourceVersion"))) {
    cJSON_Delete(next);
    return kb_k8s_conflict(err, res, e->name);
  }
  static const char *keep[] = {"uid", "creationTimestamp", "namespace", "name",
                               "resourceVersion", "generation", "deletionTimestamp",
                               "deletionGracePeriodSeconds"};
  /* a delete marks the object through here: it sets the deletion fields */
  size_t n_keep = sizeof keep / sizeof keep[0] - ((flags & K8S_MARK_DELETED) ? 2 : 0);
  for (size_t i = 0; i < n_keep; i++) {
    cJSON_DeleteItemFromObjectCaseSensitive(m, keep[i]);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(om, keep[i]);
    if (v && kb_k8s_set_item(m, keep[i], cJSON_Duplicate(v, 1))) return cJSON_Delete(next), kb_k8s_oom(err);
  }
  if (kb_k8s_set_str(next, "apiVersion", res->api_version) || kb_k8s_set_str(next, "kind", res->kind))
    return cJSON_Delete(next), kb_k8s_oom(err);
  if (!(flags & K8S_WHOLE) && ((flags & KB_K8S_STATUS) || res->status_subresource)) {
    /* the status subresource and the main resource each own their half */
    cJSON *base = (flags & KB_K8S_STATUS) ? cJSON_Duplicate(old, 1) : next;
    if (!base) return cJSON_Delete(next), kb_k8s_oom(err);
    const cJSON *src = (flags & KB_K8S_STATUS) ? next : old;
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(src, "status");
    cJSON_DeleteItemFromObjectCaseSensitive(base, "status");
    if (status && kb_k8s_set_item(base, "status", cJSON_Duplicate(status, 1))) {
      if (base != next) cJSON_Delete(base);
      return cJSON_Delete(next), kb_k8s_oom(err);
    }
    if (base != next) {
      cJSON_Delete(next);
      next = base;
    }
  }
  int rc = kb_k8s_valid_meta(res, next, err);
  if (!rc) rc = kb_k8s_default(st, res, next, 0, err);
  if (!rc && !(flags & KB_K8S_STATUS)) rc = kb_k8s_immutable(res, old, next, err);
  if (rc) {
    cJSON_Delete(next);
    return kb_k8s_err_named(err, e->name, rc);
  }
  if (spec_changed(old, next)) {
    cJSON *g = cJSON_GetObjectItemCaseSensitive(om, "generation");
    double gen = cJSON_IsNumber(g) ? g->valuedouble : 0;
    if (kb_k8s_set_item(kb_k8s_meta(next), "generation", cJSON_CreateNumber(gen + 1)))
      return cJSON_Delete(next), kb_k8s_oom(err);
  }
  kb_k8s_managed_record(st, res, old, next);
  if (cJSON_Compare(old, next, 1)) { /* no-op: no new resourceVersion, no event */
    cJSON_Delete(next);
    if (out) *out = cJSON_Duplicate(old, 1);
    return 0;
  }
  if (flags & KB_K8S_DRY_RUN) {
    if (out) *out = next;
    else cJSON_Delete(next);
    return 0;
  }
  if (kb_k8s_set_rv(next, st->rv + 1)) return cJSON_Delete(next), kb_k8s_oom(err);
  k8s_obj *no = kb_k8s_obj_new(st, res->index, next);
  if (!no) return cJSON_Delete(next), kb_k8s_oom(err);
  st->rv++;
  kb_k8s_owners_track(st->owners, res->index, e->ns, e->name, old, -1);
  kb_k8s_owners_track(st->owners, res->index, e->ns, e->name, next, +1);
  k8s_obj *oo = e->o; /* `old` lives as long as it: the history may keep it */
  e->o = no;
  kb_k8s_obj_set_current(oo, 0);
  kb_k8s_obj_set_current(no, 1);
  if (kb_k8s_meta_str(next, "deletionTimestamp") && !kb_k8s_has_finalizers(next)) {
    kb_k8s_obj_unref(oo);
    kb_k8s_finish_delete(st, res, e, out);
    return 0;
  }
  if (out) *out = cJSON_Duplicate(next, 1);
  kb_k8s_emit(st, KB_K8S_MODIFIED, res, no, oo);
  kb_k8s_obj_unref(oo);
  return 0;
}

int kb_k8s_update(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  const cJSON *obj, unsigned flags, cJSON **out, kb_k8s_error *err) {
  if (out) *out = NULL;
  if (!kb_k8s_bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  if (!cJSON_IsObject(obj))
    return kb_k8s_error_set(err, 400, "BadRequest", "the body must be a JSON object");
  int rc = check_kind(res, obj, err);
  if (rc) return rc;
  const char *oname = kb_k8s_meta_str(obj, "name");
  if (name && oname && strcmp(name, oname))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "the name of the object (%s) does not match the name on the URL (%s)",
                            oname, name);
  if (!name) name = oname;
  if (!name || !*name)
    return kb_k8s_error_set(err, 422, "Invalid",
                            "%s \"\" is invalid: metadata.name: Required value: name is required",
                            res->kind);
  const char *ons = kb_k8s_meta_str(obj, "namespace");
  if (res->namespaced && ns && *ns && ons && *ons && strcmp(ns, ons))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "the namespace of the provided object does not match the namespace "
                            "sent on the request");
  k8s_entry *e = kb_k8s_entry_find(st, res, ns && *ns ? ns : ons, name);
  if (!e) return kb_k8s_not_found(err, res, name);
  cJSON *next = cJSON_Duplicate(obj, 1);
  if (!next || secret_string_data(res, next)) return cJSON_Delete(next), kb_k8s_oom(err);
  return kb_k8s_replace_entry(st, res, e, next, flags, out, err);
}

int kb_k8s_patch(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                 kb_k8s_patch_type type, const char *text, size_t len, unsigned flags,
                 cJSON **out, kb_k8s_error *err) {
  if (out) *out = NULL;
  if (!kb_k8s_bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  k8s_entry *e = kb_k8s_entry_find(st, res, ns, name);
  if (!e) return kb_k8s_not_found(err, res, name ? name : "");
  if (type == KB_K8S_PATCH_STRATEGIC && res->custom)
    return kb_k8s_error_set(err, 415, "UnsupportedMediaType",
                            "the body of the request was in an unknown format - accepted media "
                            "types include: application/json-patch+json, "
                            "application/merge-patch+json, application/apply-patch+yaml");
  cJSON *patch = cJSON_ParseWithLength(text, len);
  if (!patch)
    return kb_k8s_error_set(err, 400, "BadRequest", "the patch is not valid JSON");
  cJSON *doc = kb_k8s_obj_copy(e->o);
  int rc = doc ? 0 : kb_k8s_oom(err);
  if (!rc) {
    if (type == KB_K8S_PATCH_MERGE) {
      doc = kb_k8s_merge_patch(doc, patch);
      if (!doc) rc = kb_k8s_oom(err);
    } else if (type == KB_K8S_PATCH_JSON) {
      rc = kb_k8s_json_patch(&doc, patch, err);
    } else {
      rc = kb_k8s_strategic_patch(&doc, patch, err);
    }
  }
  cJSON_Delete(patch);
  if (!rc && !cJSON_IsObject(doc))
    rc = kb_k8s_error_set(err, 422, "Invalid", "the patched object is not a JSON object");
  if (!rc) rc = check_kind(res, doc, err);
  if (!rc && (!kb_k8s_meta_str(doc, "name") || strcmp(kb_k8s_meta_str(doc, "name"), e->name)))
    rc = kb_k8s_error_set(err, 422, "Invalid",
                          "%s \"%s\" is invalid: metadata.name: Invalid value: the name cannot "
                          "be changed", res->kind, e->name);
  if (rc) {
    cJSON_Delete(doc);
    return kb_k8s_err_named(err, name, rc);
  }
  return kb_k8s_replace_entry(st, res, e, doc, flags, out, err);
}
