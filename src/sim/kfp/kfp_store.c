/* The KFP object store: pipelines, versions, experiments, runs and
 * recurring runs in creation order, with one id index over the live ones.
 * A deletion takes the object out of the index at once but leaves it
 * allocated (flagged), so borrowed pointers never dangle while a request
 * is being answered; kb_kfp_store_sweep frees deleted objects after the
 * answer, compacting a vector once enough of it is deleted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfp_internal.h"

int kb_kfp_vec_push(kfp_vec *v, void *item) {
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

char *kb_kfp_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

char *kb_kfp_uuid(kb_sim_kfp *kfp) {
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

/* Open addressing with linear probing over a power-of-two table, at most
 * half full. */
#define KFP_INDEX_MIN 256
static int index_resize(kb_sim_kfp *kfp, size_t cap) {
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

static int index_put(kb_sim_kfp *kfp, const char *key, kfp_kind kind, void *obj) {
  if ((kfp->index_n + 1) * 2 > kfp->index_cap &&
      index_resize(kfp, kfp->index_cap ? kfp->index_cap * 2 : KFP_INDEX_MIN))
    return -1;
  size_t j = hash_str(key) & (kfp->index_cap - 1);
  while (kfp->index[j].key) j = (j + 1) & (kfp->index_cap - 1);
  kfp->index[j] = (kfp_slot){key, kind, obj};
  kfp->index_n++;
  return 0;
}

/* Backward-shift deletion rather than tombstones or a rebuild: a removal
 * costs one probe cluster, keeps lookups as fast as a fresh table, and
 * touches no other vector's entries (a rebuild at each compaction would
 * cost the whole index even when only a few pipelines were swept). Each
 * later entry of the cluster moves into the hole unless its home slot
 * lies cyclically in (hole, entry], where moving it would hide it. */
static void index_del(kb_sim_kfp *kfp, const char *key, const void *obj) {
  if (!kfp->index_cap) return;
  size_t mask = kfp->index_cap - 1, i = hash_str(key) & mask;
  while (kfp->index[i].key && kfp->index[i].obj != obj) i = (i + 1) & mask;
  if (!kfp->index[i].key) return; /* never indexed (creation failed half-way) */
  for (size_t k = (i + 1) & mask; kfp->index[k].key; k = (k + 1) & mask) {
    size_t home = hash_str(kfp->index[k].key) & mask;
    int stays = i < k ? home > i && home <= k : home > i || home <= k;
    if (stays) continue;
    kfp->index[i] = kfp->index[k];
    i = k;
  }
  kfp->index[i] = (kfp_slot){NULL, 0, NULL};
  kfp->index_n--;
}

void *kb_kfp_lookup(const kb_sim_kfp *kfp, const char *id, kfp_kind kind) {
  if (!id || !*id || !kfp->index_cap) return NULL;
  size_t j = hash_str(id) & (kfp->index_cap - 1);
  for (; kfp->index[j].key; j = (j + 1) & (kfp->index_cap - 1)) {
    const kfp_slot *s = &kfp->index[j];
    if (s->kind == kind && !strcmp(s->key, id)) return s->obj;
  }
  return NULL;
}

static int is_deleted(kfp_kind kind, const void *obj) {
  switch (kind) {
  case KFP_PIPELINE: return ((const kfp_pipeline *)obj)->deleted;
  case KFP_VERSION: return ((const kfp_version *)obj)->deleted;
  case KFP_EXPERIMENT: return ((const kfp_experiment *)obj)->deleted;
  case KFP_RUN: return ((const kfp_run *)obj)->deleted;
  case KFP_RECURRING: return ((const kfp_recurring *)obj)->deleted;
  }
  return 1;
}

static kfp_vec *vec_of(kb_sim_kfp *kfp, kfp_kind kind) {
  switch (kind) {
  case KFP_PIPELINE: return &kfp->pipelines;
  case KFP_VERSION: return &kfp->versions;
  case KFP_EXPERIMENT: return &kfp->experiments;
  case KFP_RUN: return &kfp->runs;
  case KFP_RECURRING: return &kfp->recurring;
  }
  return NULL;
}

int kb_kfp_store_add(kb_sim_kfp *kfp, kfp_kind kind, const char *id, void *obj) {
  kfp_vec *v = vec_of(kfp, kind);
  if (kb_kfp_vec_push(v, obj)) return -1;
  if (index_put(kfp, id, kind, obj)) {
    v->n--;
    return -1;
  }
  return 0;
}

double kb_kfp_now_unix_f(const kb_sim_kfp *kfp) {
  return kb_sim_epoch(kfp->sim) + kb_sim_now(kfp->sim);
}

int64_t kb_kfp_now_unix(const kb_sim_kfp *kfp) {
  return (int64_t)floor(kb_kfp_now_unix_f(kfp));
}

static int same_ns(const char *a, const char *b) {
  return !strcmp(a ? a : "", b ? b : "");
}

kfp_pipeline *kb_kfp_pipeline_by_name(const kb_sim_kfp *kfp, const char *name, const char *ns) {
  for (size_t i = 0; i < kfp->pipelines.n; i++) {
    kfp_pipeline *p = kfp->pipelines.items[i];
    if (!p->deleted && !strcmp(p->name, name) && same_ns(p->namespace_, ns)) return p;
  }
  return NULL;
}

kfp_experiment *kb_kfp_experiment_by_name(const kb_sim_kfp *kfp, const char *name, const char *ns) {
  for (size_t i = 0; i < kfp->experiments.n; i++) {
    kfp_experiment *e = kfp->experiments.items[i];
    if (!e->deleted && !strcmp(e->name, name) && same_ns(e->namespace_, ns)) return e;
  }
  return NULL;
}

size_t kb_kfp_pipeline_version_count(const kb_sim_kfp *kfp, const char *pipeline_id) {
  size_t n = 0;
  for (size_t i = 0; i < kfp->versions.n; i++) {
    kfp_version *v = kfp->versions.items[i];
    if (!v->deleted && !strcmp(v->pipeline_id, pipeline_id)) n++;
  }
  return n;
}

kfp_version *kb_kfp_latest_version(const kb_sim_kfp *kfp, const char *pipeline_id) {
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

size_t kb_kfp_live_count(const kfp_vec *v) {
  return v->n - v->n_deleted;
}

kfp_run *kb_kfp_run_of_sim(const kb_sim_kfp *kfp, int sim_run) {
  if (sim_run < 0 || (size_t)sim_run >= kfp->sim_to_run_cap) return NULL;
  return kfp->sim_to_run[sim_run];
}

int kb_kfp_map_sim_run(kb_sim_kfp *kfp, int sim_run, kfp_run *run) {
  if (sim_run < 0) return -1;
  if ((size_t)sim_run >= kfp->sim_to_run_cap) {
    if (!run) return 0;
    size_t cap = kfp->sim_to_run_cap ? kfp->sim_to_run_cap : 64;
    while (cap <= (size_t)sim_run) cap *= 2;
    kfp_run **m = realloc(kfp->sim_to_run, cap * sizeof *m);
    if (!m) return -1;
    for (size_t i = kfp->sim_to_run_cap; i < cap; i++) m[i] = NULL;
    kfp->sim_to_run = m;
    kfp->sim_to_run_cap = cap;
  }
  kfp->sim_to_run[sim_run] = run;
  return 0;
}

void kb_kfp_target_free(kfp_target *t) {
  if (t->version) t->version->pins--;
  free(t->pipeline_id);
  free(t->pipeline_version_id);
  free(t->pipeline_root);
  cJSON_Delete(t->pipeline_spec);
  cJSON_Delete(t->parameters);
  memset(t, 0, sizeof *t);
}

int kb_kfp_target_copy(kfp_target *dst, const kfp_target *src) {
  memset(dst, 0, sizeof *dst);
  dst->pipeline_id = kb_kfp_strdup(src->pipeline_id);
  dst->pipeline_version_id = kb_kfp_strdup(src->pipeline_version_id);
  dst->version = src->version;
  if (dst->version) dst->version->pins++;
  dst->pipeline_root = kb_kfp_strdup(src->pipeline_root);
  dst->pipeline_spec = src->pipeline_spec ? cJSON_Duplicate(src->pipeline_spec, 1) : NULL;
  dst->parameters = src->parameters ? cJSON_Duplicate(src->parameters, 1) : NULL;
  dst->v1_params = src->v1_params;
  if ((src->pipeline_id && !dst->pipeline_id) ||
      (src->pipeline_version_id && !dst->pipeline_version_id) ||
      (src->pipeline_root && !dst->pipeline_root) ||
      (src->pipeline_spec && !dst->pipeline_spec) || (src->parameters && !dst->parameters)) {
    kb_kfp_target_free(dst);
    return -1;
  }
  return 0;
}

/* ---- freeing ---- */

static void free_pipeline(kfp_pipeline *p) {
  free(p->id), free(p->name), free(p->display_name), free(p->description);
  free(p->namespace_);
  cJSON_Delete(p->tags);
  free(p);
}

/* Drops the version's holds on its model pipelines: runs still using one
 * keep it alive in the model. */
static void free_version(kb_sim_kfp *kfp, kfp_version *v) {
  kb_sim_pipeline_release(kfp->sim, v->sim_pipeline);
  for (size_t i = 0; i < v->n_cache; i++) {
    kb_sim_pipeline_release(kfp->sim, v->cache[i].sim_pipeline);
    free(v->cache[i].key);
  }
  free(v->cache);
  free(v->id), free(v->pipeline_id), free(v->name), free(v->display_name);
  free(v->description), free(v->code_source_url), free(v->package_url);
  cJSON_Delete(v->docs);
  cJSON_Delete(v->spec);
  cJSON_Delete(v->tags);
  free(v);
}

static void free_experiment(kfp_experiment *e) {
  free(e->id), free(e->name), free(e->description), free(e->namespace_);
  free(e);
}

void kb_kfp_run_free(kfp_run *r) {
  free(r->id), free(r->display_name), free(r->description), free(r->experiment_id);
  free(r->service_account), free(r->recurring_run_id);
  free(r->retried);
  cJSON_free(r->manifest_json); /* printed by cJSON */
  kb_kfp_target_free(&r->t);
  free(r);
}

static void free_recurring(kfp_recurring *rr) {
  free(rr->id), free(rr->display_name), free(rr->description), free(rr->experiment_id);
  free(rr->service_account), free(rr->cron);
  kb_kfp_target_free(&rr->t);
  free(rr);
}

static void free_obj(kb_sim_kfp *kfp, kfp_kind kind, void *obj) {
  switch (kind) {
  case KFP_PIPELINE: free_pipeline(obj); break;
  case KFP_VERSION: free_version(kfp, obj); break;
  case KFP_EXPERIMENT: free_experiment(obj); break;
  case KFP_RUN: kb_kfp_run_free(obj); break;
  case KFP_RECURRING: free_recurring(obj); break;
  }
}

/* ---- deletion and sweeping ---- */

/* Deletions a vector absorbs before it is compacted, on top of half its
 * size: small stores are not compacted on every deletion. */
#define KFP_SWEEP_SLACK 32

void kb_kfp_mark_deleted(kb_sim_kfp *kfp, kfp_kind kind, void *obj) {
  const char *id = NULL;
  int *flag = NULL;
  kfp_target *t = NULL;
  switch (kind) {
  case KFP_PIPELINE: id = ((kfp_pipeline *)obj)->id, flag = &((kfp_pipeline *)obj)->deleted; break;
  case KFP_VERSION: id = ((kfp_version *)obj)->id, flag = &((kfp_version *)obj)->deleted; break;
  case KFP_EXPERIMENT:
    id = ((kfp_experiment *)obj)->id, flag = &((kfp_experiment *)obj)->deleted;
    break;
  case KFP_RUN:
    id = ((kfp_run *)obj)->id, flag = &((kfp_run *)obj)->deleted, t = &((kfp_run *)obj)->t;
    break;
  case KFP_RECURRING:
    id = ((kfp_recurring *)obj)->id, flag = &((kfp_recurring *)obj)->deleted;
    t = &((kfp_recurring *)obj)->t;
    break;
  }
  if (!flag || *flag) return;
  *flag = 1;
  vec_of(kfp, kind)->n_deleted++;
  if (id) index_del(kfp, id, obj);
  /* a deleted run never runs again: its version may go once deleted too */
  if (t && t->version) {
    t->version->pins--;
    t->version = NULL;
  }
}

static int may_free(kfp_kind kind, const void *obj) {
  if (!is_deleted(kind, obj)) return 0;
  return kind != KFP_VERSION || ((const kfp_version *)obj)->pins == 0;
}

/* Frees the deleted objects of one vector, keeping the others in order. */
static void compact(kb_sim_kfp *kfp, kfp_kind kind) {
  kfp_vec *v = vec_of(kfp, kind);
  size_t w = 0, kept = 0;
  for (size_t i = 0; i < v->n; i++) {
    void *obj = v->items[i];
    if (may_free(kind, obj)) {
      free_obj(kfp, kind, obj);
      continue;
    }
    kept += is_deleted(kind, obj);
    v->items[w++] = obj;
  }
  v->n = w;
  v->n_deleted = v->n_kept = kept;
  /* give back what a storm made it grow to */
  if (v->cap > 64 && v->n * 4 < v->cap) {
    size_t cap = v->n * 2 > 64 ? v->n * 2 : 64;
    void **items = realloc(v->items, cap * sizeof *items);
    if (items) {
      v->items = items;
      v->cap = cap;
    }
  }
  kfp->compactions++;
}

/* Runs and recurring runs before versions: their targets point at
 * (pin) versions. */
static const kfp_kind free_order[] = {KFP_RUN, KFP_RECURRING, KFP_EXPERIMENT, KFP_VERSION,
                                      KFP_PIPELINE};
#define N_KINDS (sizeof free_order / sizeof free_order[0])

void kb_kfp_store_sweep(kb_sim_kfp *kfp) {
  for (size_t k = 0; k < N_KINDS; k++) {
    kfp_vec *v = vec_of(kfp, free_order[k]);
    if (v->n_deleted - v->n_kept > v->n / 2 + KFP_SWEEP_SLACK) compact(kfp, free_order[k]);
  }
  /* the index only holds live objects: shrink it after a storm */
  size_t cap = kfp->index_cap;
  while (cap > KFP_INDEX_MIN && kfp->index_n * 8 < cap) cap /= 2;
  if (cap != kfp->index_cap) index_resize(kfp, cap);
}

void kb_kfp_store_free(kb_sim_kfp *kfp) {
  for (size_t k = 0; k < N_KINDS; k++) {
    kfp_vec *v = vec_of(kfp, free_order[k]);
    for (size_t i = 0; i < v->n; i++) free_obj(kfp, free_order[k], v->items[i]);
    free(v->items);
    memset(v, 0, sizeof *v);
  }
  free(kfp->index);
  free(kfp->sim_to_run);
}
