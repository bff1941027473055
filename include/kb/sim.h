/* The embedded cluster simulator: a deterministic, event-driven model of a
 * Kubernetes cluster running KFP pipelines (Argo underneath), on a virtual
 * clock. No HTTP here: the REST layer sits on top of these calls.
 *
 * Threading: one kb_sim belongs to one thread (the simulator's loop). No
 * function here is thread-safe. The only state another thread may use is
 * what kb_sim_clock_params() returned after kb_sim_attach(): origin and
 * speed never change while attached, so any thread can compute the virtual
 * time itself, without locks, as (uv_hrtime() - origin_ns) / 1e9 * speed.
 *
 * Time: sim seconds (double) since the simulator's origin (0). Wall-clock
 * timestamps for REST bodies are kb_sim_epoch() + sim time. Unset times are
 * negative (-1).
 *
 * Determinism: the same config, seed and sequence of calls (at the same
 * sim times) give the same outcome. Each step draws from its own PRNG
 * stream derived from (seed, run index, step index), so unrelated runs
 * interleaving differently never change each other's draws.
 *
 * Strings returned in info structs point into simulator-owned storage that
 * lives as long as the kb_sim (names are never freed before kb_sim_free).
 *
 * Errors: functions returning int give 0 (or an id >= 0) on success and a
 * negative KB_SIM_E* code on failure, filling *err when it is not NULL.
 * Config reference and model assumptions: docs/simulator.md. */
#ifndef KB_SIM_H
#define KB_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

struct uv_loop_s;

enum {
  KB_SIM_OK = 0,
  KB_SIM_EINVAL = -1, /* bad argument or config value */
  KB_SIM_ENOMEM = -2,
  KB_SIM_ENOENT = -3, /* no such run / pipeline / node / pool */
  KB_SIM_ESTATE = -4, /* not allowed in this state (e.g. advance while attached) */
  KB_SIM_EPARSE = -5, /* pipeline or config could not be understood */
};

typedef struct kb_sim_error {
  int code;
  char message[256];
} kb_sim_error;

/* ---- Distributions and PRNG ------------------------------------------- */

typedef enum kb_sim_dist_kind {
  KB_SIM_FIXED,     /* a */
  KB_SIM_UNIFORM,   /* [a, b) */
  KB_SIM_NORMAL,    /* mean a, stddev b, clamped at 0 */
  KB_SIM_LOGNORMAL, /* median a, 99th percentile b (b >= a > 0) */
} kb_sim_dist_kind;

typedef struct kb_sim_dist {
  kb_sim_dist_kind kind;
  double a, b;
} kb_sim_dist;

/* "30", "fixed:30", "uniform:1,10", "normal:10,2", "lognormal:70,91". */
int kb_sim_dist_parse(const char *text, kb_sim_dist *out, kb_sim_error *err);
/* A number, a string as above, or {fixed: x} / {uniform: [a,b]} /
 * {normal: [m,sd]} / {lognormal: [p50,p99]}. */
int kb_sim_dist_from_json(const cJSON *node, kb_sim_dist *out, kb_sim_error *err);
double kb_sim_dist_median(const kb_sim_dist *d);

/* xoshiro256** seeded through splitmix64. */
typedef struct kb_sim_rng {
  uint64_t s[4];
} kb_sim_rng;

void kb_sim_rng_seed(kb_sim_rng *r, uint64_t seed);
uint64_t kb_sim_rng_next(kb_sim_rng *r);
double kb_sim_rng_uniform(kb_sim_rng *r); /* [0, 1) */
double kb_sim_dist_sample(const kb_sim_dist *d, kb_sim_rng *r);
/* A seed for a sub-stream: mixes (seed, a, b) so nearby inputs diverge. */
uint64_t kb_sim_seed_mix(uint64_t seed, uint64_t a, uint64_t b);

/* ---- Configuration ---------------------------------------------------- */

typedef struct kb_sim_kv {
  char *key, *value;
} kb_sim_kv;

typedef struct kb_sim_taint {
  char *key, *value, *effect; /* effect: NoSchedule | PreferNoSchedule | NoExecute */
} kb_sim_taint;

typedef struct kb_sim_pool_config {
  char *name;
  int nodes;
  int64_t cpu_m;  /* allocatable millicores per node */
  int64_t memory; /* bytes per node */
  int gpu;        /* nvidia.com/gpu per node */
  int max_pods;
  kb_sim_kv *labels; /* besides the pool label and kubernetes.io/hostname */
  size_t n_labels;
  kb_sim_taint *taints;
  size_t n_taints;
  char **images; /* cached on every node at start */
  size_t n_images;
} kb_sim_pool_config;

typedef struct kb_sim_api_endpoint {
  char *name;       /* "CreateRun", "k8s.list", ...; "default" for the rest */
  kb_sim_dist base; /* per request */
  double per_item;       /* seconds per returned item */
  double per_stored_run; /* seconds per stored row */
} kb_sim_api_endpoint;

typedef struct kb_sim_config {
  char profile[32];
  /* cluster */
  char *pool_label;       /* default cloud.google.com/gke-nodepool */
  char *node_name_prefix; /* node name = prefix + pool + "-" + index */
  kb_sim_pool_config *pools;
  size_t n_pools;
  /* KFP API server (apilat.c) */
  int api_max_inflight;
  kb_sim_api_endpoint *endpoints;
  size_t n_endpoints;
  /* KFP run overheads */
  kb_sim_dist create_to_workflow_running; /* A4, E4 */
  int v2_driver_pods;                     /* B1 */
  int64_t driver_cpu_m, driver_memory;    /* B2 */
  kb_sim_dist driver_runtime;             /* B5 est. */
  double launcher_init;                   /* B3 */
  int pa_workers;                         /* B6 */
  double pa_resync_period;                /* B6 */
  kb_sim_dist pa_lag;                     /* B6 est. */
  double pa_service_active, pa_service_finished; /* B7 est. */
  /* Kubernetes */
  kb_sim_dist pod_startup;  /* D2 */
  double sched_pods_per_s;  /* D7; <= 0: unlimited */
  int image_pull_serial;    /* D9 */
  double image_pull_fixed;  /* est. */
  double image_pull_mb_per_s; /* est., D10 */
  kb_sim_kv *image_size_mb; /* key: repository or its last path part */
  size_t n_image_sizes;
  double default_cpu_demand; /* cores a pod without cpu request/limit uses */
  /* Argo */
  double argo_pod_create;          /* est. */
  kb_sim_dist completion_detect;  /* E2, E6 */
  double wait_exit;               /* est. */
  /* Steps */
  kb_sim_dist step_default;   /* duration of a step without a hint */
  double step_fail_prob;      /* probability a step's main container fails */
  kb_sim_kv *step_durations;  /* template / task name -> dist text */
  size_t n_step_durations;
  /* Events ring */
  size_t events_capacity;
  double epoch; /* unix seconds at sim time 0 */
} kb_sim_config;

/* A built-in profile: "default" (calibrated), "fast" (no overheads, no
 * API latency, 1 s steps) or "degraded". NULL profile = "default". */
kb_sim_config *kb_sim_config_new(const char *profile, kb_sim_error *err);
/* Overlay a tree (the YAML of docs/simulator.md) onto cfg. Keys are
 * checked: an unknown key is an error naming its path. A top-level
 * `profile:` is only honoured by kb_sim_config_from_json. */
int kb_sim_config_apply(kb_sim_config *cfg, const cJSON *tree, kb_sim_error *err);
/* The profile named by tree's `profile` key (default "default") with the
 * tree applied on top. tree may be NULL. */
kb_sim_config *kb_sim_config_from_json(const cJSON *tree, kb_sim_error *err);
/* Same from YAML text. */
kb_sim_config *kb_sim_config_from_yaml(const char *text, size_t len, kb_sim_error *err);
kb_sim_config *kb_sim_config_copy(const kb_sim_config *cfg);
void kb_sim_config_free(kb_sim_config *cfg);

/* ---- The simulator ---------------------------------------------------- */

typedef struct kb_sim kb_sim;

/* speed: virtual seconds per real second when attached (<= 0: 600). The
 * config is copied. Starts in manual mode at sim time 0. */
kb_sim *kb_sim_new(const kb_sim_config *cfg, uint64_t seed, double speed,
                   kb_sim_error *err);
/* Detaches first if needed. */
void kb_sim_free(kb_sim *sim);
const kb_sim_config *kb_sim_config_of(const kb_sim *sim);

/* Current sim time: in manual mode the time last advanced to; attached,
 * derived from uv_hrtime(). */
double kb_sim_now(const kb_sim *sim);
double kb_sim_epoch(const kb_sim *sim);
void kb_sim_set_epoch(kb_sim *sim, double unix_seconds);
/* Attached to a linear clock: origin_ns such that now = (uv_hrtime() -
 * origin_ns)/1e9*speed. On a fast-forwarding clock *origin_ns = 0 and
 * speed 1 (only the clock's thread can tell the time). Manual: 0 and 0. */
void kb_sim_clock_params(const kb_sim *sim, uint64_t *origin_ns, double *speed);

/* Real-time mode: a clock of the simulator's own on loop (linear, at its
 * speed) fires due events; the virtual clock continues from the current
 * sim time. KB_SIM_ESTATE if already attached. */
int kb_sim_attach(kb_sim *sim, struct uv_loop_s *loop);
/* The same on a clock someone else owns (the runtime's, to share one time
 * and one timer queue with the scenario); it must outlive the attachment. */
struct kb_vclock;
int kb_sim_attach_clock(kb_sim *sim, struct kb_vclock *clock);
/* The clock the simulator is attached to (NULL in manual mode): the REST
 * layer's modelled latencies wait on it. */
struct kb_vclock *kb_sim_clock(const kb_sim *sim);
/* Back to manual mode at the current virtual time. The timer handle is
 * closed (freed on the loop's next iteration). */
void kb_sim_detach(kb_sim *sim);
/* Manual mode: process every event due at or before t, then now = t.
 * KB_SIM_EINVAL if t < now, KB_SIM_ESTATE if attached. */
int kb_sim_advance_to(kb_sim *sim, double t);
/* Process events until none is left or the next is after `limit`; now
 * becomes the time of the last event processed. Returns events processed
 * (>= 0) or KB_SIM_ESTATE. */
long kb_sim_run_until_idle(kb_sim *sim, double limit);
/* Time of the next pending event, or INFINITY. */
double kb_sim_next_event_time(const kb_sim *sim);
/* Attached mode: process what is due now (mutating calls do this first). */
void kb_sim_sync(kb_sim *sim);

/* Change notifications for watches: called after an object changed, with
 * its kind and index and the new global resource version. */
typedef enum kb_sim_kind {
  KB_SIM_KIND_POD, KB_SIM_KIND_NODE, KB_SIM_KIND_RUN, KB_SIM_KIND_EVENT,
} kb_sim_kind;
typedef void (*kb_sim_observer)(void *ud, kb_sim_kind kind, uint32_t index,
                                uint64_t resource_version);
void kb_sim_set_observer(kb_sim *sim, kb_sim_observer fn, void *ud);
uint64_t kb_sim_resource_version(const kb_sim *sim);

/* ---- Pipelines -------------------------------------------------------- */

typedef enum kb_sim_step_kind {
  KB_SIM_STEP_EXECUTOR,   /* the user's container (v1 step, v2 executor) */
  KB_SIM_STEP_DRIVER,     /* v2 system-container-driver */
  KB_SIM_STEP_DAG_DRIVER, /* v2 system-dag-driver (root) */
  KB_SIM_STEP_SUSPEND,    /* an Argo suspend template: no pod; waits for its
                             duration, or to be resumed (kb_sim_run_node_resume) */
} kb_sim_step_kind;

typedef struct kb_sim_step_info {
  const char *name;      /* task name ("trainer", "echo-driver") */
  const char *template_name; /* Argo template the pod runs */
  const char *node_suffix;   /* Argo node name without the workflow name */
  const char *image;
  kb_sim_step_kind kind;
  int exit_handler;          /* runs after the main DAG (spec.onExit) */
  int64_t cpu_m, memory;     /* requests (limits when only limits are set) */
  int gpu;
  double cpu_demand;         /* cores used while running (stretching) */
  kb_sim_dist duration;
  double fail_prob;          /* < 0: the simulator's global rate */
  const uint16_t *deps;      /* indices of steps this one waits for */
  size_t n_deps;
  const kb_sim_kv *node_selector;
  size_t n_node_selector;
  size_t n_tolerations;
} kb_sim_step_info;

/* Expand a compiled pipeline: a KFP v1 Argo Workflow, the Argo Workflow
 * the v2 backend generates, or a v2 IR PipelineSpec. `doc` is one object
 * or an array of YAML documents (the IR's platform spec is the second).
 * params overrides pipeline inputs (object name -> value), may be NULL.
 * Returns the pipeline id (>= 0). */
int kb_sim_pipeline_load(kb_sim *sim, const cJSON *doc, const cJSON *params,
                         kb_sim_error *err);
int kb_sim_pipeline_load_yaml(kb_sim *sim, const char *text, size_t len,
                              const cJSON *params, kb_sim_error *err);
size_t kb_sim_pipeline_count(const kb_sim *sim);
/* "v1" (Argo workflow) or "v2" (IR); the name; the number of steps. */
const char *kb_sim_pipeline_format(const kb_sim *sim, int pipeline);
const char *kb_sim_pipeline_name(const kb_sim *sim, int pipeline);
size_t kb_sim_pipeline_steps(const kb_sim *sim, int pipeline);
int kb_sim_pipeline_step(const kb_sim *sim, int pipeline, size_t step,
                         kb_sim_step_info *out);
/* Index of the step named `name` (task name), or -1. */
int kb_sim_pipeline_find_step(const kb_sim *sim, int pipeline, const char *name);
/* Drops the loader's hold on a pipeline (each load is one hold): it is
 * freed once no run uses it either, and a later load may reuse its id.
 * Long-lived simulators (soaks) stay flat only if loaders release. */
void kb_sim_pipeline_release(kb_sim *sim, int pipeline);

/* ---- Runs ------------------------------------------------------------- */

/* KFP v2beta1 RuntimeState. */
typedef enum kb_sim_run_state {
  KB_SIM_RUN_UNSPECIFIED, KB_SIM_RUN_PENDING, KB_SIM_RUN_RUNNING,
  KB_SIM_RUN_SUCCEEDED, KB_SIM_RUN_SKIPPED, KB_SIM_RUN_FAILED,
  KB_SIM_RUN_CANCELING, KB_SIM_RUN_CANCELED, KB_SIM_RUN_PAUSED,
} kb_sim_run_state;
const char *kb_sim_run_state_name(kb_sim_run_state s); /* "RUNNING" */

typedef struct kb_sim_run_opts {
  const char *name;          /* display name; default = workflow name */
  const char *workflow_name; /* default: generateName prefix + 5 chars */
  const char *namespace_;    /* default "kubeflow" */
  double fail_prob;          /* < 0 (or opts NULL): global rate */
} kb_sim_run_opts;

#define KB_SIM_RUN_HISTORY 8

typedef struct kb_sim_run_info {
  int id;
  uint32_t gen; /* ids are reused: (id, gen) names one run for good */
  int pipeline;
  const char *name, *workflow, *namespace_;
  int deleted;
  /* What the KFP API reports (after the persistence agent's lag). */
  kb_sim_run_state state;
  double created_at, scheduled_at, finished_at; /* finished_at < 0 until reported */
  struct { double time; kb_sim_run_state state; } history[KB_SIM_RUN_HISTORY];
  size_t n_history;
  const char *error; /* message of the failure, or NULL */
  /* The Argo workflow's own status (no lag). */
  const char *wf_phase; /* "", Pending, Running, Succeeded, Failed, Error */
  const char *wf_message;
  double wf_started_at, wf_finished_at;
  int pods_total, pods_done; /* progress "done/total" */
} kb_sim_run_info;

int kb_sim_run_create(kb_sim *sim, int pipeline, const kb_sim_run_opts *opts,
                      kb_sim_error *err);
int kb_sim_run_terminate(kb_sim *sim, int run, kb_sim_error *err);
/* Argo's spec.suspend: while suspended no new step starts (running ones
 * finish) and the workflow stays Running; resuming starts what became
 * ready meanwhile. KB_SIM_ESTATE for a finished run. */
int kb_sim_run_suspend(kb_sim *sim, int run, int suspend, kb_sim_error *err);
/* Argo's shutdown strategy Stop: running pods of the main part are killed,
 * nothing new of it starts, the exit handler runs, the workflow ends
 * Failed with "Stopped with strategy 'Stop'". KB_SIM_ESTATE when finished. */
int kb_sim_run_stop(kb_sim *sim, int run, kb_sim_error *err);
/* Argo's retry of a finished Failed workflow: its failed and never-run
 * steps (and the exit handler) are reset, their pods deleted, and the run
 * continues from the steps that succeeded. A retried step draws its times
 * and its failure afresh. KB_SIM_ESTATE unless the run ended Failed. */
int kb_sim_run_retry(kb_sim *sim, int run, kb_sim_error *err);
/* Ends a waiting suspend step (KB_SIM_STEP_SUSPEND): Succeeded (ok) lets
 * its dependents start, Failed fails the workflow as a failed pod does.
 * KB_SIM_ESTATE unless the step is a suspend step that is waiting. */
int kb_sim_run_node_resume(kb_sim *sim, int run, size_t step, int ok, kb_sim_error *err);
/* Removes the workflow and its pods and frees the run: kb_sim_run_get
 * gives KB_SIM_ENOENT for it, and a later kb_sim_run_create may reuse its
 * id (so a caller forgets the id when it deletes the run). */
int kb_sim_run_delete(kb_sim *sim, int run, kb_sim_error *err);
size_t kb_sim_run_count(const kb_sim *sim);
int kb_sim_run_get(const kb_sim *sim, int run, kb_sim_run_info *out);
/* Argo WorkflowStatus JSON: phase, startedAt, finishedAt, progress,
 * message, nodes{id: {id,name,displayName,type,templateName,phase,
 * boundaryID,children,startedAt,finishedAt,progress,hostNodeName}}.
 * Caller frees. NULL for an unknown or deleted run. */
cJSON *kb_sim_run_workflow_status(const kb_sim *sim, int run);
/* A version of everything kb_sim_run_workflow_status shows: the newest
 * resource version of the run and its pods (0 for an unknown run). Equal
 * versions, equal status: callers cache what they derive from it. */
uint64_t kb_sim_run_version(const kb_sim *sim, int run);

/* ---- Pods, nodes, events --------------------------------------------- */

typedef enum kb_sim_pod_phase {
  KB_SIM_POD_PENDING, KB_SIM_POD_RUNNING, KB_SIM_POD_SUCCEEDED,
  KB_SIM_POD_FAILED, KB_SIM_POD_UNKNOWN,
} kb_sim_pod_phase;
const char *kb_sim_pod_phase_name(kb_sim_pod_phase p); /* "Pending" */

typedef struct kb_sim_pod_info {
  int id;
  uint32_t gen; /* ids are reused: (id, gen) names one pod for good */
  const char *name, *namespace_;
  const char *node;        /* NULL while unscheduled */
  kb_sim_pod_phase phase;
  /* Container state: "waiting" (reason ContainerCreating or, when not
   * scheduled, reason NULL), "running", "terminated" (reason Completed,
   * Error, NodeLost, Terminated). */
  const char *container_state, *reason, *message;
  int exit_code;
  const char *image;
  int scheduled;           /* PodScheduled condition */
  const char *unschedulable_message; /* last FailedScheduling text */
  double created_at, scheduled_at, started_at, finished_at;
  int64_t cpu_m, memory;
  int gpu;
  int run;                 /* owner run, -1 for none */
  int step;
  const char *workflow, *template_name;
  char node_name[256];     /* Argo node name (annotation workflows.argoproj.io/node-name) */
  char node_id[160];       /* Argo node id */
  uint64_t resource_version;
} kb_sim_pod_info;

/* Pods that exist (created, not deleted). kb_sim_pod_get gives
 * KB_SIM_ENOENT for an id with no pod; a deleted run's pods are freed and
 * their ids reused by later pods (compare gen). */
size_t kb_sim_pod_count(const kb_sim *sim); /* ids are 0 .. count-1 */
int kb_sim_pod_get(const kb_sim *sim, int pod, kb_sim_pod_info *out);

typedef struct kb_sim_node_info {
  int id;
  const char *name, *pool;
  int ready;
  int64_t cpu_m, memory;
  int gpu;
  int max_pods;
  int64_t cpu_requested_m, memory_requested;
  int gpu_requested;
  int pods;                /* bound, not terminated */
  double cpu_demand;       /* cores wanted by running pods */
  double progress_rate;    /* min(1, cpu / demand) */
  const kb_sim_kv *labels; /* pool label, hostname, os, arch, pool labels */
  size_t n_labels;
  const kb_sim_taint *taints; /* the node's own (config, then clients' writes) */
  size_t n_taints;
  int unschedulable;       /* cordoned */
  double created_at;
  uint64_t resource_version;
} kb_sim_node_info;

size_t kb_sim_node_count(const kb_sim *sim);
int kb_sim_node_get(const kb_sim *sim, int node, kb_sim_node_info *out);
int kb_sim_node_find(const kb_sim *sim, const char *name); /* id or -1 */
/* What clients write to a Node (spec.unschedulable, labels, spec.taints)
 * replaces the node's: the scheduler honours it from now on, and pods that
 * waited for a node are retried. Running pods stay (the Kubernetes view
 * deletes those a NoExecute taint does not let stay). The arrays are copied; labels/taints pointers from an
 * earlier kb_sim_node_get stay valid but stale. */
int kb_sim_node_set_spec(kb_sim *sim, int node, int unschedulable, const kb_sim_kv *labels,
                         size_t n_labels, const kb_sim_taint *taints, size_t n_taints,
                         kb_sim_error *err);
/* The pod's object was deleted (an eviction, `kubectl delete pod`): its
 * container is killed now (exit 137), its node's resources freed, and its
 * step fails as with a lost node. A no-op for a terminal pod. */
int kb_sim_pod_kill(kb_sim *sim, int pod, const char *reason, const char *message,
                    kb_sim_error *err);

typedef struct kb_sim_event_info {
  uint64_t seq;
  double time;
  const char *type;    /* Normal | Warning */
  const char *reason;  /* Scheduled, FailedScheduling, Pulling, Pulled, Started, NodeNotReady, ... */
  kb_sim_kind object_kind;
  int object;          /* pod or node id */
  const char *message;
  uint32_t object_gen; /* the pod's generation (kb_sim_pod_info.gen) */
} kb_sim_event_info;

/* Events live in a ring of config.events_capacity; seq grows from 0. */
uint64_t kb_sim_event_first(const kb_sim *sim); /* oldest seq kept */
uint64_t kb_sim_event_end(const kb_sim *sim);   /* one past the newest */
int kb_sim_event_get(const kb_sim *sim, uint64_t seq, kb_sim_event_info *out);

typedef struct kb_sim_stats {
  size_t pods_pending, pods_unschedulable, pods_running, pods_succeeded,
      pods_failed;
  size_t runs_total, runs_active; /* active: workflow not finished */
  int64_t cpu_capacity_m, cpu_requested_m, memory_capacity, memory_requested;
  int gpu_capacity, gpu_requested;
  double cpu_demand;
  size_t nodes_ready, nodes_total;
  uint64_t events_processed;
} kb_sim_stats;

void kb_sim_stats_get(const kb_sim *sim, kb_sim_stats *out);

/* ---- Faults ----------------------------------------------------------- */

/* Node lost: NotReady, its pods fail (reason NodeLost) and their steps
 * fail; no new pods land there until restored. */
int kb_sim_node_fail(kb_sim *sim, int node, kb_sim_error *err);
int kb_sim_node_restore(kb_sim *sim, int node, kb_sim_error *err);
/* Every node of the pool. */
int kb_sim_pool_fail(kb_sim *sim, const char *pool, kb_sim_error *err);
int kb_sim_pool_restore(kb_sim *sim, const char *pool, kb_sim_error *err);
/* Global probability that a step's main container fails (0..1). */
int kb_sim_set_step_fail_prob(kb_sim *sim, double p, kb_sim_error *err);

/* ---- API latency ------------------------------------------------------ */

/* Sim seconds the response to one request should be delayed: the
 * endpoint's base draw + per_item * items + per_stored_run * stored_rows,
 * queued behind earlier requests when more than api_max_inflight are in
 * flight. Unknown endpoints use "default". Deterministic for a given
 * request sequence (own PRNG stream). */
double kb_sim_api_latency(kb_sim *sim, const char *endpoint, size_t stored_rows,
                          size_t items);

#endif
