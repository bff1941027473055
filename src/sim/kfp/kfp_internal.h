/* Internals of the KFP REST layer (kfp_*.c): the store, the request
 * context the handlers fill, and the helpers they share. */
#ifndef KB_KFP_INTERNAL_H
#define KB_KFP_INTERNAL_H

#include "kb/vclock.h"
#include <stdint.h>
#include <cjson/cJSON.h>

#include "kb/sim_kfp.h"
#include "sim_cron.h"

/* ---- store ---------------------------------------------------------------- */

typedef enum kfp_kind {
  KFP_PIPELINE = 1, KFP_VERSION, KFP_EXPERIMENT, KFP_RUN, KFP_RECURRING
} kfp_kind;

typedef struct kfp_vec {
  void **items;
  size_t n, cap;
  /* store vectors only: deleted objects still held, and how many of them
   * the last compaction had to keep (pinned versions) */
  size_t n_deleted, n_kept;
} kfp_vec;

typedef struct kfp_params_sim {
  char *key; /* parameters as unformatted JSON */
  int sim_pipeline;
} kfp_params_sim;

typedef struct kfp_pipeline {
  char *id, *name, *display_name, *description, *namespace_;
  int64_t created_at; /* unix seconds */
  uint64_t seq;       /* creation order, the sort tie-break after time */
  cJSON *tags;
  int deleted;
} kfp_pipeline;

typedef struct kfp_version {
  char *id, *pipeline_id, *name, *display_name, *description;
  char *code_source_url, *package_url;
  int64_t created_at;
  uint64_t seq;
  cJSON *docs;        /* the YAML documents (array) */
  cJSON *spec;        /* pipeline_spec as the API shows it */
  const char *format; /* "v1" (Argo) or "v2" (IR) */
  int sim_pipeline;   /* loaded with the default parameters (held) */
  kfp_params_sim *cache; /* loads with other parameters (held), oldest first */
  size_t n_cache;
  cJSON *tags;
  int pins;           /* live targets referring to it: kept while deleted */
  int deleted;
} kfp_version;

typedef struct kfp_experiment {
  char *id, *name, *description, *namespace_;
  int64_t created_at, last_run_created_at;
  uint64_t seq;
  int archived, deleted;
} kfp_experiment;

/* What a run or a recurring run executes. A target pins its version
 * (version->pins) so that a deleted version stays runnable for the
 * recurring runs and retries that refer to it. */
typedef struct kfp_target {
  char *pipeline_id, *pipeline_version_id;
  kfp_version *version; /* pinned; set iff pipeline_version_id */
  cJSON *pipeline_spec; /* inline spec (owned) or NULL */
  cJSON *parameters;    /* name -> value, or NULL */
  char *pipeline_root;
  int v1_params;        /* parameters came as v1 [{name, value}] */
} kfp_target;

typedef struct kfp_run {
  char *id, *display_name, *description, *experiment_id;
  char *service_account, *recurring_run_id;
  kfp_target t;
  int sim_run;          /* the model run; -1 once deleted */
  int *retried;         /* model runs it had before retries (kept until deleted) */
  size_t n_retried;
  int64_t created_at;
  uint64_t seq;
  int archived, deleted;
  /* v1 GetRun's workflow_manifest, as a JSON string literal, for the model
   * run and version it was built from (kb_kfp_j_v1_run_detail): a 61 KB
   * manifest is not rebuilt and escaped per poll */
  char *manifest_json;
  int manifest_run;
  uint64_t manifest_version;
} kfp_run;

/* Frees a run and what it owns (kfp_store.c). */
void kb_kfp_run_free(kfp_run *run);

typedef struct kfp_recurring {
  char *id, *display_name, *description, *experiment_id, *service_account;
  kfp_target t;
  int64_t max_concurrency;
  int enabled, no_catchup;
  char *cron; /* NULL: periodic */
  int64_t interval;
  double start_time, end_time; /* unix seconds; < 0: unset */
  int64_t created_at, updated_at;
  uint64_t seq;
  double next_fire;   /* unix seconds; INFINITY when none */
  uint64_t triggered; /* runs started */
  int deleted;
} kfp_recurring;

typedef struct kfp_slot {
  const char *key;
  kfp_kind kind;
  void *obj;
} kfp_slot;

typedef struct kfp_pending kfp_pending;
typedef struct kfp_metrics kfp_metrics;

struct kb_sim_kfp {
  kb_sim *sim;
  uv_loop_t *loop;
  kb_sim_rng rng;
  uint64_t seq;
  kfp_vec pipelines, versions, experiments, runs, recurring;
  kfp_slot *index;
  size_t index_cap, index_n;
  char *default_experiment_id;
  kfp_run **sim_to_run; /* model run id -> its KFP run, or NULL */
  size_t sim_to_run_cap;
  size_t compactions;   /* vector compactions so far (stats) */
  kfp_metrics *metrics;
  kfp_pending *pending; /* delayed responses */
  kb_vtimer sched_timer;   /* next recurring-run trigger, on the sim clock */
  int has_clock;           /* attached: delays and triggers wait on the clock */
  char *pipeline_dir;      /* real path local pipeline URLs must be under, or NULL */
  struct kfp_fetch *fetches;         /* http(s) pipeline URLs being fetched */
  struct kb_http_client *fetcher;    /* their client, made on the first one */
  int closing;
};

/* Pipeline URLs (kfp_fetch.c). A request that creates a pipeline or a
 * version from an http(s) URL is held while the simulator fetches it
 * (asynchronously, on kfp->loop) and handled again, at `path`, once the
 * file or the error is in: returns 1 when it took the request, else 0. */
int kb_kfp_fetch_intercept(kb_sim_kfp *kfp, kb_httpd_req *req, const char *path);
/* Cancels the fetches in flight (their requests get a 503) and frees the
 * client; from kb_sim_kfp_free. */
void kb_kfp_fetch_free(kb_sim_kfp *kfp);
/* The largest pipeline file fetched or uploaded (common.MaxFileLength). */
#define KFP_MAX_FILE (32u << 20)

int kb_kfp_vec_push(kfp_vec *v, void *item);
/* A fresh UUID (version 4 layout) from kfp's seeded stream. */
char *kb_kfp_uuid(kb_sim_kfp *kfp);
/* Appends obj (whose id is `id`, owned by obj) to its kind's vector and to
 * the id index. On failure (-1) nothing changed and the caller still owns
 * obj; on success the store owns it. */
int kb_kfp_store_add(kb_sim_kfp *kfp, kfp_kind kind, const char *id, void *obj);
/* Deletes a stored object: flagged, out of the id index at once (so
 * lookups miss it), freed by a later kb_kfp_store_sweep. A run or recurring
 * run drops its version pin here; the caller has already deleted a run's
 * model runs (kb_kfp_run_delete). Idempotent. */
void kb_kfp_mark_deleted(kb_sim_kfp *kfp, kfp_kind kind, void *obj);
/* Frees deleted objects, at a point where no handler holds a borrowed
 * pointer (after a request was answered). Amortised: a vector is compacted
 * only once the deletions since its last compaction exceed half its size
 * plus a constant, so n deletions cost O(n) overall. */
void kb_kfp_store_sweep(kb_sim_kfp *kfp);
/* The live (not deleted) object of that kind with that id, or NULL. */
void *kb_kfp_lookup(const kb_sim_kfp *kfp, const char *id, kfp_kind kind);
char *kb_kfp_strdup(const char *s); /* NULL stays NULL */
int64_t kb_kfp_now_unix(const kb_sim_kfp *kfp);
double kb_kfp_now_unix_f(const kb_sim_kfp *kfp);
void kb_kfp_store_free(kb_sim_kfp *kfp);
void kb_kfp_target_free(kfp_target *t);
int kb_kfp_target_copy(kfp_target *dst, const kfp_target *src);

kfp_pipeline *kb_kfp_pipeline_by_name(const kb_sim_kfp *kfp, const char *name,
                                   const char *ns);
kfp_experiment *kb_kfp_experiment_by_name(const kb_sim_kfp *kfp, const char *name,
                                       const char *ns);
size_t kb_kfp_pipeline_version_count(const kb_sim_kfp *kfp, const char *pipeline_id);
/* The newest live version of a pipeline (created_at, then creation order). */
kfp_version *kb_kfp_latest_version(const kb_sim_kfp *kfp, const char *pipeline_id);
size_t kb_kfp_live_count(const kfp_vec *v); /* of a store vector */
/* The live KFP run over a model run, or NULL. */
kfp_run *kb_kfp_run_of_sim(const kb_sim_kfp *kfp, int sim_run);
/* Maps a model run to its KFP run (run NULL: forgets the model run id,
 * which the model may reuse once the run is deleted). */
int kb_kfp_map_sim_run(kb_sim_kfp *kfp, int sim_run, kfp_run *run);

/* ---- requests --------------------------------------------------------------- */

#define KFP_MAX_SEGS 10
#define KFP_MAX_QUERY 24

typedef struct kfp_qparam {
  char *key, *value; /* decoded */
} kfp_qparam;

typedef struct kfp_req {
  kb_sim_kfp *kfp;
  kb_httpd_req *http;
  int ver;                    /* 1 or 2 */
  const char *method;
  char *segs[KFP_MAX_SEGS];   /* path segments after /apis/vXbeta1, decoded */
  size_t n_segs;
  char *verb;                 /* after ':' in the last segment, or NULL */
  kfp_qparam query[KFP_MAX_QUERY];
  size_t n_query;
  const char *params[4];      /* {placeholders} of the route, in order */
  cJSON *body;                /* validated request body (NULL when empty) */
  /* the answer */
  int status;
  kb_buf out;
  int grpc_code;
  const char *service, *grpc_method; /* NULL: not a gRPC method */
  const char *latency_endpoint;
  size_t stored_rows, items;
} kfp_req;

typedef void (*kfp_handler_fn)(kfp_req *r);

const char *kb_kfp_query(const kfp_req *r, const char *key); /* NULL when absent */

/* gRPC codes */
enum {
  KFP_OK = 0, KFP_CANCELLED = 1, KFP_UNKNOWN = 2, KFP_INVALID_ARGUMENT = 3,
  KFP_NOT_FOUND = 5, KFP_ALREADY_EXISTS = 6, KFP_PERMISSION_DENIED = 7,
  KFP_FAILED_PRECONDITION = 9, KFP_ABORTED = 10, KFP_UNIMPLEMENTED = 12,
  KFP_INTERNAL = 13, KFP_UNAVAILABLE = 14,
};

int kb_kfp_http_status(int grpc_code);
const char *kb_kfp_code_name(int grpc_code); /* "NotFound" */

/* A gRPC-gateway error: message = internal chain, details[0] carries the
 * external message (KFP's UserError). external NULL: no details. */
void kb_kfp_error(kfp_req *r, int code, const char *external, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The upload endpoints' {error_message, error_details}. */
void kb_kfp_upload_error(kfp_req *r, int http_status, const char *message);
/* Takes ownership of obj. */
void kb_kfp_reply(kfp_req *r, cJSON *obj);
void kb_kfp_reply_empty(kfp_req *r); /* google.protobuf.Empty: {} */

/* NotFound as KFP's store reports it: "<type> <id> not found". */
void kb_kfp_not_found(kfp_req *r, const char *wrap, const char *type, const char *id);

/* ---- request bodies (kfp_schema.c) ----------------------------------------- */

typedef struct kfp_schema kfp_schema;
extern const kfp_schema kb_kfp_s_v2_pipeline, kb_kfp_s_v2_version, kb_kfp_s_v2_create_pv,
    kb_kfp_s_v2_experiment, kb_kfp_s_v2_run, kb_kfp_s_v2_recurring, kb_kfp_s_v2_filter,
    kb_kfp_s_v1_pipeline, kb_kfp_s_v1_version, kb_kfp_s_v1_experiment, kb_kfp_s_v1_run, kb_kfp_s_v1_job,
    kb_kfp_s_v1_filter;

/* Validates text against schema as protojson would (unknown fields, value
 * types, enum names). Returns the parsed tree (NULL for an empty body) or
 * sets *bad and writes grpc-gateway's message into err. */
cJSON *kb_kfp_parse_body(const char *text, size_t len, const kfp_schema *schema, int *bad,
                      char *err, size_t errlen);

/* ---- JSON shapes (kfp_json.c) ----------------------------------------------- */

void kb_kfp_time_str(int64_t unix_seconds, char out[32]);
/* "2024-01-01T00:00:00Z" -> unix seconds; -1 when malformed. */
int64_t kb_kfp_time_parse(const char *s);
int64_t kb_kfp_sim_time(const kb_sim_kfp *kfp, double sim_t); /* floor(epoch + t) */
const char *kb_kfp_v1_status(kb_sim_run_state s);
cJSON *kb_kfp_j_v2_pipeline(const kb_sim_kfp *kfp, const kfp_pipeline *p);
cJSON *kb_kfp_j_v2_version(const kb_sim_kfp *kfp, const kfp_version *v);
cJSON *kb_kfp_j_v2_experiment(const kb_sim_kfp *kfp, const kfp_experiment *e);
cJSON *kb_kfp_j_v2_run(const kb_sim_kfp *kfp, const kfp_run *run);
/* The same with run_details.task_details (GetRun): one task per node of
 * the run's workflow. */
cJSON *kb_kfp_j_v2_run_detail(const kb_sim_kfp *kfp, const kfp_run *run);
cJSON *kb_kfp_j_v2_recurring(const kb_sim_kfp *kfp, const kfp_recurring *rr);
cJSON *kb_kfp_j_v1_pipeline(const kb_sim_kfp *kfp, const kfp_pipeline *p);
cJSON *kb_kfp_j_v1_version(const kb_sim_kfp *kfp, const kfp_version *v);
cJSON *kb_kfp_j_v1_experiment(const kb_sim_kfp *kfp, const kfp_experiment *e);
cJSON *kb_kfp_j_v1_run(const kb_sim_kfp *kfp, const kfp_run *run);
/* ApiRunDetail {run, pipeline_runtime{workflow_manifest}} */
cJSON *kb_kfp_j_v1_run_detail(const kb_sim_kfp *kfp, kfp_run *run);
cJSON *kb_kfp_j_v1_job(const kb_sim_kfp *kfp, const kfp_recurring *rr);

/* ---- listing (kfp_list.c) --------------------------------------------------- */

/* A sortable / filterable field of a listed object. */
typedef struct kfp_fval {
  int is_num;
  double num;
  const char *str;
} kfp_fval;

/* Returns 0 and fills *out when obj has field `model` (the model name
 * KFP maps API names to: "UUID", "CreatedAtInSec", ...); -1 otherwise. */
typedef int (*kfp_field_fn)(const kb_sim_kfp *kfp, const void *obj, const char *model,
                            kfp_fval *out);

typedef struct kfp_listable {
  const char *model_name;      /* "runs", "pipelines", ... (the token's ModelName) */
  const char *type_name;       /* Go type for messages: "Run" */
  const char *const *api_map;  /* pairs: API name, model name; NULL-terminated */
  kfp_field_fn field;
} kfp_listable;

extern const kfp_listable kb_kfp_list_runs, kb_kfp_list_pipelines, kb_kfp_list_versions,
    kb_kfp_list_experiments, kb_kfp_list_recurring;

/* Pages through the candidates (live objects the handler selected) per
 * the request's page_size, page_token, sort_by and filter. On success
 * returns 0, fills page (borrowed pointers), *total (after filtering) and
 * *next_token (malloc'd, NULL on the last page). On a bad option replies
 * the error itself (wrapped in `wrap`) and returns -1. */
int kb_kfp_list(kfp_req *r, const kfp_listable *l, void **cand, size_t n, const char *wrap,
             kfp_vec *page, size_t *total, char **next_token);

/* One object of a list as its API version writes it. */
typedef cJSON *kfp_render_fn(const kb_sim_kfp *kfp, const void *obj);

/* A list handler's answer: pages the candidates (kb_kfp_list), frees
 * them, and replies {key: [render(each)], total_size, next_page_token},
 * or the error kb_kfp_list replied. */
void kb_kfp_reply_list(kfp_req *r, const kfp_listable *l, kfp_vec *cand, const char *wrap,
                       const char *key, kfp_render_fn *render);

/* ---- handlers ---------------------------------------------------------------- */

void kb_kfp_h_healthz(kfp_req *r);
/* pipelines, versions (kfp_pipelines.c), uploads (kfp_upload.c) */
void kb_kfp_h_create_pipeline(kfp_req *r);
void kb_kfp_h_create_pipeline_and_version(kfp_req *r);
void kb_kfp_h_get_pipeline(kfp_req *r);
void kb_kfp_h_get_pipeline_by_name(kfp_req *r);
void kb_kfp_h_list_pipelines(kfp_req *r);
void kb_kfp_h_delete_pipeline(kfp_req *r);
void kb_kfp_h_create_version(kfp_req *r);
void kb_kfp_h_get_version(kfp_req *r);
void kb_kfp_h_list_versions(kfp_req *r);
void kb_kfp_h_delete_version(kfp_req *r);
void kb_kfp_h_get_template(kfp_req *r);
void kb_kfp_h_get_version_template(kfp_req *r);
void kb_kfp_h_update_default_version(kfp_req *r);
void kb_kfp_h_upload_pipeline(kfp_req *r);
void kb_kfp_h_upload_version(kfp_req *r);
/* experiments (kfp_experiments.c) */
void kb_kfp_h_create_experiment(kfp_req *r);
void kb_kfp_h_get_experiment(kfp_req *r);
void kb_kfp_h_list_experiments(kfp_req *r);
void kb_kfp_h_delete_experiment(kfp_req *r);
void kb_kfp_h_archive_experiment(kfp_req *r);
void kb_kfp_h_unarchive_experiment(kfp_req *r);
/* runs (kfp_runs.c) */
void kb_kfp_h_create_run(kfp_req *r);
void kb_kfp_h_get_run(kfp_req *r);
void kb_kfp_h_list_runs(kfp_req *r);
void kb_kfp_h_delete_run(kfp_req *r);
void kb_kfp_h_archive_run(kfp_req *r);
void kb_kfp_h_unarchive_run(kfp_req *r);
void kb_kfp_h_terminate_run(kfp_req *r);
void kb_kfp_h_retry_run(kfp_req *r);
/* recurring runs / jobs (kfp_recurring.c) */
void kb_kfp_h_create_recurring(kfp_req *r);
void kb_kfp_h_get_recurring(kfp_req *r);
void kb_kfp_h_list_recurring(kfp_req *r);
void kb_kfp_h_delete_recurring(kfp_req *r);
void kb_kfp_h_enable_recurring(kfp_req *r);
void kb_kfp_h_disable_recurring(kfp_req *r);

/* Shared by runs and recurring runs: resolves the pipeline a run executes
 * into a simulator pipeline id (loading it with the parameters when
 * needed). Replies the error and returns -1 on failure. *hold is set to 1
 * when the id is a load nobody else holds (an inline spec, or a version
 * load the cache could not keep): the caller releases it
 * (kb_sim_pipeline_release) once its model run is created, or on failure;
 * the model keeps a pipeline alive while a run uses it. */
int kb_kfp_target_sim_pipeline(kfp_req *r, const kfp_target *t, const char *wrap, int *hold);
/* Resolves v2 pipeline_version_reference / pipeline_spec / runtime_config
 * or v1 pipeline_spec / resource_references into t. Replies on error. */
int kb_kfp_target_from_v2(kfp_req *r, const cJSON *obj, kfp_target *t, const char *wrap);
int kb_kfp_target_from_v1(kfp_req *r, const cJSON *obj, kfp_target *t, const char *wrap);
/* The experiment a v1 body's resource_references name (OWNER EXPERIMENT),
 * or NULL. */
const char *kb_kfp_v1_ref_id(const cJSON *obj, const char *type);
/* Starts a run (store + sim). Returns it or NULL (error replied when r). */
kfp_run *kb_kfp_run_start(kb_sim_kfp *kfp, kfp_req *r, const char *display_name,
                       const char *description, const char *experiment_id,
                       const kfp_target *t, const char *service_account,
                       const char *recurring_run_id, const char *wrap);
/* Loads YAML/JSON pipeline text into a new version of p. Replies on error. */
kfp_version *kb_kfp_version_create(kfp_req *r, kfp_pipeline *p, const char *name,
                                const char *display_name, const char *description,
                                const char *text, size_t len, const char *package_url,
                                const char *code_source_url, int upload, const char *wrap);
kfp_pipeline *kb_kfp_pipeline_create(kfp_req *r, const char *name, const char *display_name,
                                  const char *description, const char *ns, int upload,
                                  const char *wrap);
/* The pipeline spec at url, read from the pipeline folder or held for its
 * download (see kfp_fetch.c). Replies on error. The result is the
 * caller's. */
char *kb_kfp_fetch_url(kfp_req *r, const char *url, size_t *len, const char *wrap);
/* Deletes a run: its model runs (current and retried) and the record. */
void kb_kfp_run_delete(kb_sim_kfp *kfp, kfp_run *run);

/* ---- recurring-run scheduling (kfp_recurring.c) ------------------------------ */

/* Starts due runs and re-arms the schedule timer. */
void kb_kfp_schedule_tick(kb_sim_kfp *kfp);
void kb_kfp_on_sched(kb_vtimer *t); /* the recurring-run trigger timer fired */
/* kb_sim_cron_next, kb_sim_cron_valid: sim_cron.h */

/* ---- metrics (kfp_metrics.c) --------------------------------------------------- */

kfp_metrics *kb_kfp_metrics_new(void);
void kb_kfp_metrics_free(kfp_metrics *m);
/* counter: e.g. "run_server_create_requests". */
void kb_kfp_metrics_inc(kfp_metrics *m, const char *counter);
void kb_kfp_metrics_grpc(kfp_metrics *m, const char *service, const char *method, int code,
                      double seconds);
void kb_kfp_metrics_write(kfp_metrics *m, const kb_sim_kfp *kfp, kb_buf *out);

#endif
