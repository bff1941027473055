/* An in-memory Kubernetes object store: the state behind the simulator's
 * API server (src/sim/k8s/k8s_api.c serves it over HTTP; the cluster model
 * uses this C API directly).
 *
 *   kb_k8s_store *st = kb_k8s_store_new(NULL);
 *   kb_k8s_store_add_builtins(st);            // pods, jobs, workflows, ...
 *   const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
 *   cJSON *out = NULL; kb_k8s_error e;
 *   if (kb_k8s_create(st, pods, "default", pod, 0, &out, &e) < 0)
 *     printf("%d %s: %s\n", e.code, e.reason, e.message);
 *
 * Objects are cJSON trees keyed by (resource type, namespace, name). The
 * store sets what an apiserver sets: metadata.uid, resourceVersion (one
 * global counter bumped on every write), creationTimestamp, generation
 * (+1 when anything outside metadata and status changes), a name from
 * generateName, kind/apiVersion; it keeps the status of types with a status
 * subresource out of main-resource updates, checks resourceVersion
 * preconditions (409 Conflict), runs finalizers and ownerReference garbage
 * collection on delete.
 *
 * Errors: functions return 0 (or a count) on success and -(HTTP status) on
 * failure (-404 NotFound, -409 AlreadyExists/Conflict, -410 Gone, -400
 * BadRequest, -422 Invalid, -415 UnsupportedMediaType, -500 for out of
 * memory), and fill *err (may be NULL) with the Kubernetes Status reason and
 * the message a client prints (`pods "x" not found`). kb_k8s_status_json
 * turns it into the Status object the REST layer sends.
 *
 * Ownership: inputs are never consumed (the store copies what it keeps);
 * `cJSON **out` results are new trees the caller frees with cJSON_Delete.
 * kb_k8s_peek returns a borrowed pointer, valid until the next write of
 * that object or the next kb_k8s_store_trim.
 *
 * Watches and controller hooks run synchronously inside the write that
 * causes them, after the store is consistent. A callback may write to the
 * store or cancel watches: events caused meanwhile are queued and delivered
 * after the current one, so every watcher sees events in resourceVersion
 * order. Not thread-safe: a store belongs to one thread (the simulator's). */
#ifndef KB_K8S_STORE_H
#define KB_K8S_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

typedef struct kb_k8s_store kb_k8s_store;
typedef struct kb_k8s_watch kb_k8s_watch;

typedef struct kb_k8s_error {
  int code;          /* HTTP status: 404, 409, ... */
  char reason[32];   /* NotFound, AlreadyExists, Conflict, Invalid, BadRequest, Gone, ... */
  char message[1024]; /* what kubectl prints after "Error from server (Reason): " */
  char name[128];    /* details.name, "" when none */
  /* details.causes given explicitly (kb_k8s_error_cause); a 422 without
   * them has its cause read from the message */
  int n_causes;
  struct { char reason[32], message[200], field[240]; } causes[8];
} kb_k8s_error;

/* A printer column for the Table format (CRD additionalPrinterColumns). */
typedef struct kb_k8s_column {
  const char *name;      /* "Status" */
  const char *type;      /* string | integer | number | boolean | date */
  const char *json_path; /* ".status.phase": a dotted path */
  const char *description;
  int priority;          /* 0: always shown; >0: with -o wide */
} kb_k8s_column;

/* A resource type. Strings are copied by kb_k8s_store_add_resource. */
typedef struct kb_k8s_resdef {
  const char *group;       /* "" for the core group */
  const char *version;     /* "v1" */
  const char *resource;    /* plural: "pods" */
  const char *kind;        /* "Pod" */
  const char *singular;    /* "pod"; NULL: lower-case kind */
  const char *short_names; /* "po,pods"? comma-separated, may be NULL */
  const char *categories;  /* "all", comma-separated, may be NULL */
  int namespaced;
  int status_subresource;  /* 1: PUT/PATCH on the resource keep the old status */
  int custom;              /* 1: a CRD-defined type (no strategic merge patch) */
  /* Field selector labels beyond metadata.name / metadata.namespace,
   * comma-separated dotted paths: "spec.nodeName,status.phase". */
  const char *field_labels;
  const kb_k8s_column *columns; /* CR printer columns (others: built-in tables) */
  size_t n_columns;
} kb_k8s_resdef;

/* A registered resource type (owned by the store; fields read-only). */
typedef struct kb_k8s_res {
  char *group, *version, *resource, *kind, *singular, *list_kind;
  char *short_names, *categories, *field_labels;
  char *api_version; /* "v1" or "batch/v1" */
  int namespaced, status_subresource, custom;
  kb_k8s_column *columns;
  size_t n_columns;
  int index; /* position in registration order */
} kb_k8s_res;

typedef struct kb_k8s_store_config {
  size_t history;        /* watch events kept for resume [4096]; older RV -> 410 */
  /* Unix seconds for timestamps (creationTimestamp, deletionTimestamp, Age
   * columns): the simulator passes its virtual clock. NULL: wall clock. */
  double (*now)(void *ud);
  void *now_ud;
  uint64_t seed;         /* uids and generateName suffixes [1] */
  /* Services' ClusterIPs are allocated from it [10.96.0.0/12]; copied. */
  const char *service_cidr;
} kb_k8s_store_config;

/* ---- the store -------------------------------------------------------- */

kb_k8s_store *kb_k8s_store_new(const kb_k8s_store_config *cfg); /* NULL: defaults */
/* Stored objects are kept as their JSON text, deflated; a tree is made
 * when one is read (kb_k8s_peek, watches, writes) and kept until this call,
 * which packs them all again. Call it only where no pointer kb_k8s_peek (or a
 * watch callback) gave is still in use: the simulator calls it between loop
 * turns and between the mirror's writes. Without it objects keep trees. */
void kb_k8s_store_trim(kb_k8s_store *st);
/* What the store holds, for bounds on its memory (tests, bench). */
typedef struct kb_k8s_store_stats {
  size_t objects;    /* stored objects, every type */
  size_t trees;      /* of them, held as a tree now */
  size_t text_bytes; /* their JSON text */
  size_t stored_bytes; /* what holds it: the text deflated (or printed) */
  size_t history;    /* watch events kept */
  size_t hot;        /* objects (stored or in the history) with a tree */
} kb_k8s_store_stats;
void kb_k8s_store_usage(const kb_k8s_store *st, kb_k8s_store_stats *out);
/* Objects holding a tree now (what the next trim would pack). */
size_t kb_k8s_store_hot(const kb_k8s_store *st);
/* Cancels every watch (without callbacks) and frees everything. */
void kb_k8s_store_free(kb_k8s_store *st);

/* Registers a resource type; returns it, or NULL if out of memory or the
 * (group, resource) pair exists. */
const kb_k8s_res *kb_k8s_store_add_resource(kb_k8s_store *st, const kb_k8s_resdef *def);
/* Registers the simulator's types: core/v1 namespaces, nodes, pods,
 * configmaps, secrets, persistentvolumeclaims, events, serviceaccounts;
 * batch/v1 jobs; apiextensions.k8s.io/v1 customresourcedefinitions;
 * argoproj.io/v1alpha1 workflows, workflowtemplates; kubeflow.org/v1 tfjobs, pytorchjobs,
 * mpijobs; and the workload, service and cluster kinds (apps/v1
 * deployments, replicasets; core/v1 services, endpoints, persistentvolumes;
 * discovery.k8s.io/v1 endpointslices; batch/v1 cronjobs;
 * coordination.k8s.io/v1 leases; storage.k8s.io/v1 storageclasses;
 * scheduling.k8s.io/v1 priorityclasses; authorization.k8s.io/v1
 * selfsubjectaccessreviews; authentication.k8s.io/v1 selfsubjectreviews).
 * Creates a CustomResourceDefinition object for each custom type, the
 * namespaces default, kube-system, kube-public, kube-node-lease and
 * kubeflow with a "default" ServiceAccount in each, the StorageClass
 * `standard`, the PriorityClasses system-cluster-critical and
 * system-node-critical, and the `kubernetes` Service. Returns 0 or -500. */
int kb_k8s_store_add_builtins(kb_k8s_store *st);

/* By group and plural (or singular, kind in any case, or short name). */
const kb_k8s_res *kb_k8s_store_find(const kb_k8s_store *st, const char *group,
                                    const char *name);
/* By group, version and plural exactly. */
const kb_k8s_res *kb_k8s_store_lookup(const kb_k8s_store *st, const char *group,
                                      const char *version, const char *resource);
size_t kb_k8s_store_resource_count(const kb_k8s_store *st);
const kb_k8s_res *kb_k8s_store_resource_at(const kb_k8s_store *st, size_t i);

/* The last resourceVersion written (0 before any write). */
uint64_t kb_k8s_store_rv(const kb_k8s_store *st);
/* Number of objects of a type (all namespaces when ns is NULL). */
size_t kb_k8s_store_count(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns);
/* The store's clock (unix seconds), and that time as RFC 3339 ("...Z"). */
double kb_k8s_store_now(const kb_k8s_store *st);
void kb_k8s_format_time(double unix_seconds, char out[32]);
/* Parses "2024-01-02T03:04:05Z" (fraction and offsets accepted); -1 on error. */
double kb_k8s_parse_time(const char *s);

/* ---- objects ----------------------------------------------------------- */

enum {
  KB_K8S_DRY_RUN = 1,          /* validate and answer, store nothing */
  KB_K8S_STATUS = 2,           /* the status subresource: only .status changes */
  KB_K8S_STRICT_FIELDS = 4     /* reserved: fieldValidation=Strict */
};

/* Creates obj (metadata.name or generateName required; for a namespaced
 * type the namespace is `ns`, or metadata.namespace, or "default"; a
 * metadata.namespace different from `ns` is 400). Namespaced objects need an
 * existing namespace (404 `namespaces "x" not found`), except when the
 * namespaces type is not registered. Returns 0 and the stored object in *out. */
int kb_k8s_create(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const cJSON *obj,
                  unsigned flags, cJSON **out, kb_k8s_error *err);

/* A copy of the object (NULL + err 404 when absent). */
cJSON *kb_k8s_get(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  kb_k8s_error *err);
/* The stored object itself: read-only, valid until the next write of it
 * or the next kb_k8s_store_trim. */
const cJSON *kb_k8s_peek(const kb_k8s_store *st, const kb_k8s_res *res, const char *ns,
                         const char *name);

/* PUT: replaces the object named by obj's metadata.name (or `name` when
 * not NULL; a mismatch is 400). A non-empty metadata.resourceVersion must
 * equal the stored one (else 409 Conflict). uid, creationTimestamp and
 * deletion fields are kept; generation is bumped when spec changes. With
 * KB_K8S_STATUS only .status is taken from obj; without it, types with a
 * status subresource keep their stored status. Removing the last finalizer
 * of an object being deleted deletes it. */
int kb_k8s_update(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  const cJSON *obj, unsigned flags, cJSON **out, kb_k8s_error *err);

typedef enum kb_k8s_patch_type {
  KB_K8S_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
  KB_K8S_PATCH_JSON,      /* application/json-patch+json (RFC 6902) */
  KB_K8S_PATCH_STRATEGIC  /* application/strategic-merge-patch+json */
} kb_k8s_patch_type;

/* Applies a patch document (JSON text) to the stored object, then stores it
 * as kb_k8s_update would (a resourceVersion in the patched result is a
 * precondition). Strategic merge patch on a custom type is 415. */
int kb_k8s_patch(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                 kb_k8s_patch_type type, const char *patch, size_t len, unsigned flags,
                 cJSON **out, kb_k8s_error *err);

/* Server-side apply (k8s_apply.c): applies `config` (the whole object as
 * the manager wants it) for `manager`, creating the object when it does
 * not exist (*created = 1). A field another manager owns with another
 * value is a 409 Conflict naming each (force != 0 takes them over); fields
 * the manager applied before and leaves out now are removed unless
 * another manager owns them. metadata.managedFields records who owns what. */
int kb_k8s_apply(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                 const cJSON *config, const char *manager, int force, unsigned flags, cJSON **out,
                 int *created, kb_k8s_error *err);

typedef enum kb_k8s_propagation {
  KB_K8S_PROPAGATE_DEFAULT,    /* Orphan for batch/v1 jobs, Background otherwise */
  KB_K8S_PROPAGATE_ORPHAN,     /* dependents lose the ownerReference */
  KB_K8S_PROPAGATE_BACKGROUND, /* the owner goes first, then its dependents */
  KB_K8S_PROPAGATE_FOREGROUND  /* dependents go first, then the owner */
} kb_k8s_propagation;

typedef struct kb_k8s_delete_opts {
  kb_k8s_propagation propagation;
  const char *precondition_uid; /* NULL or must match (409) */
  const char *precondition_rv;  /* NULL or must match (409) */
  unsigned flags;               /* KB_K8S_DRY_RUN */
} kb_k8s_delete_opts;

/* Deletes the object (opts may be NULL). An object with finalizers gets a
 * deletionTimestamp and stays until an update empties its finalizers; the
 * return value is then 1 instead of 0. Dependents (objects whose
 * ownerReferences name its uid) are deleted or orphaned per propagation.
 * *out gets the object as deleted (or as marked). */
int kb_k8s_delete(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  const kb_k8s_delete_opts *opts, cJSON **out, kb_k8s_error *err);

/* ---- lists and selectors ---------------------------------------------- */

typedef struct kb_k8s_list_opts {
  const char *ns;             /* NULL or "": all namespaces */
  const char *label_selector; /* "a=b,c!=d,e in (x,y),f notin (z),g,!h" */
  const char *field_selector; /* "metadata.name=x,status.phase!=Running" */
  size_t limit;               /* 0: no limit */
  const char *continue_token; /* from a previous page's metadata.continue */
} kb_k8s_list_opts;

/* A <Kind>List object: {"kind","apiVersion","metadata":{"resourceVersion",
 * "continue"?,"remainingItemCount"?},"items":[...]} in namespace/name
 * order. Pages continue from the current state after the last key (not a
 * snapshot). Bad selectors and tokens are 400. */
int kb_k8s_list(kb_k8s_store *st, const kb_k8s_res *res, const kb_k8s_list_opts *opts,
                cJSON **out, kb_k8s_error *err);

/* The same list in slices, so that a list of 100,000 objects holds no
 * loop turn for long: a snapshot of the states in range (references, no
 * copies: it is the list as of now, whatever is written meanwhile), then
 * the selector matched on up to `budget` objects per call (returns 0 while
 * some are left, 1 once the cut is known, -1 out of memory), then the text
 * appended to out up to `budget` items per call (0 while some are left, 1
 * at the end, -1 out of memory). The text is kb_k8s_list's, printed. */
typedef struct kb_k8s_list_snap kb_k8s_list_snap;
kb_k8s_list_snap *kb_k8s_list_snapshot(kb_k8s_store *st, const kb_k8s_res *res,
                                       const kb_k8s_list_opts *opts, kb_k8s_error *err);
int kb_k8s_list_snap_match(kb_k8s_list_snap *s, size_t budget);
/* Items the list holds (after the match is done). */
size_t kb_k8s_list_snap_items(const kb_k8s_list_snap *s);
struct kb_buf;
int kb_k8s_list_snap_write(kb_k8s_list_snap *s, struct kb_buf *out, size_t budget);
void kb_k8s_list_snap_free(kb_k8s_list_snap *s);

/* Compiled selectors, for callers that match many objects. */
typedef struct kb_k8s_selector kb_k8s_selector;
/* field_labels: the extra field labels allowed (NULL: any dotted path). */
kb_k8s_selector *kb_k8s_selector_parse(const char *labels, const char *fields,
                                       const kb_k8s_res *res, kb_k8s_error *err);
int kb_k8s_selector_match(const kb_k8s_selector *sel, const cJSON *obj);
void kb_k8s_selector_free(kb_k8s_selector *sel);

/* ---- watches and controller hooks ------------------------------------- */

typedef enum kb_k8s_event_type {
  KB_K8S_ADDED,
  KB_K8S_MODIFIED,
  KB_K8S_DELETED,
  KB_K8S_BOOKMARK,
  KB_K8S_ERROR
} kb_k8s_event_type;

const char *kb_k8s_event_name(kb_k8s_event_type t); /* "ADDED", ... */

/* obj is borrowed for the duration of the call. BOOKMARK carries an object
 * with only kind/apiVersion/metadata.resourceVersion (and, after the
 * initial events of send_initial, the annotation
 * k8s.io/initial-events-end). ERROR carries a Status object (410 Gone) and
 * is the last event of that watch (kb_k8s_watch_done then says 1); the
 * owner still cancels the handle to free it. */
typedef void (*kb_k8s_watch_fn)(void *ud, kb_k8s_event_type type, const cJSON *obj);

typedef struct kb_k8s_watch_opts {
  const char *ns;               /* NULL or "": all namespaces */
  const char *label_selector;
  const char *field_selector;
  /* NULL, "" or "0": ADDED for every current match, then changes. "N":
   * the changes after N from the history (410 when N is older than it). */
  const char *resource_version;
  int send_initial;             /* with an RV: ADDED for current state + BOOKMARK */
  int no_initial;               /* controller hooks: only changes from now */
} kb_k8s_watch_opts;

/* Starts a watch; initial events are delivered before it returns. Returns
 * NULL and err (400 bad selector) on failure; a too-old resourceVersion is
 * not a failure here: fn gets an ERROR event and the handle is done. */
kb_k8s_watch *kb_k8s_watch_start(kb_k8s_store *st, const kb_k8s_res *res,
                                 const kb_k8s_watch_opts *opts, kb_k8s_watch_fn fn, void *ud,
                                 kb_k8s_error *err);
/* Stops delivery at once and frees the watch (safe inside a callback,
 * also the watch's own). */
void kb_k8s_watch_cancel(kb_k8s_watch *w);
/* 1 when the watch ended (ERROR event, or the store is being freed). */
int kb_k8s_watch_done(const kb_k8s_watch *w);

/* A controller hook: fn on every ADDED/MODIFIED/DELETED of that type from
 * now on, in all namespaces. Same as kb_k8s_watch_start with no_initial. */
kb_k8s_watch *kb_k8s_store_on(kb_k8s_store *st, const kb_k8s_res *res, kb_k8s_watch_fn fn,
                              void *ud);

/* ---- pod logs ------------------------------------------------------------ */

/* Appends text to a container's log (lines are stamped with the store's
 * clock). Followers (the REST layer's `logs -f`) are told. */
int kb_k8s_log_append(kb_k8s_store *st, const char *ns, const char *pod, const char *container,
                      const char *text, size_t len);

typedef struct kb_k8s_log_opts {
  const char *container; /* NULL: the pod's only container (400 when several) */
  long tail_lines;       /* < 0: all */
  int timestamps;        /* prefix each line with its RFC 3339 time */
  long limit_bytes;      /* <= 0: no limit */
  double since_seconds;  /* <= 0: all */
} kb_k8s_log_opts;

/* The log as text into *out (malloc'd, caller frees; may be empty). 404
 * when the pod does not exist, 400 for an unknown or missing container. */
int kb_k8s_log_read(kb_k8s_store *st, const char *ns, const char *pod,
                    const kb_k8s_log_opts *opts, char **out, size_t *len, kb_k8s_error *err);
/* How many log bytes exist for that container (to follow from an offset). */
size_t kb_k8s_log_size(kb_k8s_store *st, const char *ns, const char *pod, const char *container);
/* Bytes of the raw log (stamped lines "TIME text\n") from offset. */
const char *kb_k8s_log_raw(kb_k8s_store *st, const char *ns, const char *pod,
                           const char *container, size_t offset, size_t *len);

typedef void (*kb_k8s_log_fn)(void *ud, const char *ns, const char *pod, const char *container);
/* One listener per store (the REST layer): told after every append. */
void kb_k8s_log_set_listener(kb_k8s_store *st, kb_k8s_log_fn fn, void *ud);

/* ---- errors --------------------------------------------------------------- */

/* Fills err and returns -code. */
int kb_k8s_error_set(kb_k8s_error *err, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Adds a details.causes entry (up to 8 are kept). */
void kb_k8s_error_cause(kb_k8s_error *err, const char *reason, const char *message,
                        const char *field);
/* {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
 *  "message","reason","details":{"name","group","kind"},"code"}. */
cJSON *kb_k8s_status_json(const kb_k8s_error *err, const kb_k8s_res *res);

/* ---- patches (k8s_patch.c) ---------------------------------------------- */

/* RFC 7386 merge patch: returns the patched document (target is consumed
 * and may be NULL). */
cJSON *kb_k8s_merge_patch(cJSON *target, const cJSON *patch);
/* RFC 6902: applies ops to *doc in place (all or nothing). Returns 0, or
 * -400/-422/-409 (failed "test") with err set. */
int kb_k8s_json_patch(cJSON **doc, const cJSON *ops, kb_k8s_error *err);
/* Strategic merge patch with the built-in types' merge keys (containers by
 * name, env by name, volumeMounts by mountPath, conditions by type,
 * ownerReferences by uid, ...) and the directives $patch (merge, replace,
 * delete), $retainKeys, $setElementOrder/<list>, $deleteFromPrimitiveList/
 * <list>. Patches *doc in place; 0, or -400 with err set. */
int kb_k8s_strategic_patch(cJSON **doc, const cJSON *patch, kb_k8s_error *err);
/* The merge key of a list field for strategic merge ("name" for
 * "containers"), "" for a merged list of primitives (finalizers), NULL when
 * the list is replaced whole. */
const char *kb_k8s_smp_merge_key(const char *field);

#endif
