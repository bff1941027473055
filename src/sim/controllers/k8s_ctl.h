/* Controllers that act on the Kubernetes store alone, as kube-controller-
 * manager's do on an apiserver: Deployment -> ReplicaSets (ctl_deploy.c),
 * ReplicaSet -> Pods (ctl_replicaset.c), Service -> Endpoints and
 * EndpointSlices (ctl_endpoints.c), CronJob -> Jobs on the virtual clock
 * (ctl_cronjob.c), the kubelets' node heartbeat Leases (ctl_nodelease.c)
 * and the garbage collection of terminated pods (ctl_podgc.c). They create and delete objects through the store, so
 * the Job controller (ctl_job.c) runs a CronJob's Jobs, and whoever runs
 * stored Pods runs a ReplicaSet's; they follow the Pods' Ready condition.
 *
 * Every reconcile reads the current state from the store and writes only
 * what differs, so the events their own writes cause settle. Not a public
 * header; everything runs on the store's thread. */
#ifndef KB_K8S_CTL_H
#define KB_K8S_CTL_H

#include "kb/k8s_store.h"
#include "kb/vclock.h"

typedef struct k8s_ctls k8s_ctls;
/* Starts them all on the store; NULL when out of memory. */
k8s_ctls *kb_k8s_ctls_start(kb_k8s_store *st);
/* The clock CronJob schedules and lease renewals wait on (NULL: none
 * fire). The store's `now` must read the same time (its unix seconds). */
void kb_k8s_ctls_set_clock(k8s_ctls *c, kb_vclock *clock);
/* The address of the apiserver itself: the `kubernetes` Endpoints. */
void kb_k8s_ctls_set_apiserver(k8s_ctls *c, const char *ip, int port);
/* Terminated pods kept before the oldest are deleted (0: all kept). */
void kb_k8s_ctls_set_pod_gc(k8s_ctls *c, size_t threshold);
/* A request is about to read the node Leases (their renewals are written
 * lazily, see ctl_nodelease.c). */
void kb_k8s_ctls_leases_read(k8s_ctls *c);
void kb_k8s_ctls_free(k8s_ctls *c);

/* ---- one controller ---- */
typedef struct k8s_ctl k8s_ctl;
struct k8s_ctl { /* the first member of each */
  void (*free)(k8s_ctl *c);
  void (*set_clock)(k8s_ctl *c, kb_vclock *clock); /* may be NULL */
};
k8s_ctl *kb_k8s_deploy_start(kb_k8s_store *st);
k8s_ctl *kb_k8s_replicaset_start(kb_k8s_store *st);
k8s_ctl *kb_k8s_endpoints_start(kb_k8s_store *st);
void kb_k8s_endpoints_set_apiserver(k8s_ctl *c, const char *ip, int port);
k8s_ctl *kb_k8s_cronjob_start(kb_k8s_store *st);
k8s_ctl *kb_k8s_nodelease_start(kb_k8s_store *st);
void kb_k8s_nodelease_read(k8s_ctl *c);
/* Terminated-pod garbage collection (ctl_podgc.c): kube-controller-
 * manager's --terminated-pod-gc-threshold and its default. */
#define KB_K8S_POD_GC_THRESHOLD 12500
k8s_ctl *kb_k8s_podgc_start(kb_k8s_store *st);
void kb_k8s_podgc_set_threshold(k8s_ctl *c, size_t threshold); /* 0: off */
uint64_t kb_k8s_podgc_collected(const k8s_ctl *c);

/* ---- helpers (ctl_store.c) ---- */
/* The ownerReference with controller: true, or NULL. */
const cJSON *kb_ctl_controller_ref(const cJSON *obj);
/* 1 when obj's controller is of that kind and uid. */
int kb_ctl_owned_by(const cJSON *obj, const char *kind, const char *uid);
/* {apiVersion, kind, name, uid, controller: true, blockOwnerDeletion: true} */
cJSON *kb_ctl_owner_ref(const char *api_version, const char *kind, const char *name, const char *uid);
/* The Pod's Ready condition is True. */
int kb_ctl_pod_ready(const cJSON *pod);
/* Neither Succeeded/Failed nor being deleted. */
int kb_ctl_pod_active(const cJSON *pod);
/* A list of objects of res in ns matching the selector text: the list
 * object (caller frees) and its items in *items. NULL on error. */
cJSON *kb_ctl_list(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *labels,
                const cJSON **items);
/* The stored objects of res in ns (NULL: all), borrowed: valid until the
 * next write (no copies, for the controllers that scan pods on every pod
 * event). The array is the caller's to free; NULL when out of memory. */
const cJSON **kb_ctl_peek_all(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, size_t *n);
/* Replaces the status when it differs from the stored one (so the event
 * it causes does not loop). 0, 1 when written, or -code. */
int kb_ctl_put_status(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                   const cJSON *status);
/* Applies a merge patch (JSON text built by the caller). 0 or -code. */
int kb_ctl_merge(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
              const cJSON *patch);
/* The pod-template-hash of a Deployment's template (ctl_deploy.c). */
void kb_k8s_template_hash(const cJSON *tmpl, char out[16]);

#endif
