/* Shared state of the simulator's files. Not a public header. */
#ifndef KB_SIM_INTERNAL_H
#define KB_SIM_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include "kb/sim.h"
#include "kb/vclock.h"

#define SIM_NONE UINT32_MAX

/* ---- helpers (sim.c) ---- */
int kb_sim_fail(kb_sim_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
char *kb_sim_strdup(const char *s);
char *kb_sim_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Grow *arr (of elem bytes) to hold at least need elements. */
int kb_sim_reserve(void **arr, size_t *cap, size_t need, size_t elem);
uint32_t kb_sim_fnv32a(const char *s);

/* String arena: names live until kb_sim_free. */
typedef struct sim_arena {
  char **chunks;
  size_t n, cap;
  size_t used, size; /* of the last chunk */
} sim_arena;
const char *kb_sim_arena_strdup(sim_arena *a, const char *s);
const char *kb_sim_arena_printf(sim_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void kb_sim_arena_free(sim_arena *a);

/* Kubernetes quantities (config.c): cpu "8", "500m", 0.5; memory "30Gi",
 * "64Mi", "15G", 1024. Return 0 or -1. */
int kb_sim_parse_cpu(const cJSON *v, int64_t *millicores);
int kb_sim_parse_cpu_str(const char *s, int64_t *millicores);
int kb_sim_parse_mem(const cJSON *v, int64_t *bytes);
int kb_sim_parse_mem_str(const char *s, int64_t *bytes);

/* ---- event queue (clock.c) ---- */
typedef enum sim_ev_kind {
  EV_RUN_START,    /* a = run: the workflow controller starts it */
  EV_POD_CREATE,   /* a = pod: Argo creates the pod object */
  EV_SCHEDULE,     /* a scheduler pass */
  EV_POD_START,    /* a = pod: container starts (after pull + startup) */
  EV_NODE_WORK,    /* a = node, b = gen: next pod finishes its work */
  EV_POD_EXIT,     /* a = pod: wait container exits, pod terminal */
  EV_STEP_DETECT,  /* a = pod: controller sees the pod is done */
  EV_RUN_REPORT,   /* a = run, b = report index: persistence agent */
  EV_SUSPEND_END,  /* a = run, b = step | retries << 16: a suspend step's duration is up */
} sim_ev_kind;

/* Runs and pods are recycled (slot reuse keeps a long simulation's memory
 * flat), so an event about one carries the generation of the slot when it
 * was scheduled; dispatch drops it if the slot has moved on since. */
typedef struct sim_event {
  double t;
  uint64_t seq;
  uint32_t kind, a, b, gen;
} sim_event;

typedef struct sim_heap {
  sim_event *ev;
  size_t n, cap;
  uint64_t seq;
} sim_heap;

int kb_sim_heap_push(sim_heap *h, double t, uint32_t kind, uint32_t a, uint32_t b, uint32_t gen);
int kb_sim_heap_pop(sim_heap *h, sim_event *out);
const sim_event *kb_sim_heap_peek(const sim_heap *h);
void kb_sim_heap_free(sim_heap *h);

/* ---- pipelines (pipeline.c) ---- */
typedef enum sim_gnode_type { GN_POD, GN_DAG, GN_STEPS, GN_STEPGROUP, GN_SUSPEND } sim_gnode_type;

/* An Argo node of the expanded workflow: groups (DAG, Steps) and pods. */
typedef struct sim_gnode {
  char *suffix;        /* node name without the workflow name ("" = root) */
  char *display;
  char *template_name;
  sim_gnode_type type;
  int parent;          /* -1 for the root */
  int step;            /* GN_POD: step index */
  int first, end;      /* steps [first, end) below this node */
} sim_gnode;

/* One matchExpression of a nodeSelectorTerm (term: its index). */
enum { NS_IN, NS_NOTIN, NS_EXISTS, NS_NOTEXIST, NS_GT, NS_LT };
typedef struct sim_nsexpr {
  size_t term;
  int op;
  char *key;
  char **values;
  size_t n_values;
} sim_nsexpr;

typedef struct sim_step {
  kb_sim_step_info info; /* pointers below own the storage */
  char *name, *template_name, *image;
  int gnode;
  kb_sim_kv *selector;
  kb_sim_taint *tolerations; /* key, value, effect; value "" + effect "" ok */
  char **tol_ops;            /* "Exists" | "Equal" per toleration */
  /* Required node affinity: nodeSelectorTerms ORed, their expressions ANDed. */
  struct sim_nsexpr *affinity;
  size_t n_affinity, n_terms;
  uint16_t *deps;
  uint16_t *rdeps;           /* dependents */
  size_t n_rdeps;
  int image_id;
  double extra; /* v2 launcher start-up added to the work (B3) */
} sim_step;

typedef struct sim_pipeline {
  char *name, *format, *generate_name;
  sim_step *steps;
  size_t n_steps;
  sim_gnode *gnodes;
  size_t n_gnodes;
  size_t n_main; /* steps not in the exit handler */
  size_t n_suspend; /* suspend steps: no pod, not in the progress */
  int holds;     /* loaders' holds + runs using it; freed at 0 */
} sim_pipeline;

void kb_sim_pipeline_free(sim_pipeline *p);

/* ---- cluster objects (cluster.c) ---- */
typedef struct sim_image_slot {
  int image;
  double ready_at;
} sim_image_slot;

typedef struct sim_node {
  const char *name;
  int pool;
  int ready;
  int64_t cpu_m, memory;
  int gpu, max_pods;
  int64_t req_cpu, req_mem, score_cpu;
  int req_gpu, npods;
  /* Labels and taints start from the pool's config; clients' writes to the
   * Node replace them (kb_sim_node_set_spec). Arrays owned, strings in the
   * arena (never freed, so info pointers stay valid). */
  kb_sim_kv *labels;
  size_t n_labels;
  kb_sim_taint *taints;
  size_t n_taints;
  int unschedulable; /* spec.unschedulable (cordon) */
  double demand, vclock, vclock_t, rate;
  uint32_t run_head; /* running pods (intrusive list) */
  uint32_t gen;
  double pull_free_at;
  sim_image_slot *images;
  size_t n_images, cap_images;
  double created_at;
  uint64_t rv;
} sim_node;

enum { CS_NONE, CS_WAITING, CS_RUNNING, CS_TERMINATED };

typedef struct sim_pod {
  char *name;    /* owned */
  uint32_t gen;  /* bumped when the slot is freed */
  uint32_t run, node;
  uint16_t step;
  uint8_t phase, cstate, exists, will_fail, scheduled, in_queue;
  const char *reason, *message, *unsched_msg;
  int exit_code;
  double created, scheduled_at, started, finished, detected;
  double work, vtarget, demand;
  double startup, detect_delay;
  uint32_t run_prev, run_next; /* node's running list */
  uint32_t q_next;             /* scheduler queue */
  uint64_t rv;
} sim_pod;

typedef struct sim_evrec {
  uint64_t seq;
  double time;
  const char *type, *reason;
  kb_sim_kind kind;
  int object;
  uint32_t object_gen;
  char message[200];
} sim_evrec;

/* ---- runs (run.c) ---- */
enum { ST_WAIT, ST_CREATED, ST_OK, ST_FAIL, ST_SKIP };

typedef struct sim_stepstate {
  uint32_t pod;
  uint16_t deps_left;
  uint8_t state;
  double started, finished; /* a suspend step's times (it has no pod); -1: not yet */
} sim_stepstate;

/* A run's slot is freed when the run is deleted (its pods with it) and
 * reused by a later run; `serial` (creation order) seeds its random
 * streams, so a reused slot does not replay its predecessor's draws. */
typedef struct sim_run {
  char *name, *workflow, *ns, *error; /* owned */
  uint32_t gen;
  int in_use;
  uint64_t serial;
  int pipeline;
  double fail_prob;
  sim_stepstate *steps;
  double created, wf_started, wf_finished;
  const char *wf_phase, *wf_message; /* literals */
  int inflight, done_pods, failed, terminated, exit_started, deleted;
  int suspended;    /* Argo spec.suspend: no new step starts */
  uint32_t retries; /* Argo retries so far: a retried step draws afresh */
  kb_sim_run_state true_state;
  kb_sim_run_state state; /* reported */
  double finished_reported;
  double last_report_t;
  struct { double time; kb_sim_run_state state; } history[KB_SIM_RUN_HISTORY];
  size_t n_history;
  uint64_t rv;
} sim_run;

/* Nodes a pod was refused by, per reason (scheduler.c); untolerated taints
 * per taint ("key: value"). */
#define SIM_REFUSAL_REASONS 8
#define SIM_TAINT_KINDS 8
typedef struct sim_refusals {
  unsigned counts[SIM_REFUSAL_REASONS];
  char taint[SIM_TAINT_KINDS][160];
  unsigned taint_n[SIM_TAINT_KINDS];
  int n_taint;
} sim_refusals;

/* ---- the simulator ---- */
struct kb_sim {
  kb_sim_config *cfg;
  uint64_t seed;
  double speed, epoch;
  double now;           /* model time of the last processed event / advance */
  kb_vclock *clock;     /* attached: the clock events fire on, else NULL */
  int owns_clock;       /* attached to a loop: the clock is ours */
  kb_vtimer timer;      /* armed for the next event */
  double origin;        /* clock time at sim time 0 */
  uint64_t origin_ns;   /* linear: uv_hrtime() at sim time 0 */
  int in_dispatch;
  sim_heap heap;
  uint64_t events_processed;
  sim_arena arena;
  uint64_t rv;
  kb_sim_observer observer;
  void *observer_ud;

  sim_node *nodes;
  size_t n_nodes, cap_nodes;
  sim_pod *pods;
  size_t n_pods, cap_pods;
  sim_pipeline **pipelines; /* NULL: a free slot */
  size_t n_pipelines, cap_pipelines;
  sim_run *runs;
  size_t n_runs, cap_runs;
  uint64_t runs_created;
  /* free slots, reused last-in first-out */
  uint32_t *free_pods, *free_runs, *free_pipelines;
  size_t n_free_pods, cap_free_pods, n_free_runs, cap_free_runs,
      n_free_pipelines, cap_free_pipelines;
  char **images; /* interned image names */
  double *image_mb;
  size_t n_images, cap_images, cap_image_mb;

  /* scheduler */
  uint32_t q_head, q_tail, u_head, u_tail;
  size_t q_len, u_len;
  double tokens, tokens_t;
  int pass_scheduled;
  const char *msgs[64]; /* interned FailedScheduling messages */
  /* The last refusal and its message: a pass over thousands of waiting
   * pods mostly refuses them for the same reasons. */
  sim_refusals last_rf;
  const char *last_msg;
  /* Bumped by every change of a node (kb_sim_touch): a plain pod (no selector,
   * affinity or toleration) refused while it stands still is refused for
   * the same reasons as the last one with the same requests. */
  uint64_t node_epoch;
  const char *kill_reason, *kill_message; /* kb_sim_pod_kill's last words (arena) */
  struct {
    uint64_t epoch;
    int64_t cpu_m, memory;
    int gpu, valid;
    const char *msg;
  } plain_refused;
  size_t n_msgs;

  /* events ring */
  sim_evrec *evring;
  uint64_t ev_first, ev_end;

  /* persistence agent (fluid queue) */
  double pa_backlog, pa_t;
  size_t wf_active, wf_finished; /* stored workflows the agent resyncs */

  /* API server */
  double *api_free_at;
  kb_sim_rng api_rng;
};

/* cluster.c */
int kb_sim_cluster_build(kb_sim *sim, kb_sim_error *err);
int kb_sim_image_intern(kb_sim *sim, const char *image);
uint32_t kb_sim_pod_new(kb_sim *sim);
/* Frees the pod's slot (the pod is dead and out of every queue). */
void kb_sim_pod_free(kb_sim *sim, uint32_t pod);
/* Pushes a free slot index; 0 or -1 (out of memory: the slot is lost). */
int kb_sim_free_push(uint32_t **v, size_t *n, size_t *cap, uint32_t i);
void kb_sim_touch(kb_sim *sim, kb_sim_kind kind, uint32_t idx, uint64_t *rv);
void kb_sim_event_emit(kb_sim *sim, const char *type, const char *reason,
                    kb_sim_kind kind, uint32_t obj, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Processor sharing: bring the node's work clock to now, re-plan. */
void kb_sim_node_add_running(kb_sim *sim, uint32_t node, uint32_t pod);
void kb_sim_node_remove_running(kb_sim *sim, uint32_t node, uint32_t pod);
void kb_sim_node_work_due(kb_sim *sim, uint32_t node, uint32_t gen);
/* Release the pod's node resources (terminal or deleted pod). */
void kb_sim_pod_unbind(kb_sim *sim, uint32_t pod);
double kb_sim_image_pull_ready(kb_sim *sim, uint32_t node, int image);

/* scheduler.c */
void kb_sim_sched_enqueue(kb_sim *sim, uint32_t pod);
void kb_sim_sched_remove(kb_sim *sim, uint32_t pod);
void kb_sim_sched_capacity_freed(kb_sim *sim);
void kb_sim_sched_kick(kb_sim *sim);
void kb_sim_sched_pass(kb_sim *sim);

/* pipeline.c */
void kb_sim_pipeline_hold(kb_sim *sim, int pipeline);
void kb_sim_pipeline_drop(kb_sim *sim, int pipeline);
int kb_sim_pipeline_expand(kb_sim *sim, const cJSON *doc, const cJSON *params,
                        sim_pipeline **out, kb_sim_error *err);

/* run.c */
/* The run in slot `run`, or NULL when the slot is free. */
sim_run *kb_sim_run_at(const kb_sim *sim, int run);
const sim_step *kb_sim_pod_step(const kb_sim *sim, uint32_t pod);
void kb_sim_run_event(kb_sim *sim, const sim_event *ev);
void kb_sim_pod_bound(kb_sim *sim, uint32_t pod);
void kb_sim_pod_work_done(kb_sim *sim, uint32_t pod);
/* Kill a pod now (node lost, termination): terminal Failed. */
void kb_sim_pod_stop(kb_sim *sim, uint32_t pod, const char *reason, const char *msg);
void kb_sim_runs_free(kb_sim *sim);

/* sim.c */
int kb_sim_schedule(kb_sim *sim, double t, sim_ev_kind kind, uint32_t a, uint32_t b);

#endif
