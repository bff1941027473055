/* The scale subresource and the self reviews (k8s_subres.c), for the REST
 * layer. */
#ifndef KB_K8S_SUBRES_H
#define KB_K8S_SUBRES_H

#include "k8s_internal.h"

/* Deployments and ReplicaSets have /scale. */
int kb_k8s_has_scale(const kb_k8s_res *res);
/* SelfSubjectAccessReview and SelfSubjectReview: create only, not stored. */
int kb_k8s_is_review(const kb_k8s_res *res);
cJSON *kb_k8s_scale_get(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                     kb_k8s_error *err);
/* PUT: spec.replicas of the Scale onto the object (its resourceVersion a
 * precondition); *out the new Scale. */
int kb_k8s_scale_put(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  const cJSON *scale, unsigned flags, cJSON **out, kb_k8s_error *err);
int kb_k8s_scale_patch(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                    kb_k8s_patch_type type, const char *body, size_t len, unsigned flags,
                    cJSON **out, kb_k8s_error *err);
/* The review answered: the request with its status. deny: AlwaysDeny. */
cJSON *kb_k8s_review(const kb_k8s_res *res, const cJSON *body, int deny, kb_k8s_error *err);

#endif
