/* Shared internals of the Kubernetes object store (k8s_*.c). */
#ifndef KB_K8S_INTERNAL_H
#define KB_K8S_INTERNAL_H

#include "kb/buf.h"
#include "kb/k8s_store.h"

typedef struct k8s_entry {
  char *ns;   /* "" for cluster-scoped objects */
  char *name;
  cJSON *obj;
} k8s_entry;

/* One resource type and its objects, sorted by (ns, name). */
typedef struct k8s_bucket {
  kb_k8s_res res;
  k8s_entry *v;
  size_t n, cap;
} k8s_bucket;

typedef struct k8s_event {
  int refs;
  kb_k8s_event_type type;
  int res_index;
  uint64_t rv;
  cJSON *obj;  /* the new state (DELETED: the last state) */
  cJSON *prev; /* MODIFIED: the state before */
} k8s_event;

typedef struct k8s_log k8s_log;
#define K8S_LOG_BUCKETS 1024

struct kb_k8s_watch {
  kb_k8s_store *st;
  int res_index;
  char *ns; /* NULL: all */
  kb_k8s_selector *sel;
  kb_k8s_watch_fn fn;
  void *ud;
  uint64_t start_rv; /* events at or before it are already known */
  int cancelled, done;
  kb_k8s_watch *next;
};

typedef struct k8s_pending {
  k8s_event *ev;
  struct k8s_pending *next;
} k8s_pending;

/* Counts of ownerReferences by owner uid (k8s_owners.c). */
typedef struct k8s_owners k8s_owners;
k8s_owners *k8s_owners_new(void);
void k8s_owners_free(k8s_owners *o);
void k8s_owners_track(k8s_owners *o, const cJSON *obj, int delta);
int k8s_owners_has(k8s_owners *o, const char *uid);

struct kb_k8s_store {
  kb_k8s_store_config cfg;
  char service_cidr[48]; /* cfg.service_cidr, copied */
  k8s_owners *owners;
  k8s_bucket **buckets;
  size_t n_buckets;
  uint64_t rv;
  uint64_t rng;
  /* watch history: a ring of the last cfg.history events */
  k8s_event **ring;
  size_t ring_head, ring_count;
  uint64_t floor_rv; /* newest evicted event: resuming before it is 410 */
  kb_k8s_watch *watches;
  k8s_pending *pend_head, *pend_tail;
  int dispatching;
  /* logs */
  k8s_log *logs[K8S_LOG_BUCKETS];
  kb_k8s_log_fn log_fn;
  void *log_ud;
};

/* "pods" or "jobs.batch": how Status messages name a resource. */
void k8s_qualified(const kb_k8s_res *res, char *out, size_t n);
const char *k8s_meta_str(const cJSON *obj, const char *field);
cJSON *k8s_meta(cJSON *obj); /* metadata, created if missing; NULL on OOM */
/* A dotted path ("status.phase", ".spec.x"): the node or NULL. */
const cJSON *k8s_path(const cJSON *obj, const char *path);
/* Built-in defaulting and validation on create/update (k8s_builtin.c). */
int k8s_default(kb_k8s_store *st, const kb_k8s_res *res, cJSON *obj, int create,
                kb_k8s_error *err);
/* Fields of a served kind an update may not change (a Job's template,
 * selector, completionMode): 422 "field is immutable". */
int k8s_immutable(const kb_k8s_res *res, const cJSON *old, const cJSON *next, kb_k8s_error *err);
void k8s_log_drop_pod(kb_k8s_store *st, const char *ns, const char *pod);
void k8s_log_free_all(kb_k8s_store *st);
size_t k8s_base64_encode(const char *in, size_t n, char *out); /* out: 4*ceil(n/3)+1 */
int k8s_base64_decode(const char *in, char *out, size_t cap, size_t *n);

#endif
