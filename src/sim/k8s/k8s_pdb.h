/* PodDisruptionBudgets and the pods/eviction subresource over the store
 * (k8s_pdb.c): what the disruption controller computes and what the
 * apiserver's eviction REST handler decides, as in Kubernetes 1.32. */
#ifndef KB_K8S_PDB_H
#define KB_K8S_PDB_H

#include "kb/k8s_store.h"

/* 1 when a metav1.LabelSelector ({matchLabels, matchExpressions}) matches
 * the labels; a NULL selector matches nothing, an empty one everything
 * (policy/v1). */
int kb_k8s_label_selector_match(const cJSON *selector, const cJSON *labels);

/* The PDB's status as the disruption controller writes it: currentHealthy
 * (Ready pods of its selector not being deleted), desiredHealthy,
 * expectedPods, disruptionsAllowed, observedGeneration, disruptedPods and
 * the DisruptionAllowed condition (lastTransitionTime kept from `prev`'s
 * status when the condition did not change). Caller frees; NULL on OOM. */
cJSON *kb_k8s_pdb_status(kb_k8s_store *st, const cJSON *pdb);

/* POST .../pods/{name}/eviction with an Eviction body. 0: the pod is
 * deleted (unless dry run) and *out is the Status to send with 201.
 * -429/-500 with *out set: the budget forbids it (TooManyRequests, with
 * a DisruptionBudget cause) or several budgets match; send *out with that
 * code. Other negative codes: err says why (404, 400, 409), *out NULL. */
int kb_k8s_pod_evict(kb_k8s_store *st, const char *ns, const char *name, const cJSON *body,
                  unsigned flags, cJSON **out, kb_k8s_error *err);

#endif
