/* The mirror's records (mirror.c, mirror_events.c): not a public header. */
#ifndef KB_SIM_MIRROR_INTERNAL_H
#define KB_SIM_MIRROR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"
#include "sim_glue.h"

#define MAX_EVENT_OBJECTS 4096 /* Event objects kept; older ones are deleted (events expire) */

enum { OBJ_NONE, OBJ_LIVE, OBJ_GONE };

/* Records are indexed by model id. The model reuses the ids of deleted
 * runs and pods, so a record also keeps the generation it describes: when
 * the model's differs, the record is of a predecessor, whose objects are
 * deleted (by the names kept here) before the record starts afresh. */
typedef struct glue_pod {
  char *ns, *name, *container;
  uint32_t gen;
  uint8_t state, bound, started_logged, ended_logged;
} glue_pod;

typedef struct glue_run {
  const glue_owner_ops *ops;
  void *ud;
  int *pods;
  size_t n_pods, cap_pods;
  uint32_t gen;
  uint8_t wf_state;       /* the KFP run's Workflow object */
  char *wf_ns, *wf_name;  /* its name, while it is LIVE */
  char *wf_uid;           /* and uid (its pods' ownerReferences) */
  char *adopt_ns, *adopt_name; /* the client's pod object (kb_glue_adopt_pod) */
} glue_run;

typedef struct dirty_set {
  uint32_t *v; /* v[head..n) are dirty, oldest first */
  size_t head, n, cap;
  uint64_t added; /* ids ever added */
  uint8_t *flag;
  size_t n_flag;
} dirty_set;

struct sim_glue {
  kb_sim *sim;
  kb_k8s_store *st;
  kb_sim_kfp *kfp;
  uv_loop_t *loop;
  uv_idle_t idle;
  uv_check_t trim; /* packs the store's objects between loop turns */
  int idle_init, idle_on, flushing, writing, stopped;
  int looked; /* a Kubernetes/Argo request came: the leases start */
  int said_behind; /* the log said once that requests see a view behind the model */
  size_t request_backlog_max; /* behind more than this, a request's flush is bounded */
  double request_flush_cpu;   /* by this much CPU (kb_glue_set_request_flush) */
  int creating_pod; /* pod_create is writing a model pod */
  glue_pod *pods;
  size_t n_pods;
  glue_run *runs;
  size_t n_runs;
  dirty_set d_pods, d_nodes, d_runs;
  uint64_t nodes_at; /* uv_now of the last write of dirty nodes (flush) */
  size_t pod_gc;       /* the terminated-pod GC threshold (0: off) */
  uint64_t gc_scanned; /* d_pods.added at the last skip_collected scan */
  int events_dirty;
  uint64_t ev_next;
  uint64_t ctl_events; /* Events written by controllers, for their names */
  char **ev_keys; /* "ns/name" of Event objects, a ring */
  size_t ev_head, ev_count;
  uint64_t rng;
  glue_ctl *ctl[7];
  k8s_ctls *apps; /* the store-level controllers (k8s_ctl.h) */
  kb_vclock *apps_clock; /* theirs once someone looks (leases cost writes) */
  int apps_clocked;
  double longest_turn; /* CPU seconds of the longest idle flush (kb_glue_longest_turn) */
  const kb_k8s_res *r_pods, *r_nodes, *r_events, *r_workflows, *r_namespaces;
};

/* Mirrors up to `budget` new model events (mirror_events.c); returns how
 * many it took. */
size_t kb_glue_mirror_events(sim_glue *g, size_t budget);

#endif
