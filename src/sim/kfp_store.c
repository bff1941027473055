/* The KFP object store: pipelines, versions, experiments, runs and
 * recurring runs in creation order, with one id index over all of them.
 * Deleted objects stay allocated (flagged) until kfp is freed, so borrowed
 * pointers never dangle while a request is being answered. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfp_internal.h"

int kfp_vec_push(kfp_vec *v, void *item) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 16;
    void **items = realloc(v->items, cap * sizeof *items);
    if (!items) return -1;
    v->items = items;
    v->cap = cap;
  }
  v->items[v->n++] = item;
  return 0;
}

char *kfp_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

char *kfp_uuid(kb_sim_kfp *kfp) {
  uint64_t a = kb_sim_rng_next(&kfp->rng), b = kb_sim_rng_next(&kfp->rng);
  a = (a & ~0xf000ULL) | 0x4000ULL;                        /* version 4 */
  b = (b & ~(3ULL << 62)) | (2ULL << 62);                  /* RFC 4122 variant */
  char *s = malloc(37);
  if (!s) return NULL;
  snprintf(s, 37, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32),
           (unsigned)((a >> 16) & 0xffff), (unsigned)(a & 0xffff), (unsigned)(b >> 48),
           (unsigned long long)(b & 0xffffffffffffULL));
  return s;
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static int index_grow(kb_sim_kfp *kfp) {
  size_t cap = kfp->index_cap ? kfp->index_cap * 2 : 256;
  kfp_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < kfp->index_cap; i++) {
    if (!kfp->index[i].key) continue;
    size_t j = hash_str(kfp->index[i].key) & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = kfp->index[i];
  }
  free(kfp->index);
  kfp->index = slots;
  kfp->index_cap = cap;
  return 0;
}

int kfp_index_put(kb_sim_kfp *kfp, const char *key, kfp_kind kind, void *obj) {
  if ((kfp->index_n + 1) * 2 > kfp->index_cap && index_grow(kfp)) return -1;
  size_t j = hash_str(key) & (kfp->index_cap - 1);
  while (kfp->index[j].key) j = (j + 1) & (kfp->index_cap - 1);
  kfp->index[j] = (kfp_slot){key, kind, obj};
  kfp->index_n++;
  return 0;
}

static int is_deleted(kfp_kind kind, void *obj) {
  switch (kind) {
  case KFP_PIPELINE: return ((kfp_pipeline *)obj)->deleted;
  case KFP_VERSION: return ((kfp_version *)obj)->deleted;
  case KFP_EXPERIMENT: return ((kfp_experiment *)obj)->deleted;
  case KFP_RUN: return ((kfp_run *)obj)->deleted;
  case KFP_RECURRING: return ((kfp_recurring *)obj)->deleted;
  }
  return 1;
}

void *kfp_lookup(const kb_sim_kfp *kfp, const char *id, kfp_kind kind) {
  if (!id || !*id || !kfp->index_cap) return NULL;
  size_t j = hash_str(id) & (kfp->index_cap - 1);
  for (; kfp->index[j].key; j = (j + 1) & (kfp->index_cap - 1)) {
    const kfp_slot *s = &kfp->index[j];
    if (s->kind == kind && !strcmp(s->key, id)) return is_deleted(kind, s->obj) ? NULL : s->obj;
  }
  return NULL;
}

double kfp_now_unix_f(const kb_sim_kfp *kfp) {
  return kb_sim_epoch(kfp->sim) + kb_sim_now(kfp->sim);
}

int64_t kfp_now_unix(const kb_sim_kfp *kfp) {
  return (int64_t)floor(kfp_now_unix_f(kfp));
}

static int same_ns(const char *a, const char *b) {
  return !strcmp(a ? a : "", b ? b : "");
}

kfp_pipeline *kfp_pipeline_by_name(const kb_sim_kfp *kfp, const char *name, const char *ns) {
  for (size_t i = 0; i < kfp->pipelines.n; i++) {
    kfp_pipeline *p = kfp->pipelines.items[i];
    if (!p->deleted && !strcmp(p->name, name) && same_ns(p->namespace_, ns)) return p;
  }
  return NULL;
}

kfp_experiment *kfp_experiment_by_name(const kb_sim_kfp *kfp, const char *name, const char *ns) {
  for (size_t i = 0; i < kfp->experiments.n; i++) {
    kfp_experiment *e = kfp->experiments.items[i];
    if (!e->deleted && !strcmp(e->name, name) && same_ns(e->namespace_, ns)) return e;
  }
  return NULL;
}

size_t kfp_pipeline_version_count(const kb_sim_kfp *kfp, const char *pipeline_id) {
  size_t n = 0;
  for (size_t i = 0; i < kfp->versions.n; i++) {
    kfp_version *v = kfp->versions.items[i];
    if (!v->deleted && !strcmp(v->pipeline_id, pipeline_id)) n++;
  }
  return n;
}

kfp_version *kfp_latest_version(const kb_sim_kfp *kfp, const char *pipeline_id) {
  kfp_version *best = NULL;
  for (size_t i = 0; i < kfp->versions.n; i++) {
    kfp_version *v = kfp->versions.items[i];
    if (v->deleted || strcmp(v->pipeline_id, pipeline_id)) continue;
    if (!best || v->created_at > best->created_at ||
        (v->created_at == best->created_at && v->seq > best->seq))
      best = v;
  }
  return best;
}

size_t kfp_live_count(const kfp_vec *v, kfp_kind kind) {
  size_t n = 0;
  for (size_t i = 0; i < v->n; i++) n += !is_deleted(kind, v->items[i]);
  return n;
}

kfp_run *kfp_run_of_sim(const kb_sim_kfp *kfp, int sim_run) {
  if (sim_run < 0 || (size_t)sim_run >= kfp->sim_to_run_cap) return NULL;
  int i = kfp->sim_to_run[sim_run];
  return i < 0 ? NULL : kfp->runs.items[i];
}

int kfp_map_sim_run(kb_sim_kfp *kfp, int sim_run, size_t run_index) {
  if ((size_t)sim_run >= kfp->sim_to_run_cap) {
    size_t cap = kfp->sim_to_run_cap ? kfp->sim_to_run_cap : 64;
    while (cap <= (size_t)sim_run) cap *= 2;
    int *m = realloc(kfp->sim_to_run, cap * sizeof *m);
    if (!m) return -1;
    for (size_t i = kfp->sim_to_run_cap; i < cap; i++) m[i] = -1;
    kfp->sim_to_run = m;
    kfp->sim_to_run_cap = cap;
  }
  kfp->sim_to_run[sim_run] = (int)run_index;
  return 0;
}

void kfp_target_free(kfp_target *t) {
  free(t->pipeline_id);
  free(t->pipeline_version_id);
  free(t->pipeline_root);
  cJSON_Delete(t->pipeline_spec);
  cJSON_Delete(t->parameters);
  memset(t, 0, sizeof *t);
}

int kfp_target_copy(kfp_target *dst, const kfp_target *src) {
  memset(dst, 0, sizeof *dst);
  dst->pipeline_id = kfp_strdup(src->pipeline_id);
  dst->pipeline_version_id = kfp_strdup(src->pipeline_version_id);
  dst->pipeline_root = kfp_strdup(src->pipeline_root);
  dst->pipeline_spec = src->pipeline_spec ? cJSON_Duplicate(src->pipeline_spec, 1) : NULL;
  dst->parameters = src->parameters ? cJSON_Duplicate(src->parameters, 1) : NULL;
  dst->v1_params = src->v1_params;
  if ((src->pipeline_id && !dst->pipeline_id) ||
      (src->pipeline_version_id && !dst->pipeline_version_id) ||
      (src->pipeline_root && !dst->pipeline_root) ||
      (src->pipeline_spec && !dst->pipeline_spec) || (src->parameters && !dst->parameters)) {
    kfp_target_free(dst);
    return -1;
  }
  return 0;
}

static void free_pipeline(kfp_pipeline *p) {
  free(p->id), free(p->name), free(p->display_name), free(p->description);
  free(p->namespace_);
  cJSON_Delete(p->tags);
  free(p);
}

static void free_version(kfp_version *v) {
  free(v->id), free(v->pipeline_id), free(v->name), free(v->display_name);
  free(v->description), free(v->code_source_url), free(v->package_url);
  cJSON_Delete(v->docs);
  cJSON_Delete(v->spec);
  cJSON_Delete(v->tags);
  for (size_t i = 0; i < v->n_cache; i++) free(v->cache[i].key);
  free(v->cache);
  free(v);
}

static void free_experiment(kfp_experiment *e) {
  free(e->id), free(e->name), free(e->description), free(e->namespace_);
  free(e);
}

static void free_run(kfp_run *r) {
  free(r->id), free(r->display_name), free(r->description), free(r->experiment_id);
  free(r->service_account), free(r->recurring_run_id);
  kfp_target_free(&r->t);
  free(r);
}

static void free_recurring(kfp_recurring *rr) {
  free(rr->id), free(rr->display_name), free(rr->description), free(rr->experiment_id);
  free(rr->service_account), free(rr->cron);
  kfp_target_free(&rr->t);
  free(rr);
}

void kfp_store_free(kb_sim_kfp *kfp) {
  for (size_t i = 0; i < kfp->pipelines.n; i++) free_pipeline(kfp->pipelines.items[i]);
  for (size_t i = 0; i < kfp->versions.n; i++) free_version(kfp->versions.items[i]);
  for (size_t i = 0; i < kfp->experiments.n; i++) free_experiment(kfp->experiments.items[i]);
  for (size_t i = 0; i < kfp->runs.n; i++) free_run(kfp->runs.items[i]);
  for (size_t i = 0; i < kfp->recurring.n; i++) free_recurring(kfp->recurring.items[i]);
  free(kfp->pipelines.items), free(kfp->versions.items), free(kfp->experiments.items);
  free(kfp->runs.items), free(kfp->recurring.items);
  free(kfp->index);
  free(kfp->sim_to_run);
}
