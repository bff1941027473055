/* The glue between the cluster model (kb/sim.h) and the Kubernetes object
 * store (kb/k8s_store.h): the mirror writes Nodes, Pods, Events, pod logs
 * and the Workflows of KFP runs into the store as the model changes, and
 * the controllers (Job, Workflow, TFJob/PyTorchJob/MPIJob) turn objects
 * created through the API into model runs and write their status back.
 *
 * The model's observer fires in the middle of its event processing, where
 * neither the model nor (safely) the store may be changed; it only marks
 * objects dirty. kb_glue_flush() writes them out and tells the owners of runs,
 * from a uv idle callback or from the server before it answers a request,
 * so every answer sees the model as of its arrival.
 *
 * Not a public header. Everything runs on the simulator's loop thread. */
#ifndef KB_SIM_GLUE_H
#define KB_SIM_GLUE_H

#include <uv.h>

#include "kb/http_server.h"

#include "kb/k8s_store.h"
#include "kb/sim.h"
#include "kb/sim_kfp.h"

typedef struct sim_glue sim_glue;


/* What a controller that owns a model run wants from the mirror. */
typedef struct glue_owner_ops {
  /* The Pod object for step `step` of the run: metadata (name, labels,
   * annotations, ownerReferences) and spec; the mirror adds nodeName and
   * status. NULL: an Argo-style pod. The caller frees. */
  cJSON *(*pod)(void *ud, int run, int step);
  /* The run or one of its pods changed; called from kb_glue_flush, where the
   * model and the store may be changed. */
  void (*changed)(void *ud, int run);
  /* The main container, for pod logs ("main" when NULL). */
  const char *(*container)(void *ud, int run, int step);
} glue_owner_ops;

sim_glue *kb_glue_new(kb_sim *sim, kb_k8s_store *st, kb_sim_kfp *kfp, uv_loop_t *loop);
/* The KFP API, for the run ids of the Workflows of KFP runs. */
void kb_glue_set_kfp(sim_glue *g, kb_sim_kfp *kfp);
/* Once the server listens: the clock CronJobs and node leases wait on
 * (given to them on the first kb_glue_flush, so a KFP-only benchmark pays no
 * lease renewals), and the apiserver's own address (the `kubernetes`
 * Endpoints). */
void kb_glue_serving(sim_glue *g, struct kb_vclock *clock, const char *ip, int port);
/* Installs the observer and the controllers, creates the Node objects. */
int kb_glue_start(sim_glue *g);
/* The terminated-pod GC threshold (k8s_ctl.h; 0: off), after kb_glue_start. */
void kb_glue_set_pod_gc(sim_glue *g, size_t threshold);
/* Stops the idle handle and the controllers (before the loop's last run). */
void kb_glue_stop(sim_glue *g);
/* After the loop's last run. */
void kb_glue_free(sim_glue *g);

/* Writes out everything dirty (syncs the model first). Reentrancy-safe. */
void kb_glue_flush(sim_glue *g);
/* The same where nothing up the stack holds a pointer into the store (the
 * server before a request): the store is trimmed between the writes, so a
 * large backlog never holds a tree per object at once. */
void kb_glue_flush_all(sim_glue *g);
/* When the view is more than backlog_max changes behind the model,
 * kb_glue_flush_all writes only cpu_s seconds of CPU of it (the oldest
 * first) and the rest follows in idle turns: a request is answered from
 * the view as it stands instead of waiting for all of it. Defaults 50,000
 * and 0.04 s (no request waits longer behind it): every test's backlog is
 * written whole. */
void kb_glue_set_request_flush(sim_glue *g, size_t backlog_max, double cpu_s);
/* A Kubernetes request for path is about to be answered: node Leases are
 * renewed first when it reads them (their renewals are lazy). */
void kb_glue_reading(sim_glue *g, const char *path);
/* CPU seconds of the longest idle turn the mirror took (its slices). */
double kb_glue_longest_turn(const sim_glue *g);
/* Runs, pods and nodes dirty and model events not mirrored yet. */
size_t kb_glue_backlog(const sim_glue *g);

kb_sim *kb_glue_sim(sim_glue *g);
uv_loop_t *kb_glue_loop(sim_glue *g);
kb_k8s_store *kb_glue_store(sim_glue *g);
/* Resource types by plural ("pods", "jobs", "workflows", "tfjobs"). */
const kb_k8s_res *kb_glue_res(sim_glue *g, const char *group, const char *resource);

/* Claims a run for a controller (before the model's first change of it
 * is flushed). */
void kb_glue_own_run(sim_glue *g, int run, const glue_owner_ops *ops, void *ud);
/* The run's (one) pod object exists already: a client made it (the pod
 * controller's runs). The mirror writes only nodeName and status into it
 * instead of creating a pod. After kb_glue_own_run; names are copied. */
void kb_glue_adopt_pod(sim_glue *g, int run, const char *ns, const char *name);
/* Releases the claim (e.g. the owner object was deleted). */
void kb_glue_disown_run(sim_glue *g, int run);
/* The run's pod objects are already gone from the store (deleted through
 * the API): the mirror forgets them without deleting by name (a client
 * may have made a new object of the same name meanwhile). */
void kb_glue_forget_run(sim_glue *g, int run);
/* 1 while the mirror itself creates a Pod (for the model's own runs):
 * the pod controller's hook leaves those alone. */
int kb_glue_creating_pod(const sim_glue *g);
/* A Pod of the model's own runs was deleted through the API: its
 * container is killed in the model. 1 if it was one, else 0. */
int kb_glue_pod_deleted(sim_glue *g, const cJSON *pod);
/* Model pod ids of the run, in creation order. */
size_t kb_glue_run_pods(sim_glue *g, int run, const int **pods);

/* Store writes made by the glue itself: the controllers' hooks ignore
 * the events they cause. */
int kb_glue_writing(const sim_glue *g);
void kb_glue_write_begin(sim_glue *g);
void kb_glue_write_end(sim_glue *g);

/* Sim time as unix seconds, and as RFC 3339. */
double kb_glue_unix(const sim_glue *g, double sim_time);
void kb_glue_time(const sim_glue *g, double sim_time, char out[32]);
/* Makes sure a namespace exists (controllers may run anywhere). */
void kb_glue_ensure_namespace(sim_glue *g, const char *ns);
/* Replaces the status of an object (KB_K8S_STATUS update); 0 or -code. */
int kb_glue_put_status(sim_glue *g, const kb_k8s_res *res, const char *ns, const char *name,
                    const cJSON *status);
/* Appends one log line (a newline is added) to a pod's container. */
void kb_glue_log(sim_glue *g, const char *ns, const char *pod, const char *container,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Records a Normal/Warning Event about an object (obj: its stored state,
 * for kind, apiVersion, namespace, name and uid) from a controller. */
void kb_glue_event(sim_glue *g, const cJSON *obj, const char *type, const char *reason,
                const char *component, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Five characters as in generateName suffixes. */
void kb_glue_suffix(sim_glue *g, char out[6]);

/* ---- controllers (one file each) ---- */
typedef struct glue_ctl glue_ctl;
struct glue_ctl { /* the first member of each controller */
  void (*free)(glue_ctl *c);
};
glue_ctl *kb_glue_job_start(sim_glue *g);
glue_ctl *kb_glue_workflow_start(sim_glue *g);
glue_ctl *kb_glue_training_start(sim_glue *g);
glue_ctl *kb_glue_cron_start(sim_glue *g); /* Argo CronWorkflows (ctl_cron.c) */
/* Pods created through the API (bare pods, other controllers' pods). */
glue_ctl *kb_glue_pod_start(sim_glue *g);
/* PodDisruptionBudget status from the pods its selector matches. */
glue_ctl *kb_glue_pdb_start(sim_glue *g);
/* Clients' writes to Nodes (cordon, taints, labels) into the model. */
glue_ctl *kb_glue_nodes_start(sim_glue *g);
/* The Node object of a model node: created with the model's labels and
 * taints, then only status and the model's own taint (unreachable) are
 * written; what clients set stays (mirror_nodes.c). */
void kb_glue_mirror_node(sim_glue *g, int id);
void kb_glue_ctl_free(glue_ctl *c);

/* The Argo Workflow objects the mirror keeps for runs nobody owns (KFP
 * runs): created on the run's first change, status from the model. */
void kb_glue_kfp_workflow(sim_glue *g, int run);
/* Writes a run's Argo status into its Workflow object (phase, startedAt,
 * finishedAt, progress, message, nodes) and its phase labels. */
void kb_glue_workflow_status(sim_glue *g, int run, const char *ns, const char *name);

/* Log lines for a pod that started or ended (mirror_logs.c). */
void kb_glue_logs_started(sim_glue *g, const kb_sim_pod_info *pi, const char *ns,
                       const char *pod, const char *container);
void kb_glue_logs_ended(sim_glue *g, const kb_sim_pod_info *pi, const char *ns, const char *pod,
                     const char *container);

/* ---- object builders (mirror_objects.c): pure functions of model info ---- */
/* "8" or "7910m"; "31457280Ki" style memory. */
void kb_glue_cpu_str(int64_t m, char out[32]);
void kb_glue_mem_str(int64_t bytes, char out[32]);
/* A whole Node object. */
cJSON *kb_glue_node_object(sim_glue *g, const kb_sim_node_info *ni);
/* The Pod status a kubelet reports for the model pod; containers: the
 * pod spec's containers (their names and images). */
cJSON *kb_glue_pod_status(sim_glue *g, const kb_sim_pod_info *pi, const cJSON *containers);
/* resources {requests, limits} for a step. */
cJSON *kb_glue_step_resources(const kb_sim_step_info *si);
/* An Argo pod (containers wait + main) for a workflow step. */
cJSON *kb_argo_server_pod(sim_glue *g, const kb_sim_pod_info *pi, const char *wf_uid);
/* A synthetic Workflow spec for a pipeline (templates from its steps). */
cJSON *kb_glue_workflow_spec(sim_glue *g, int pipeline);
/* An Argo container template named `name` from a pod template
 * ({metadata, spec}): its first container, nodeSelector, tolerations and
 * annotations (sim.kbrun.io/duration ...), plus `annotations` from the
 * owner object for the sim.kbrun.io/ keys the template lacks. */
cJSON *kb_glue_template_from_pod(const char *name, const cJSON *pod_template,
                              const cJSON *annotations);

#endif
