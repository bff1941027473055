/* The in-memory object store (include/kb/k8s_store.h): resource types,
 * CRUD with apiserver metadata rules, lists with paging, the watch history
 * and event delivery, delete with finalizers and garbage collection.
 * Selectors live in k8s_select.c, logs in k8s_log.c, the built-in types in
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
#define MAX_GC_DEPTH 16

/* ---- small helpers -------------------------------------------------- */

int kb_k8s_error_set(kb_k8s_error *err, int code, const char *reason, const char *fmt, ...) {
  if (err) {
    err->code = code;
    snprintf(err->reason, sizeof err->reason, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->name[0] = '\0';
    err->n_causes = 0;
  }
  return -code;
}

void kb_k8s_error_cause(kb_k8s_error *err, const char *reason, const char *message,
                        const char *field) {
  if (!err || err->n_causes >= (int)(sizeof err->causes / sizeof err->causes[0])) return;
  int i = err->n_causes++;
  snprintf(err->causes[i].reason, sizeof err->causes[i].reason, "%s", reason);
  snprintf(err->causes[i].message, sizeof err->causes[i].message, "%s", message);
  snprintf(err->causes[i].field, sizeof err->causes[i].field, "%s", field);
}

static int err_named(kb_k8s_error *err, const char *name, int rc) {
  if (err && name) snprintf(err->name, sizeof err->name, "%.*s", (int)sizeof err->name - 1, name);
  return rc;
}

static int oom(kb_k8s_error *err) {
  return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
}

void kb_k8s_qualified(const kb_k8s_res *res, char *out, size_t n) {
  if (res->group[0]) snprintf(out, n, "%s.%s", res->resource, res->group);
  else snprintf(out, n, "%s", res->resource);
}

const char *kb_k8s_event_name(kb_k8s_event_type t) {
  static const char *names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
  return (unsigned)t < 5 ? names[t] : "ERROR";
}

const char *kb_k8s_meta_str(const cJSON *obj, const char *field) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, field));
}

const char *kb_k8s_annotation(const cJSON *obj, const char *key) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  return cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "annotations"), key));
}

void kb_k8s_set_meta(cJSON *md, const char *map, const char *key, const char *value) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(md, map);
  if (!cJSON_IsObject(m)) {
    cJSON_DeleteItemFromObjectCaseSensitive(md, map);
    m = cJSON_AddObjectToObject(md, map);
  }
  cJSON_DeleteItemFromObjectCaseSensitive(m, key);
  cJSON_AddStringToObject(m, key, value);
}

cJSON *kb_k8s_meta(cJSON *obj) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  if (cJSON_IsObject(m)) return m;
  if (m) cJSON_DeleteItemFromObjectCaseSensitive(obj, "metadata");
  return cJSON_AddObjectToObject(obj, "metadata");
}

static int set_str(cJSON *obj, const char *key, const char *v) {
  cJSON *s = cJSON_CreateString(v);
  if (!s) return -1;
  if (cJSON_GetObjectItemCaseSensitive(obj, key))
    return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, s) ? 0 : (cJSON_Delete(s), -1);
  return cJSON_AddItemToObject(obj, key, s) ? 0 : (cJSON_Delete(s), -1);
}

static int set_item(cJSON *obj, const char *key, cJSON *v) {
  if (!v) return -1;
  if (cJSON_GetObjectItemCaseSensitive(obj, key))
    return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v) ? 0 : (cJSON_Delete(v), -1);
  return cJSON_AddItemToObject(obj, key, v) ? 0 : (cJSON_Delete(v), -1);
}

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

void kb_k8s_format_time(double t, char out[32]) {
  time_t s = (time_t)t;
  struct tm tm;
  gmtime_r(&s, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

double kb_k8s_parse_time(const char *s) {
  if (!s) return -1;
  struct tm tm = {0};
  int n = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
             &tm.tm_min, &tm.tm_sec, &n) != 6)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double t = (double)timegm(&tm);
  const char *p = s + n;
  if (*p == '.') {
    double f = 0.1;
    for (p++; isdigit((unsigned char)*p); p++, f /= 10) t += (*p - '0') * f;
  }
  if (*p == '+' || *p == '-') {
    int hh = 0, mm = 0;
    if (sscanf(p + 1, "%2d:%2d", &hh, &mm) < 1) return -1;
    t -= (*p == '+' ? 1 : -1) * (hh * 3600.0 + mm * 60.0);
  } else if (*p != 'Z' && *p != 'z') {
    return -1;
  }
  return t;
}

double kb_k8s_store_now(const kb_k8s_store *st) {
  if (st->cfg.now) return st->cfg.now(st->cfg.now_ud);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

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

static void event_unref(k8s_event *ev) {
  if (ev && --ev->refs == 0) {
    cJSON_Delete(ev->obj);
    cJSON_Delete(ev->prev);
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

static void watch_free(kb_k8s_watch *w) {
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
    watch_free(w);
  }
  while (st->pend_head) {
    k8s_pending *p = st->pend_head;
    st->pend_head = p->next;
    event_unref(p->ev);
    free(p);
  }
  for (size_t i = 0; i < st->ring_count; i++)
    event_unref(st->ring[(st->ring_head + i) % st->cfg.history]);
  free(st->ring);
  for (size_t i = 0; i < st->n_buckets; i++) {
    k8s_bucket *b = st->buckets[i];
    for (size_t j = 0; j < b->n; j++) {
      free(b->v[j].ns);
      free(b->v[j].name);
      cJSON_Delete(b->v[j].obj);
    }
    free(b->v);
    res_free(&b->res);
    free(b);
  }
  free(st->buckets);
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

static k8s_bucket *bucket_of(const kb_k8s_store *st, const kb_k8s_res *res) {
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
static size_t bucket_search(const k8s_bucket *b, const char *ns, const char *name, int *found) {
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

static k8s_entry *entry_find(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                             const char *name) {
  k8s_bucket *b = bucket_of(st, res);
  if (!b || !name) return NULL;
  int found;
  size_t i = bucket_search(b, ns_of(res, ns), name, &found);
  return found ? &b->v[i] : NULL;
}

size_t kb_k8s_store_count(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns) {
  k8s_bucket *b = bucket_of(st, res);
  if (!b) return 0;
  if (!ns || !*ns || !res->namespaced) return b->n;
  size_t n = 0;
  for (size_t i = bucket_search(b, ns, "", NULL); i < b->n && !strcmp(b->v[i].ns, ns); i++) n++;
  return n;
}

static int not_found(kb_k8s_error *err, const kb_k8s_res *res, const char *name) {
  char q[160];
  kb_k8s_qualified(res, q, sizeof q);
  return err_named(err, name,
                   kb_k8s_error_set(err, 404, "NotFound", "%s \"%s\" not found", q, name));
}

const cJSON *kb_k8s_peek(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                         const char *name) {
  k8s_entry *e = entry_find(st, res, ns, name);
  return e ? e->obj : NULL;
}

cJSON *kb_k8s_get(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  kb_k8s_error *err) {
  k8s_entry *e = entry_find(st, res, ns, name);
  if (!e) {
    not_found(err, res, name ? name : "");
    return NULL;
  }
  cJSON *c = cJSON_Duplicate(e->obj, 1);
  if (!c) oom(err);
  return c;
}

/* ---- events ----------------------------------------------------------- */

static void history_push(kb_k8s_store *st, k8s_event *ev) {
  size_t cap = st->cfg.history;
  if (st->ring_count == cap) {
    k8s_event *old = st->ring[st->ring_head];
    st->floor_rv = old->rv;
    event_unref(old);
    st->ring_head = (st->ring_head + 1) % cap;
    st->ring_count--;
  }
  st->ring[(st->ring_head + st->ring_count) % cap] = ev;
  st->ring_count++;
  ev->refs++;
}

static const char *obj_ns(const cJSON *obj) {
  const char *ns = kb_k8s_meta_str(obj, "namespace");
  return ns ? ns : "";
}

static int watch_matches(const kb_k8s_watch *w, const cJSON *obj) {
  if (!obj) return 0;
  if (w->ns && strcmp(w->ns, obj_ns(obj))) return 0;
  return !w->sel || kb_k8s_selector_match(w->sel, obj);
}

/* Delivers one event to one watch, translating for its selector: an object
 * that starts matching is ADDED, one that stops matching is DELETED. */
static void deliver(kb_k8s_watch *w, const k8s_event *ev) {
  if (w->cancelled || w->done || ev->res_index != w->res_index || ev->rv <= w->start_rv) return;
  int now = watch_matches(w, ev->obj);
  if (ev->type == KB_K8S_MODIFIED) {
    int before = watch_matches(w, ev->prev);
    if (before && now) w->fn(w->ud, KB_K8S_MODIFIED, ev->obj);
    else if (now) w->fn(w->ud, KB_K8S_ADDED, ev->obj);
    else if (before) w->fn(w->ud, KB_K8S_DELETED, ev->obj);
  } else if (now) {
    w->fn(w->ud, ev->type, ev->obj);
  }
}

static void sweep_watches(kb_k8s_store *st) {
  kb_k8s_watch **pp = &st->watches;
  while (*pp) {
    kb_k8s_watch *w = *pp;
    if (w->cancelled) {
      *pp = w->next;
      watch_free(w);
    } else {
      pp = &w->next;
    }
  }
}

static void dispatch(kb_k8s_store *st) {
  if (st->dispatching) return;
  st->dispatching = 1;
  /* watchers (the simulator's controllers) write as themselves, not as
   * the API request whose write they are told of */
  const char *manager = st->manager;
  st->manager = NULL;
  while (st->pend_head) {
    k8s_pending *p = st->pend_head;
    st->pend_head = p->next;
    if (!st->pend_head) st->pend_tail = NULL;
    for (kb_k8s_watch *w = st->watches; w; w = w->next) deliver(w, p->ev);
    event_unref(p->ev);
    free(p);
  }
  st->dispatching = 0;
  st->manager = manager;
  sweep_watches(st);
}

/* Records a write: takes obj/prev copies for the history and the watchers.
 * Out of memory here loses the event (the write itself stands). */
static void emit(kb_k8s_store *st, kb_k8s_event_type type, const kb_k8s_res *res,
                 const cJSON *obj, const cJSON *prev) {
  k8s_event *ev = calloc(1, sizeof *ev);
  k8s_pending *p = calloc(1, sizeof *p);
  if (ev) {
    ev->type = type;
    ev->res_index = res->index;
    ev->rv = st->rv;
    ev->obj = cJSON_Duplicate(obj, 1);
    ev->prev = prev ? cJSON_Duplicate(prev, 1) : NULL;
  }
  if (!ev || !p || !ev->obj || (prev && !ev->prev)) {
    if (ev) {
      cJSON_Delete(ev->obj);
      cJSON_Delete(ev->prev);
    }
    free(ev);
    free(p);
    return;
  }
  history_push(st, ev);
  ev->refs++;
  p->ev = ev;
  if (st->pend_tail) st->pend_tail->next = p;
  else st->pend_head = p;
  st->pend_tail = p;
  dispatch(st);
}

/* ---- metadata rules ----------------------------------------------------- */

static int set_rv(cJSON *obj, uint64_t rv) {
  char s[24];
  snprintf(s, sizeof s, "%llu", (unsigned long long)rv);
  cJSON *m = kb_k8s_meta(obj);
  return m ? set_str(m, "resourceVersion", s) : -1;
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

static int put_entry(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                     cJSON *obj) {
  k8s_bucket *b = bucket_of(st, res);
  int found;
  size_t i = bucket_search(b, ns, name, &found);
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
  b->v[i] = (k8s_entry){n1, n2, obj};
  b->n++;
  kb_k8s_owners_track(st->owners, obj, +1);
  return 0;
}

/* Removes the entry and returns its object. */
static cJSON *take_entry(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e) {
  k8s_bucket *b = bucket_of(st, res);
  size_t i = (size_t)(e - b->v);
  cJSON *obj = e->obj;
  kb_k8s_owners_track(st->owners, obj, -1);
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
    if (!entry_find(st, res, ns, out)) return 0;
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
  if (!bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  if (!cJSON_IsObject(in))
    return kb_k8s_error_set(err, 400, "BadRequest", "the body must be a JSON object");
  int rc = check_kind(res, in, err);
  if (rc) return rc;
  cJSON *obj = cJSON_Duplicate(in, 1);
  cJSON *m = obj ? kb_k8s_meta(obj) : NULL;
  if (!m || secret_string_data(res, obj)) return cJSON_Delete(obj), oom(err);
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
  set_str(kb_k8s_meta(obj), "name", namebuf);
  rc = kb_k8s_valid_name(res, namebuf, err);
  if (!rc) rc = kb_k8s_valid_meta(res, obj, err);
  if (rc) {
    cJSON_Delete(obj);
    return err_named(err, namebuf, rc);
  }
  if (res->namespaced && !namespace_exists(st, nsbuf)) {
    cJSON_Delete(obj);
    return err_named(err, nsbuf,
                     kb_k8s_error_set(err, 404, "NotFound", "namespaces \"%s\" not found",
                                      nsbuf));
  }
  if (entry_find(st, res, nsbuf, namebuf)) {
    char q[160];
    kb_k8s_qualified(res, q, sizeof q);
    cJSON_Delete(obj);
    return err_named(err, namebuf,
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
  int bad = set_str(obj, "apiVersion", res->api_version) || set_str(obj, "kind", res->kind) ||
            set_str(m, "name", namebuf) || set_str(m, "uid", uid) ||
            set_str(m, "creationTimestamp", ts) ||
            set_item(m, "generation", cJSON_CreateNumber(1)) ||
            (res->namespaced && set_str(m, "namespace", nsbuf));
  if (bad) return cJSON_Delete(obj), oom(err);
  rc = kb_k8s_default(st, res, obj, 1, err);
  if (rc) {
    cJSON_Delete(obj);
    return err_named(err, namebuf, rc);
  }
  kb_k8s_managed_record(st, res, NULL, obj);
  if (flags & KB_K8S_DRY_RUN) {
    if (out) *out = obj;
    else cJSON_Delete(obj);
    return 0;
  }
  if (set_rv(obj, st->rv + 1) || put_entry(st, res, nsbuf, namebuf, obj))
    return cJSON_Delete(obj), oom(err);
  st->rv++;
  if (out) *out = cJSON_Duplicate(obj, 1);
  emit(st, KB_K8S_ADDED, res, obj, NULL);
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

static int conflict(kb_k8s_error *err, const kb_k8s_res *res, const char *name) {
  char q[160];
  kb_k8s_qualified(res, q, sizeof q);
  return err_named(err, name,
                   kb_k8s_error_set(err, 409, "Conflict",
                                    "Operation cannot be fulfilled on %s \"%s\": the object has "
                                    "been modified; please apply your changes to the latest "
                                    "version and try again", q, name));
}

static int has_finalizers(const cJSON *obj) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
                                                    "finalizers");
  return cJSON_GetArraySize(f) > 0;
}

static void finish_delete(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e, cJSON **out);

/* Stores `next` (consumed) in place of entry e after the metadata rules. */
static int replace_entry(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e, cJSON *next,
                         unsigned flags, cJSON **out, kb_k8s_error *err) {
  cJSON *old = e->obj;
  cJSON *m = kb_k8s_meta(next);
  cJSON *om = cJSON_GetObjectItemCaseSensitive(old, "metadata");
  if (!m) return cJSON_Delete(next), oom(err);
  const char *rv = kb_k8s_meta_str(next, "resourceVersion");
  if (rv && *rv && strcmp(rv, kb_k8s_meta_str(old, "resourceVersion"))) {
    cJSON_Delete(next);
    return conflict(err, res, e->name);
  }
  static const char *keep[] = {"uid", "creationTimestamp", "namespace", "name",
                               "resourceVersion", "generation", "deletionTimestamp",
                               "deletionGracePeriodSeconds"};
  /* a delete marks the object through here: it sets the deletion fields */
  size_t n_keep = sizeof keep / sizeof keep[0] - ((flags & K8S_MARK_DELETED) ? 2 : 0);
  for (size_t i = 0; i < n_keep; i++) {
    cJSON_DeleteItemFromObjectCaseSensitive(m, keep[i]);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(om, keep[i]);
    if (v && set_item(m, keep[i], cJSON_Duplicate(v, 1))) return cJSON_Delete(next), oom(err);
  }
  if (set_str(next, "apiVersion", res->api_version) || set_str(next, "kind", res->kind))
    return cJSON_Delete(next), oom(err);
  if ((flags & KB_K8S_STATUS) || res->status_subresource) {
    /* the status subresource and the main resource each own their half */
    cJSON *base = (flags & KB_K8S_STATUS) ? cJSON_Duplicate(old, 1) : next;
    if (!base) return cJSON_Delete(next), oom(err);
    const cJSON *src = (flags & KB_K8S_STATUS) ? next : old;
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(src, "status");
    cJSON_DeleteItemFromObjectCaseSensitive(base, "status");
    if (status && set_item(base, "status", cJSON_Duplicate(status, 1))) {
      if (base != next) cJSON_Delete(base);
      return cJSON_Delete(next), oom(err);
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
    return err_named(err, e->name, rc);
  }
  if (spec_changed(old, next)) {
    cJSON *g = cJSON_GetObjectItemCaseSensitive(om, "generation");
    double gen = cJSON_IsNumber(g) ? g->valuedouble : 0;
    if (set_item(kb_k8s_meta(next), "generation", cJSON_CreateNumber(gen + 1)))
      return cJSON_Delete(next), oom(err);
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
  if (set_rv(next, st->rv + 1)) return cJSON_Delete(next), oom(err);
  st->rv++;
  kb_k8s_owners_track(st->owners, old, -1);
  kb_k8s_owners_track(st->owners, next, +1);
  e->obj = next;
  if (kb_k8s_meta_str(next, "deletionTimestamp") && !has_finalizers(next)) {
    cJSON_Delete(old);
    finish_delete(st, res, e, out);
    return 0;
  }
  if (out) *out = cJSON_Duplicate(next, 1);
  emit(st, KB_K8S_MODIFIED, res, next, old);
  cJSON_Delete(old);
  return 0;
}

int kb_k8s_update(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  const cJSON *obj, unsigned flags, cJSON **out, kb_k8s_error *err) {
  if (out) *out = NULL;
  if (!bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
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
  k8s_entry *e = entry_find(st, res, ns && *ns ? ns : ons, name);
  if (!e) return not_found(err, res, name);
  cJSON *next = cJSON_Duplicate(obj, 1);
  if (!next || secret_string_data(res, next)) return cJSON_Delete(next), oom(err);
  return replace_entry(st, res, e, next, flags, out, err);
}

int kb_k8s_patch(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                 kb_k8s_patch_type type, const char *text, size_t len, unsigned flags,
                 cJSON **out, kb_k8s_error *err) {
  if (out) *out = NULL;
  if (!bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  k8s_entry *e = entry_find(st, res, ns, name);
  if (!e) return not_found(err, res, name ? name : "");
  if (type == KB_K8S_PATCH_STRATEGIC && res->custom)
    return kb_k8s_error_set(err, 415, "UnsupportedMediaType",
                            "the body of the request was in an unknown format - accepted media "
                            "types include: application/json-patch+json, "
                            "application/merge-patch+json, application/apply-patch+yaml");
  cJSON *patch = cJSON_ParseWithLength(text, len);
  if (!patch)
    return kb_k8s_error_set(err, 400, "BadRequest", "the patch is not valid JSON");
  cJSON *doc = cJSON_Duplicate(e->obj, 1);
  int rc = doc ? 0 : oom(err);
  if (!rc) {
    if (type == KB_K8S_PATCH_MERGE) {
      doc = kb_k8s_merge_patch(doc, patch);
      if (!doc) rc = oom(err);
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
    return err_named(err, name, rc);
  }
  return replace_entry(st, res, e, doc, flags, out, err);
}

/* ---- delete -------------------------------------------------------------- */

static void finish_delete(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e, cJSON **out) {
  char *ns = strdup(e->ns), *name = strdup(e->name);
  cJSON *obj = take_entry(st, res, e);
  set_rv(obj, st->rv); /* the caller bumped the counter for this write */
  if (out) *out = cJSON_Duplicate(obj, 1);
  emit(st, KB_K8S_DELETED, res, obj, NULL);
  if (ns && name && !strcmp(res->resource, "pods") && !res->group[0])
    kb_k8s_log_drop_pod(st, ns, name);
  cJSON_Delete(obj);
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

/* Every object owned by uid (or, for a namespace, in it). */
static dep_ref *dependents(kb_k8s_store *st, const char *uid, const char *in_ns, size_t *n) {
  dep_ref *v = NULL;
  size_t cap = 0;
  *n = 0;
  if (!in_ns && !kb_k8s_owners_has(st->owners, uid)) return NULL; /* nobody: no scan */
  for (size_t i = 0; i < st->n_buckets; i++) {
    k8s_bucket *b = st->buckets[i];
    for (size_t j = 0; j < b->n; j++) {
      if (in_ns ? strcmp(b->v[j].ns, in_ns) || !b->res.namespaced : !owned_by(b->v[j].obj, uid))
        continue;
      if (*n == cap) {
        cap = cap ? cap * 2 : 8;
        dep_ref *nv = realloc(v, cap * sizeof *nv);
        if (!nv) return v;
        v = nv;
      }
      v[*n] = (dep_ref){&b->res, strdup(b->v[j].ns), strdup(b->v[j].name)};
      if (!v[*n].ns || !v[*n].name) {
        free(v[*n].ns);
        free(v[*n].name);
        return v;
      }
      (*n)++;
    }
  }
  return v;
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
  k8s_entry *e = entry_find(st, d->res, d->ns, d->name);
  if (!e) return;
  cJSON *next = cJSON_Duplicate(e->obj, 1);
  cJSON *refs = next ? cJSON_GetObjectItemCaseSensitive(kb_k8s_meta(next), "ownerReferences") : NULL;
  cJSON *r = refs ? refs->child : NULL;
  while (r) {
    cJSON *nx = r->next;
    const char *u = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "uid"));
    if (u && !strcmp(u, uid)) cJSON_Delete(cJSON_DetachItemViaPointer(refs, r));
    r = nx;
  }
  if (refs && !refs->child) cJSON_DeleteItemFromObjectCaseSensitive(kb_k8s_meta(next), "ownerReferences");
  if (next) replace_entry(st, d->res, e, next, 0, NULL, NULL);
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
  if (!bucket_of(st, res)) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  k8s_entry *e = entry_find(st, res, ns, name);
  if (!e) return not_found(err, res, name ? name : "");
  kb_k8s_delete_opts dflt = {0};
  if (!opts) opts = &dflt;
  const char *uid = kb_k8s_meta_str(e->obj, "uid");
  if (opts->precondition_uid && *opts->precondition_uid &&
      strcmp(opts->precondition_uid, uid ? uid : ""))
    return err_named(err, name,
                     kb_k8s_error_set(err, 409, "Conflict",
                                      "Precondition failed: UID in precondition: %s, UID in "
                                      "object meta: %s", opts->precondition_uid, uid ? uid : ""));
  if (opts->precondition_rv && *opts->precondition_rv &&
      strcmp(opts->precondition_rv, kb_k8s_meta_str(e->obj, "resourceVersion")))
    return conflict(err, res, name);
  if (opts->flags & KB_K8S_DRY_RUN) {
    if (out) *out = cJSON_Duplicate(e->obj, 1);
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
    return oom(err);
  }
  int is_ns = !res->group[0] && !strcmp(res->resource, "namespaces");
  int rc = 0;
  if (depth < MAX_GC_DEPTH && (how != KB_K8S_PROPAGATE_BACKGROUND || is_ns)) {
    /* foreground (and namespaces): dependents go first; orphan: unlink */
    collect_garbage(st, uidc, is_ns ? namec : NULL, how, depth);
  }
  e = entry_find(st, res, nsc, namec);
  if (!e) {
    rc = not_found(err, res, namec);
  } else if (has_finalizers(e->obj)) {
    if (!kb_k8s_meta_str(e->obj, "deletionTimestamp")) {
      char ts[32];
      kb_k8s_format_time(kb_k8s_store_now(st), ts);
      cJSON *next = cJSON_Duplicate(e->obj, 1);
      cJSON *m = next ? kb_k8s_meta(next) : NULL;
      if (!m || set_str(m, "deletionTimestamp", ts) ||
          set_item(m, "deletionGracePeriodSeconds", cJSON_CreateNumber(0))) {
        cJSON_Delete(next);
        rc = oom(err);
      } else {
        rc = replace_entry(st, res, e, next, K8S_MARK_DELETED, out, err);
      }
    } else if (out) {
      *out = cJSON_Duplicate(e->obj, 1);
    }
    if (!rc) rc = 1;
  } else {
    st->rv++;
    finish_delete(st, res, e, out);
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

/* ---- lists ---------------------------------------------------------------- */

/* Continue tokens are base64 of {"v":"meta.k8s.io/v1","rv":N,"start":"ns/name"},
 * as the apiserver's; paging resumes after that key in the current state. */
static char *encode_continue(uint64_t rv, const char *ns, const char *name) {
  cJSON *t = cJSON_CreateObject();
  char key[600];
  snprintf(key, sizeof key, "%s/%s", ns, name);
  cJSON_AddStringToObject(t, "v", "meta.k8s.io/v1");
  cJSON_AddNumberToObject(t, "rv", (double)rv);
  cJSON_AddStringToObject(t, "start", key);
  char *js = cJSON_PrintUnformatted(t);
  cJSON_Delete(t);
  if (!js) return NULL;
  size_t n = strlen(js);
  char *out = malloc(4 * ((n + 2) / 3) + 1);
  if (out) kb_k8s_base64_encode(js, n, out);
  free(js);
  return out;
}

static int decode_continue(const char *tok, char *ns, char *name, size_t cap, kb_k8s_error *err) {
  char raw[1024];
  size_t n;
  cJSON *t = NULL;
  if (!kb_k8s_base64_decode(tok, raw, sizeof raw - 1, &n)) {
    raw[n] = '\0';
    t = cJSON_Parse(raw);
  }
  const char *start = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "start"));
  const char *slash = start ? strchr(start, '/') : NULL;
  if (!slash || (size_t)(slash - start) >= cap || strlen(slash + 1) >= cap) {
    cJSON_Delete(t);
    return kb_k8s_error_set(err, 400, "BadRequest", "continue key is not valid: %s",
                            "invalid continue token");
  }
  memcpy(ns, start, (size_t)(slash - start));
  ns[slash - start] = '\0';
  strcpy(name, slash + 1);
  cJSON_Delete(t);
  return 0;
}

int kb_k8s_list(kb_k8s_store *st, const kb_k8s_res *res, const kb_k8s_list_opts *opts,
                cJSON **out, kb_k8s_error *err) {
  *out = NULL;
  k8s_bucket *b = bucket_of(st, res);
  if (!b) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  kb_k8s_list_opts o = {0};
  if (opts) o = *opts;
  const char *ns = res->namespaced && o.ns && *o.ns ? o.ns : NULL;
  kb_k8s_selector *sel = NULL;
  if ((o.label_selector && *o.label_selector) || (o.field_selector && *o.field_selector)) {
    sel = kb_k8s_selector_parse(o.label_selector, o.field_selector, res, err);
    if (!sel) return err ? -err->code : -400;
  }
  size_t i = ns ? bucket_search(b, ns, "", NULL) : 0;
  if (o.continue_token && *o.continue_token) {
    char cns[300], cname[300];
    int rc = decode_continue(o.continue_token, cns, cname, sizeof cns, err);
    if (rc) {
      kb_k8s_selector_free(sel);
      return rc;
    }
    int found;
    size_t j = bucket_search(b, cns, cname, &found);
    if (found) j++;
    if (j > i) i = j;
  }
  cJSON *list = cJSON_CreateObject();
  cJSON *meta = cJSON_CreateObject();
  cJSON *items = cJSON_CreateArray();
  char rv[24];
  snprintf(rv, sizeof rv, "%llu", (unsigned long long)st->rv);
  int bad = !list || !meta || !items;
  if (!bad) {
    cJSON_AddStringToObject(list, "kind", res->list_kind);
    cJSON_AddStringToObject(list, "apiVersion", res->api_version);
    cJSON_AddItemToObject(list, "metadata", meta);
    cJSON_AddItemToObject(list, "items", items);
    meta = NULL;
    items = NULL;
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(list, "metadata"),
                            "resourceVersion", rv);
  }
  cJSON_Delete(meta);
  cJSON_Delete(items);
  items = cJSON_GetObjectItemCaseSensitive(list, "items");
  size_t taken = 0, remaining = 0;
  const k8s_entry *last = NULL;
  for (; !bad && i < b->n; i++) {
    const k8s_entry *e = &b->v[i];
    if (ns && strcmp(e->ns, ns)) break;
    if (sel && !kb_k8s_selector_match(sel, e->obj)) continue;
    if (o.limit && taken == o.limit) {
      remaining++;
      continue;
    }
    cJSON *c = cJSON_Duplicate(e->obj, 1);
    if (!c || !cJSON_AddItemToArray(items, c)) {
      cJSON_Delete(c);
      bad = 1;
    }
    taken++;
    last = e;
  }
  kb_k8s_selector_free(sel);
  if (!bad && remaining && last) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(list, "metadata");
    char *tok = encode_continue(st->rv, last->ns, last->name);
    bad = !tok || !cJSON_AddStringToObject(m, "continue", tok) ||
          !cJSON_AddNumberToObject(m, "remainingItemCount", (double)remaining);
    free(tok);
  }
  if (bad) {
    cJSON_Delete(list);
    return oom(err);
  }
  *out = list;
  return 0;
}

/* ---- watches --------------------------------------------------------------- */

static void send_status(kb_k8s_watch *w, int code, const char *reason, const char *msg) {
  kb_k8s_error e;
  kb_k8s_error_set(&e, code, reason, "%s", msg);
  cJSON *s = kb_k8s_status_json(&e, NULL);
  w->done = 1;
  if (s) w->fn(w->ud, KB_K8S_ERROR, s);
  cJSON_Delete(s);
}

static void send_bookmark(kb_k8s_watch *w, const kb_k8s_res *res, uint64_t rv, int initial_end) {
  cJSON *o = cJSON_CreateObject();
  cJSON *m = cJSON_AddObjectToObject(o, "metadata");
  char s[24];
  snprintf(s, sizeof s, "%llu", (unsigned long long)rv);
  cJSON_AddStringToObject(o, "kind", res->kind);
  cJSON_AddStringToObject(o, "apiVersion", res->api_version);
  cJSON_AddStringToObject(m, "resourceVersion", s);
  if (initial_end)
    cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "annotations"),
                            "k8s.io/initial-events-end", "true");
  if (m) w->fn(w->ud, KB_K8S_BOOKMARK, o);
  cJSON_Delete(o);
}

static void send_current(kb_k8s_watch *w, k8s_bucket *b) {
  for (size_t i = 0; i < b->n && !w->cancelled; i++)
    if (watch_matches(w, b->v[i].obj)) w->fn(w->ud, KB_K8S_ADDED, b->v[i].obj);
}

kb_k8s_watch *kb_k8s_watch_start(kb_k8s_store *st, const kb_k8s_res *res,
                                 const kb_k8s_watch_opts *opts, kb_k8s_watch_fn fn, void *ud,
                                 kb_k8s_error *err) {
  k8s_bucket *b = bucket_of(st, res);
  if (!b || !fn) {
    kb_k8s_error_set(err, 400, "BadRequest", "bad watch");
    return NULL;
  }
  kb_k8s_watch_opts o = {0};
  if (opts) o = *opts;
  uint64_t from = 0;
  int have_rv = o.resource_version && *o.resource_version && strcmp(o.resource_version, "0");
  if (have_rv) {
    char *end;
    from = strtoull(o.resource_version, &end, 10);
    if (*end) {
      kb_k8s_error_set(err, 400, "BadRequest", "invalid resource version: %s",
                       o.resource_version);
      return NULL;
    }
  }
  kb_k8s_watch *w = calloc(1, sizeof *w);
  if (!w) {
    oom(err);
    return NULL;
  }
  w->st = st;
  w->res_index = res->index;
  w->fn = fn;
  w->ud = ud;
  w->start_rv = st->rv;
  if (res->namespaced && o.ns && *o.ns && !(w->ns = strdup(o.ns))) {
    free(w);
    oom(err);
    return NULL;
  }
  if ((o.label_selector && *o.label_selector) || (o.field_selector && *o.field_selector)) {
    w->sel = kb_k8s_selector_parse(o.label_selector, o.field_selector, res, err);
    if (!w->sel) {
      watch_free(w);
      return NULL;
    }
  }
  /* link first so a callback may cancel it; events from writes made by
   * the callbacks are queued and delivered after start_rv */
  w->next = st->watches;
  st->watches = w;
  st->dispatching++;
  if (o.no_initial) {
    /* controller hook: changes only */
  } else if (!have_rv || o.send_initial) {
    send_current(w, b);
    if (o.send_initial && !w->cancelled) send_bookmark(w, res, st->rv, 1);
  } else if (from < st->floor_rv) {
    char msg[128];
    snprintf(msg, sizeof msg, "too old resource version: %llu (%llu)",
             (unsigned long long)from, (unsigned long long)st->floor_rv);
    send_status(w, 410, "Expired", msg);
  } else {
    uint64_t start = w->start_rv;
    w->start_rv = from;
    for (size_t i = 0; i < st->ring_count && !w->cancelled; i++) {
      k8s_event *ev = st->ring[(st->ring_head + i) % st->cfg.history];
      if (ev->rv <= start) deliver(w, ev);
    }
    w->start_rv = start;
  }
  st->dispatching--;
  int cancelled = w->cancelled; /* by its own callback: freed below */
  if (!st->dispatching) dispatch(st);
  if (cancelled) kb_k8s_error_set(err, 0, "", "cancelled during its initial events");
  return cancelled ? NULL : w;
}

void kb_k8s_watch_cancel(kb_k8s_watch *w) {
  if (!w || w->cancelled) return;
  w->cancelled = 1;
  if (!w->st->dispatching) sweep_watches(w->st);
}

int kb_k8s_watch_done(const kb_k8s_watch *w) { return w->done || w->cancelled; }

kb_k8s_watch *kb_k8s_store_on(kb_k8s_store *st, const kb_k8s_res *res, kb_k8s_watch_fn fn,
                              void *ud) {
  kb_k8s_watch_opts o = {.no_initial = 1};
  return kb_k8s_watch_start(st, res, &o, fn, ud, NULL);
}

/* ---- Status ------------------------------------------------------------------ */

/* A 422 worded as the apiserver words it ('Kind "name" is invalid: FIELD:
 * DETAIL') carries its cause in details.causes, as the real one does:
 * kubectl prints "* FIELD: DETAIL" from it, and only "is invalid" without. */
static void add_cause(cJSON *details, const char *message) {
  const char *p = strstr(message, "\" is invalid: ");
  if (!p) return;
  p += strlen("\" is invalid: ");
  const char *colon = strstr(p, ": ");
  if (!colon || colon == p || (size_t)(colon - p) > 200) return;
  const char *detail = colon + 2;
  static const struct { const char *prefix, *reason; } kinds[] = {
    {"Required value", "FieldValueRequired"},   {"Unsupported value", "FieldValueNotSupported"},
    {"Forbidden", "FieldValueForbidden"},       {"Duplicate value", "FieldValueDuplicate"},
    {"Too long", "FieldValueTooLong"},          {"Not found", "FieldValueNotFound"},
  };
  const char *reason = "FieldValueInvalid";
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (!strncmp(detail, kinds[i].prefix, strlen(kinds[i].prefix))) reason = kinds[i].reason;
  char field[256];
  snprintf(field, sizeof field, "%.*s", (int)(colon - p), p);
  cJSON *causes = cJSON_AddArrayToObject(details, "causes");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", detail);
  cJSON_AddStringToObject(c, "field", field);
  cJSON_AddItemToArray(causes, c);
}

cJSON *kb_k8s_status_json(const kb_k8s_error *err, const kb_k8s_res *res) {
  cJSON *s = cJSON_CreateObject();
  if (!s) return NULL;
  cJSON_AddStringToObject(s, "kind", "Status");
  cJSON_AddStringToObject(s, "apiVersion", "v1");
  cJSON_AddObjectToObject(s, "metadata");
  cJSON_AddStringToObject(s, "status", "Failure");
  cJSON_AddStringToObject(s, "message", err->message);
  cJSON_AddStringToObject(s, "reason", err->reason);
  if (err->name[0] || res || err->n_causes) {
    cJSON *d = cJSON_AddObjectToObject(s, "details");
    if (err->name[0]) cJSON_AddStringToObject(d, "name", err->name);
    if (res) {
      if (res->group[0]) cJSON_AddStringToObject(d, "group", res->group);
      /* NewInvalid names the kind (kubectl: `The CronJob "x" is invalid`),
       * the others the resource */
      cJSON_AddStringToObject(d, "kind", err->code == 422 ? res->kind : res->resource);
    }
    if (err->n_causes) {
      cJSON *causes = cJSON_AddArrayToObject(d, "causes");
      for (int i = 0; i < err->n_causes; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "reason", err->causes[i].reason);
        cJSON_AddStringToObject(c, "message", err->causes[i].message);
        cJSON_AddStringToObject(c, "field", err->causes[i].field);
        cJSON_AddItemToArray(causes, c);
      }
    } else if (err->code == 422) {
      add_cause(d, err->message);
    }
  }
  cJSON_AddNumberToObject(s, "code", err->code);
  return s;
}

/* ---- base64 (continue tokens) ---------------------------------------------- */

size_t kb_k8s_base64_encode(const char *in, size_t n, char *out) {
  return kb_base64_encode((const uint8_t *)in, n, out);
}

int kb_k8s_base64_decode(const char *in, char *out, size_t cap, size_t *n) {
  unsigned v = 0;
  int bits = 0;
  *n = 0;
  for (const char *p = in; *p && *p != '='; p++) {
    int d = kb_base64_value((unsigned char)*p);
    if (d < 0) return -1;
    v = v << 6 | (unsigned)d;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (*n >= cap) return -1;
      out[(*n)++] = (char)((v >> bits) & 0xff);
    }
  }
  return 0;
}
