/* Shared internals of the Kubernetes object store (k8s_*.c). */
#ifndef KB_K8S_INTERNAL_H
#define KB_K8S_INTERNAL_H

#include "kb/buf.h"
#include "kb/k8s_store.h"

/* A stored object state, shared by the entry and the watch history
 * (k8s_obj.c). */
typedef struct k8s_obj k8s_obj;

typedef struct k8s_entry {
  char *ns;   /* "" for cluster-scoped objects */
  char *name;
  k8s_obj *o;
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
  k8s_obj *obj;  /* the new state (DELETED: the last state) */
  k8s_obj *prev; /* MODIFIED: the state before */
} k8s_event;

typedef struct k8s_log k8s_log;

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

/* The dependents of each owner uid, from ownerReferences (k8s_owners.c).
 * track(+1) when an entry's state is stored, track(-1) before it is
 * replaced or removed; ns and name are the entry's own strings. */
typedef struct k8s_owners k8s_owners;
k8s_owners *kb_k8s_owners_new(void);
void kb_k8s_owners_free(k8s_owners *o);
void kb_k8s_owners_track(k8s_owners *o, int res_index, const char *ns, const char *name,
                         const cJSON *obj, int delta);
/* Calls fn for every object whose ownerReferences name uid; -1 when the
 * index is incomplete (out of memory) and the caller must scan. */
int kb_k8s_owners_dependents(const k8s_owners *o, const char *uid,
                             void (*fn)(void *ud, int res_index, const char *ns,
                                        const char *name),
                             void *ud);

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
  k8s_log **logs; /* a hash table by pod (k8s_log.c), grown with n_logs */
  size_t n_logs, cap_logs;
  kb_k8s_log_fn log_fn;
  void *log_ud;
  /* the field manager of the API request writing now (kb_k8s_store_set_manager),
   * NULL for the simulator's own writes: they record no managedFields */
  const char *manager;
  /* objects holding a tree, for kb_k8s_store_trim (k8s_obj.c) */
  k8s_obj **hot;
  size_t n_hot, cap_hot;
  struct k8s_pack *pack; /* the compressor, dictionaries by resource */
};

/* A new stored state of a resource (its index) holding tree (consumed),
 * one reference; NULL on OOM. */
k8s_obj *kb_k8s_obj_new(kb_k8s_store *st, int res_index, cJSON *tree);
void kb_k8s_obj_ref(k8s_obj *o);
/* Whether an entry holds the state (packed deflated) or only the history
 * and lists do (packed as text: it goes when its events do). */
void kb_k8s_obj_set_current(k8s_obj *o, int current);
void kb_k8s_obj_unref(k8s_obj *o);
/* The state as a tree, parsed from its text if packed (kept until the next
 * kb_k8s_store_trim); NULL on OOM. */
const cJSON *kb_k8s_obj_tree(const kb_k8s_store *st, k8s_obj *o);
/* A new tree of the state (the caller's); NULL on OOM. */
cJSON *kb_k8s_obj_copy(const k8s_obj *o);
/* Appends the state's JSON text (cJSON_PrintUnformatted's) to out; 0 or -1. */
int kb_k8s_obj_append(k8s_obj *o, kb_buf *out);
/* Whether the state matches the selector (a packed one is parsed for it
 * and not kept). */
int kb_k8s_obj_match(const k8s_obj *o, const kb_k8s_selector *sel);
/* Frees the compressor and its dictionaries (kb_k8s_store_free). */
void kb_k8s_pack_free(kb_k8s_store *st);
/* The entry's object as a tree (see kb_k8s_obj_tree). */
static inline const cJSON *kb_k8s_entry_tree(const kb_k8s_store *st, const k8s_entry *e) {
  return kb_k8s_obj_tree(st, e->o);
}

/* Store-internal write flags, beside the public KB_K8S_* ones. */
#define K8S_MARK_DELETED 0x100 /* replace_entry: a delete sets the deletion fields */
#define K8S_KEEP_MANAGED 0x200 /* create/update: managedFields are the caller's (apply) */
#define K8S_WHOLE 0x400 /* create/replace_entry: the object's spec and status both, as
                         * given (the mirror's one write of a pod's latest state) */

/* managedFields (k8s_apply.c): the REST layer names the request's field
 * manager around a write; the store then records, in next, the fields the
 * write changed from old (NULL: created) as that manager's Update. */
void kb_k8s_store_set_manager(kb_k8s_store *st, const char *manager);
void kb_k8s_managed_record(kb_k8s_store *st, const kb_k8s_res *res, const cJSON *old, cJSON *next);

/* Annotation on objects the mirror (controllers/) made for the model's own
 * runs; argo-server's actions tell them from objects a client created. */
#define KB_SIM_MIRRORED "sim.kbrun.io/mirrored"

/* "pods" or "jobs.batch": how Status messages name a resource. */
void kb_k8s_qualified(const kb_k8s_res *res, char *out, size_t n);
const char *kb_k8s_meta_str(const cJSON *obj, const char *field);
cJSON *kb_k8s_meta(cJSON *obj); /* metadata, created if missing; NULL on OOM */
/* A dotted path ("status.phase", ".spec.x"): the node or NULL. */
const cJSON *kb_k8s_path(const cJSON *obj, const char *path);
/* The number or string at a dotted path, or the default / NULL (k8s_select.c). */
double kb_k8s_path_num(const cJSON *obj, const char *path, double dflt);
const char *kb_k8s_path_str(const cJSON *obj, const char *path);
/* A LabelSelector ({matchLabels, matchExpressions}) as selector text;
 * -1 when it does not fit. An empty selector is "" (everything). */
int kb_k8s_selector_text(const cJSON *sel, char *out, size_t n);
/* An object's annotation, or NULL (k8s_store.c). */
const char *kb_k8s_annotation(const cJSON *obj, const char *key);
/* Sets md[map][key] = value (map: "labels", "annotations"), creating the
 * map, or replacing what is there that is not an object. */
void kb_k8s_set_meta(cJSON *md, const char *map, const char *key, const char *value);
/* Defaulting helpers (k8s_builtin.c): the object child `key`, made an
 * object if missing or of another type; a string or number set only where
 * absent; a 422 "Kind.group "name" is invalid: field: what". */
cJSON *kb_k8s_obj_child(cJSON *o, const char *key);
void kb_k8s_default_str(cJSON *o, const char *key, const char *v);
void kb_k8s_default_num(cJSON *o, const char *key, double v);
int kb_k8s_invalid(kb_k8s_error *err, const kb_k8s_res *res, const cJSON *obj, const char *field,
                const char *what);
/* Built-in defaulting and validation on create/update (k8s_builtin.c). */
int kb_k8s_default(kb_k8s_store *st, const kb_k8s_res *res, cJSON *obj, int create,
                kb_k8s_error *err);
/* ObjectMeta rules (k8s_meta_valid.c), 422 in the apiserver's words:
 * the name (a DNS-1123 label for namespaces and services, else a
 * subdomain), label keys and values, annotation keys and total size. */
int kb_k8s_valid_name(const kb_k8s_res *res, const char *name, kb_k8s_error *err);
int kb_k8s_valid_meta(const kb_k8s_res *res, const cJSON *obj, kb_k8s_error *err);
/* Fields of a served kind an update may not change (a Job's template,
 * selector, completionMode): 422 "field is immutable". */
int kb_k8s_immutable(const kb_k8s_res *res, const cJSON *old, const cJSON *next, kb_k8s_error *err);
void kb_k8s_log_drop_pod(kb_k8s_store *st, const char *ns, const char *pod);
void kb_k8s_log_free_all(kb_k8s_store *st);
size_t kb_k8s_base64_encode(const char *in, size_t n, char *out); /* out: 4*ceil(n/3)+1 */

/* The Kubernetes 1.32 schemas (k8s_schema.c, from the API's own OpenAPI
 * document). The OpenAPI name of a kind (+ suffix, "List"):
 * io.k8s.api.core.v1.Pod, io.argoproj.v1alpha1.Workflow for custom types. */
void kb_k8s_schema_name(const kb_k8s_res *r, const char *suffix, char *out, size_t n);
/* A definition by name, or NULL; the definition of a built-in kind whose
 * group/version/kind it declares, or NULL (custom and unknown kinds). */
const cJSON *kb_k8s_schema_def(const char *name);
const cJSON *kb_k8s_schema_of(const kb_k8s_res *r);
/* The definition a schema's "$ref" names (NULL stays NULL); the schema of
 * field `key` of an object schema (its property, else its
 * additionalProperties), or NULL. */
const cJSON *kb_k8s_schema_resolve(const cJSON *schema);
const cJSON *kb_k8s_schema_child(const cJSON *schema, const char *key);
/* The fields of obj its kind's schema does not know (at any depth) and
 * those given twice, as the apiserver's strict decoder lists them:
 * `unknown field "spec.template.spec.containers[0].bogus", duplicate
 * field "metadata.name"` in out (cut to n). Returns how many. */
int kb_k8s_schema_unknown_fields(const kb_k8s_res *r, const cJSON *obj, char *out, size_t n);
/* Adds definition `name` and every one it references, as OpenAPI v3
 * components, to `components`; 0 if there is no such definition. */
int kb_k8s_schema_add_closure(cJSON *components, const char *name);
int kb_k8s_base64_decode(const char *in, char *out, size_t cap, size_t *n);

/* ---- shared by the store's files (k8s_store.c, k8s_watch.c, k8s_delete.c,
 * k8s_list.c, k8s_status.c) ---- */
k8s_bucket *kb_k8s_bucket_of(const kb_k8s_store *st, const kb_k8s_res *res);
/* Index of the first entry >= (ns, name); *found when equal. */
size_t kb_k8s_bucket_search(const k8s_bucket *b, const char *ns, const char *name, int *found);
k8s_entry *kb_k8s_entry_find(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                             const char *name);
int kb_k8s_not_found(kb_k8s_error *err, const kb_k8s_res *res, const char *name);
int kb_k8s_conflict(kb_k8s_error *err, const kb_k8s_res *res, const char *name);
int kb_k8s_err_named(kb_k8s_error *err, const char *name, int rc);
int kb_k8s_oom(kb_k8s_error *err);
int kb_k8s_set_rv(cJSON *obj, uint64_t rv);
int kb_k8s_set_str(cJSON *obj, const char *key, const char *v);
int kb_k8s_set_item(cJSON *obj, const char *key, cJSON *v);
int kb_k8s_has_finalizers(const cJSON *obj);
/* Removes the entry and returns its object (the entry's reference). */
k8s_obj *kb_k8s_take_entry(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e);
/* Stores `next` (consumed) in place of entry e after the metadata rules. */
/* kb_k8s_create of obj itself (consumed, whatever the outcome): a writer
 * that built the object for the store saves the copy. */
int kb_k8s_create_take(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, cJSON *obj,
                       unsigned flags, cJSON **out, kb_k8s_error *err);
int kb_k8s_replace_entry(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e, cJSON *next,
                         unsigned flags, cJSON **out, kb_k8s_error *err);
/* Takes the entry out and records its DELETED event (the caller bumped st->rv). */
void kb_k8s_finish_delete(kb_k8s_store *st, const kb_k8s_res *res, k8s_entry *e, cJSON **out);
/* Records a write in the history and delivers it (k8s_watch.c). */
void kb_k8s_emit(kb_k8s_store *st, kb_k8s_event_type type, const kb_k8s_res *res,
                 k8s_obj *obj, k8s_obj *prev);
void kb_k8s_event_unref(k8s_event *ev);
void kb_k8s_watch_free(kb_k8s_watch *w);
/* kb_k8s_store_trim for all but the `keep` most recently made trees (a
 * trim spread over turns: each packs what came since, not hundreds at
 * once); the same rule on where it may be called. */
void kb_k8s_store_trim_to(kb_k8s_store *st, size_t keep);
/* 1 while a watch (a client's or a controller's) on res is open. */
int kb_k8s_store_watched(const kb_k8s_store *st, const kb_k8s_res *res);

#endif
