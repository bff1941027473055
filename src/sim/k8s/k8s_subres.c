/* The scale subresource of Deployments and ReplicaSets (autoscaling/v1
 * Scale: spec.replicas, status.replicas and status.selector as text), and
 * the self reviews kubectl auth asks for: SelfSubjectAccessReview
 * (allowed for everything unless the simulator's authorization is
 * AlwaysDeny) and SelfSubjectReview (the user the simulator's kubeconfig
 * acts as). Neither review is stored, as on a real apiserver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"
#include "k8s_subres.h"

int kb_k8s_has_scale(const kb_k8s_res *res) {
  return !strcmp(res->group, "apps") &&
         (!strcmp(res->resource, "deployments") || !strcmp(res->resource, "replicasets"));
}

int kb_k8s_is_review(const kb_k8s_res *res) {
  return !strcmp(res->resource, "selfsubjectaccessreviews") ||
         !strcmp(res->resource, "selfsubjectreviews");
}

static cJSON *scale_of(const cJSON *obj) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "kind", "Scale");
  cJSON_AddStringToObject(s, "apiVersion", "autoscaling/v1");
  cJSON *md = cJSON_AddObjectToObject(s, "metadata");
  static const char *keep[] = {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"};
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
    if (kb_k8s_meta_str(obj, keep[i])) cJSON_AddStringToObject(md, keep[i], kb_k8s_meta_str(obj, keep[i]));
  cJSON_AddNumberToObject(cJSON_AddObjectToObject(s, "spec"), "replicas",
                          kb_k8s_path_num(obj, "spec.replicas", 1));
  cJSON *st = cJSON_AddObjectToObject(s, "status");
  cJSON_AddNumberToObject(st, "replicas", kb_k8s_path_num(obj, "status.replicas", 0));
  char sel[2048];
  if (!kb_k8s_selector_text(kb_k8s_path(obj, "spec.selector"), sel, sizeof sel))
    cJSON_AddStringToObject(st, "selector", sel);
  return s;
}

cJSON *kb_k8s_scale_get(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                     kb_k8s_error *err) {
  const cJSON *obj = kb_k8s_peek(st, res, ns, name);
  if (!obj) {
    char q[160];
    kb_k8s_qualified(res, q, sizeof q);
    kb_k8s_error_set(err, 404, "NotFound", "%s \"%s\" not found", q, name);
    snprintf(err->name, sizeof err->name, "%s", name);
    return NULL;
  }
  return scale_of(obj);
}

int kb_k8s_scale_put(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                  const cJSON *scale, unsigned flags, cJSON **out, kb_k8s_error *err) {
  const cJSON *rep = kb_k8s_path(scale, "spec.replicas");
  if (!cJSON_IsNumber(rep) || rep->valuedouble < 0)
    return kb_k8s_error_set(err, 422, "Invalid",
                            "Scale.autoscaling \"%s\" is invalid: spec.replicas: Invalid value: "
                            "must be greater than or equal to 0", name);
  cJSON *p = cJSON_CreateObject();
  cJSON_AddNumberToObject(cJSON_AddObjectToObject(p, "spec"), "replicas", rep->valueint);
  const char *rv = kb_k8s_meta_str(scale, "resourceVersion");
  if (rv && *rv) cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "metadata"), "resourceVersion", rv);
  char *text = cJSON_PrintUnformatted(p);
  cJSON_Delete(p);
  if (!text) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  cJSON *obj = NULL;
  int rc = kb_k8s_patch(st, res, ns, name, KB_K8S_PATCH_MERGE, text, strlen(text), flags, &obj, err);
  free(text);
  if (rc) return rc;
  *out = scale_of(obj);
  cJSON_Delete(obj);
  return 0;
}

int kb_k8s_scale_patch(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                    kb_k8s_patch_type type, const char *body, size_t len, unsigned flags,
                    cJSON **out, kb_k8s_error *err) {
  cJSON *scale = kb_k8s_scale_get(st, res, ns, name, err);
  if (!scale) return -err->code;
  cJSON *patch = cJSON_ParseWithLength(body, len);
  int rc = 0;
  if (!patch) {
    rc = kb_k8s_error_set(err, 400, "BadRequest", "the patch is not valid JSON");
  } else if (type == KB_K8S_PATCH_JSON) {
    rc = kb_k8s_json_patch(&scale, patch, err);
  } else if (type == KB_K8S_PATCH_STRATEGIC) {
    rc = kb_k8s_strategic_patch(&scale, patch, err);
  } else {
    scale = kb_k8s_merge_patch(scale, patch);
  }
  cJSON_Delete(patch);
  if (!rc) rc = kb_k8s_scale_put(st, res, ns, name, scale, flags, out, err);
  cJSON_Delete(scale);
  return rc;
}

cJSON *kb_k8s_review(const kb_k8s_res *res, const cJSON *body, int deny, kb_k8s_error *err) {
  if (!cJSON_IsObject(body)) {
    kb_k8s_error_set(err, 400, "BadRequest", "the request body must be an object");
    return NULL;
  }
  cJSON *r = cJSON_Duplicate(body, 1);
  cJSON_DeleteItemFromObjectCaseSensitive(r, "apiVersion");
  cJSON_DeleteItemFromObjectCaseSensitive(r, "kind");
  cJSON_DeleteItemFromObjectCaseSensitive(r, "status");
  cJSON_AddStringToObject(r, "kind", res->kind);
  cJSON_AddStringToObject(r, "apiVersion", res->api_version);
  if (!cJSON_GetObjectItemCaseSensitive(r, "metadata")) cJSON_AddObjectToObject(r, "metadata");
  cJSON *st = cJSON_AddObjectToObject(r, "status");
  if (!strcmp(res->resource, "selfsubjectaccessreviews")) {
    cJSON_AddBoolToObject(st, "allowed", !deny);
    if (deny) {
      cJSON_AddBoolToObject(st, "denied", 1);
      cJSON_AddStringToObject(st, "reason", "the simulator's authorization is AlwaysDeny");
    }
  } else {
    cJSON *ui = cJSON_AddObjectToObject(st, "userInfo");
    cJSON_AddStringToObject(ui, "username", "kubernetes-admin");
    const char *groups[] = {"kubeadm:cluster-admins", "system:authenticated"};
    cJSON_AddItemToObject(ui, "groups", cJSON_CreateStringArray(groups, 2));
  }
  return r;
}
