/* The Kubeflow Pipelines REST API (v2beta1 and v1beta1) on top of the
 * simulator, answering as the real KFP 2.x API server does: snake_case
 * JSON without zero values, enums as strings, RFC 3339 timestamps in whole
 * seconds, unknown request fields refused with 400, gRPC-gateway error
 * bodies ({code, message, details}), hand-written upload and healthz
 * endpoints, paging with opaque tokens, sort_by and JSON filters.
 *
 *   kb_sim_kfp *kfp = kb_sim_kfp_new(sim, loop);   // sim attached to loop
 *   ... in the HTTP handler:
 *   if (kb_sim_kfp_handle(kfp, req)) return;       // KFP's, answered (maybe later)
 *   ... for /metrics:
 *   kb_sim_kfp_metrics(kfp, &buf);
 *   ... at shutdown, on the loop's thread, before closing the loop:
 *   kb_sim_kfp_free(kfp);                          // answers pending requests 503
 *
 * Each response is delayed by the modelled API latency
 * (kb_sim_api_latency, sim seconds, divided by the clock speed for real
 * time) on a uv timer; in manual clock mode (speed 0) it is sent at once.
 * Mutations take effect when the request arrives; the delay only holds
 * the answer back.
 *
 * Pipelines given by URL (v1 CreatePipeline, CreatePipelineVersion,
 * v2 pipelines/create) must be local: a path or a file:// URL, read from
 * disk. http(s) URLs are refused with the server's InvalidArgument shape
 * (the simulator never downloads).
 *
 * Recurring runs (v2) and jobs (v1) trigger runs on the virtual clock:
 * periodic (interval_second) or cron ("[sec] min hour dom month dow",
 * numbers, *, ranges, lists, steps), at most max_concurrency active runs.
 *
 * Threading: everything runs on the loop's thread. Not thread-safe. */
#ifndef KB_SIM_KFP_H
#define KB_SIM_KFP_H

#include <stddef.h>
#include <uv.h>

#include "kb/buf.h"
#include "kb/http_server.h"
#include "kb/sim.h"

typedef struct kb_sim_kfp kb_sim_kfp;

/* sim must outlive the returned object; loop is the one the sim is
 * attached to (used for latency and schedule timers). NULL when out of
 * memory. */
kb_sim_kfp *kb_sim_kfp_new(kb_sim *sim, uv_loop_t *loop);
/* Local pipeline URLs (a path or file://) are read only from inside dir
 * (symlinks resolved, so none leads out); without one, none is read.
 * http(s) URLs are fetched. 0, or -errno when dir is not a folder. */
int kb_sim_kfp_set_pipeline_dir(kb_sim_kfp *kfp, const char *dir);

/* Finishes every delayed request (503 if still pending) and closes the
 * timers; their memory is released by the loop's next iteration, so run
 * the loop once more before uv_loop_close. */
void kb_sim_kfp_free(kb_sim_kfp *kfp);

/* Returns 1 when the request belongs to KFP (path under /apis/v1beta1/ or
 * /apis/v2beta1/) and has been or will be answered, 0 otherwise (the
 * request was not touched). */
int kb_sim_kfp_handle(kb_sim_kfp *kfp, kb_httpd_req *req);
/* The same for a request whose KFP path is `path` (e.g. "/apis/v2beta1/runs"
 * inside the Kubernetes service proxy's /api/v1/namespaces/NS/services/SVC/proxy). */
int kb_sim_kfp_handle_path(kb_sim_kfp *kfp, kb_httpd_req *req, const char *path);

/* Appends the KFP series in Prometheus text format (0.0.4): the
 * per-handler counters, gauges and go-grpc-prometheus' grpc_server_*
 * series (handling time in sim seconds). */
void kb_sim_kfp_metrics(kb_sim_kfp *kfp, kb_buf *out);

/* Runs in the store, in creation order: the live ones, and deleted ones
 * until the store sweeps them (after any later KFP request). A sweep
 * shifts the indexes, so walk 0 .. count-1 without a KFP request in
 * between. */
size_t kb_sim_kfp_run_count(const kb_sim_kfp *kfp);

typedef struct kb_sim_kfp_run_ref {
  const char *run_id;        /* KFP run id (UUID) */
  const char *display_name;
  const char *experiment_id;
  const char *namespace_;    /* Kubernetes namespace of the workflow; NULL once deleted */
  const char *recurring_run_id; /* NULL unless started by a recurring run */
  int sim_run;               /* index for kb_sim_run_get (changes on retry); -1 once deleted */
  int deleted;               /* deleted through the API (swept soon) */
  int archived;
} kb_sim_kfp_run_ref;

/* Fills *out for run i (0 .. count-1): 0, or KB_SIM_ENOENT. The strings
 * live until the run is deleted and swept: copy them before the next KFP
 * request. */
int kb_sim_kfp_run_at(const kb_sim_kfp *kfp, size_t i, kb_sim_kfp_run_ref *out);

/* The KFP run id of a model run, or NULL (not a KFP run, or deleted). */
const char *kb_sim_kfp_run_id_of(const kb_sim_kfp *kfp, int sim_run);

/* What the store holds, for tests and soaks: objects per kind (live, and
 * deleted ones not swept yet), the id index (live objects only) and the
 * model pipelines it holds (kb_sim_pipeline_load without release). */
typedef struct kb_sim_kfp_stats {
  size_t pipelines, versions, experiments, runs, recurring; /* held */
  size_t live_pipelines, live_versions, live_experiments, live_runs, live_recurring;
  size_t index_entries, index_slots;
  size_t sim_pipelines;  /* model pipeline holds: versions and their caches */
  size_t sim_map_slots;  /* model run id -> KFP run map */
  size_t compactions;    /* vector compactions so far */
  size_t kept_versions;  /* deleted versions the last compaction kept: still
                            referred to by a live run or recurring run */
} kb_sim_kfp_stats;

void kb_sim_kfp_stats_get(const kb_sim_kfp *kfp, kb_sim_kfp_stats *out);

#endif
