/* The resource types the simulator serves, the CustomResourceDefinition
 * objects that describe its custom types, and the defaulting/validation the
 * real apiserver applies on create (enough for clients to see the fields
 * they expect and for a few common mistakes to be refused as Invalid). */
#include <stdio.h>
#include <string.h>

#include "k8s_apps.h"

static const kb_k8s_column workflow_cols[] = {
    {"Status", "string", ".status.phase", "Status of the workflow", 0},
    {"Age", "date", ".status.startedAt", "When the workflow was started", 0},
    {"Message", "string", ".status.message",
     "Human readable message indicating details about why the workflow is in this condition.", 0},
};
static const kb_k8s_column trainjob_cols[] = {
    {"State", "string", ".status.conditions[-1:].type", "", 0},
    {"Age", "date", ".metadata.creationTimestamp", "", 0},
};

static const kb_k8s_resdef builtins[] = {
    {"", "v1", "namespaces", "Namespace", NULL, "ns", NULL, 0, 1, 0, "status.phase", NULL, 0},
    {"", "v1", "nodes", "Node", NULL, "no", NULL, 0, 1, 0, "spec.unschedulable", NULL, 0},
    {"", "v1", "pods", "Pod", NULL, "po", "all", 1, 1, 0,
     "spec.nodeName,spec.restartPolicy,spec.schedulerName,spec.serviceAccountName,"
     "spec.hostNetwork,status.phase,status.podIP,status.nominatedNodeName",
     NULL, 0},
    {"", "v1", "configmaps", "ConfigMap", NULL, "cm", NULL, 1, 0, 0, NULL, NULL, 0},
    {"", "v1", "secrets", "Secret", NULL, NULL, NULL, 1, 0, 0, "type", NULL, 0},
    {"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", NULL, "pvc", NULL, 1, 1, 0,
     NULL, NULL, 0},
    {"", "v1", "events", "Event", NULL, "ev", NULL, 1, 0, 0,
     "involvedObject.kind,involvedObject.namespace,involvedObject.name,involvedObject.uid,"
     "involvedObject.apiVersion,involvedObject.resourceVersion,involvedObject.fieldPath,"
     "reason,reportingComponent,source,type",
     NULL, 0},
    {"", "v1", "serviceaccounts", "ServiceAccount", NULL, "sa", NULL, 1, 0, 0, NULL, NULL, 0},
    {"batch", "v1", "jobs", "Job", NULL, NULL, "all", 1, 1, 0, "status.successful", NULL, 0},
    /* disruption budgets (k8s_pdb.c; pods/eviction is served by k8s_api.c) */
    {"policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", NULL, "pdb", NULL, 1, 1, 0,
     NULL, NULL, 0},
    {"apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", NULL,
     "crd,crds", "api-extensions", 0, 1, 0, NULL, NULL, 0},
    {"argoproj.io", "v1alpha1", "workflows", "Workflow", "workflow", "wf", NULL, 1, 0, 1, NULL,
     workflow_cols, 3},
    {"argoproj.io", "v1alpha1", "workflowtemplates", "WorkflowTemplate", "workflowtemplate",
     "wftmpl", NULL, 1, 0, 1, NULL, NULL, 0},
    {"argoproj.io", "v1alpha1", "cronworkflows", "CronWorkflow", "cronworkflow", "cwf,cronwf", NULL,
     1, 0, 1, NULL, NULL, 0},
    {"kubeflow.org", "v1", "tfjobs", "TFJob", "tfjob", NULL, NULL, 1, 1, 1, NULL, trainjob_cols, 2},
    {"kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "pytorchjob", NULL, NULL, 1, 1, 1, NULL,
     trainjob_cols, 2},
    {"kubeflow.org", "v1", "mpijobs", "MPIJob", "mpijob", NULL, NULL, 1, 1, 1, NULL,
     trainjob_cols, 2},
    /* workloads, services and cluster kinds (ctl_deploy.c, ctl_replicaset.c,
     * ctl_endpoints.c, ctl_cronjob.c, ctl_nodelease.c; defaults in k8s_apps.c) */
    {"apps", "v1", "deployments", "Deployment", NULL, "deploy", "all", 1, 1, 0, NULL, NULL, 0},
    {"apps", "v1", "replicasets", "ReplicaSet", NULL, "rs", "all", 1, 1, 0, "status.replicas",
     NULL, 0},
    {"", "v1", "services", "Service", NULL, "svc", "all", 1, 1, 0, "spec.clusterIP,spec.type",
     NULL, 0},
    {"", "v1", "endpoints", "Endpoints", NULL, "ep", NULL, 1, 0, 0, NULL, NULL, 0},
    {"discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", NULL, NULL, NULL, 1, 0, 0,
     "addressType", NULL, 0},
    {"batch", "v1", "cronjobs", "CronJob", NULL, "cj", "all", 1, 1, 0, NULL, NULL, 0},
    {"coordination.k8s.io", "v1", "leases", "Lease", NULL, NULL, NULL, 1, 0, 0, NULL, NULL, 0},
    {"", "v1", "persistentvolumes", "PersistentVolume", NULL, "pv", NULL, 0, 1, 0, NULL, NULL, 0},
    {"storage.k8s.io", "v1", "storageclasses", "StorageClass", NULL, "sc", NULL, 0, 0, 0, NULL,
     NULL, 0},
    {"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", NULL, "pc", NULL, 0, 0, 0,
     NULL, NULL, 0},
    {"authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", NULL,
     NULL, NULL, 0, 0, 0, NULL, NULL, 0},
    {"authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", NULL, NULL, NULL, 0,
     0, 0, NULL, NULL, 0},
};

/* A CRD object for a custom type: names, scope, one served version whose
 * schema preserves unknown fields, printer columns, subresources. */
static cJSON *crd_for(const kb_k8s_res *r) {
  char name[256];
  snprintf(name, sizeof name, "%s.%s", r->resource, r->group);
  cJSON *crd = cJSON_CreateObject();
  cJSON_AddStringToObject(crd, "apiVersion", "apiextensions.k8s.io/v1");
  cJSON_AddStringToObject(crd, "kind", "CustomResourceDefinition");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(crd, "metadata"), "name", name);
  cJSON *spec = cJSON_AddObjectToObject(crd, "spec");
  cJSON_AddStringToObject(spec, "group", r->group);
  cJSON *names = cJSON_AddObjectToObject(spec, "names");
  cJSON_AddStringToObject(names, "kind", r->kind);
  cJSON_AddStringToObject(names, "listKind", r->list_kind);
  cJSON_AddStringToObject(names, "plural", r->resource);
  cJSON_AddStringToObject(names, "singular", r->singular);
  if (r->short_names[0]) {
    cJSON *sn = cJSON_AddArrayToObject(names, "shortNames");
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s", r->short_names);
    for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save))
      cJSON_AddItemToArray(sn, cJSON_CreateString(t));
  }
  cJSON_AddStringToObject(spec, "scope", r->namespaced ? "Namespaced" : "Cluster");
  cJSON *v = cJSON_CreateObject();
  cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "versions"), v);
  cJSON_AddStringToObject(v, "name", r->version);
  cJSON_AddBoolToObject(v, "served", 1);
  cJSON_AddBoolToObject(v, "storage", 1);
  cJSON *cols = cJSON_AddArrayToObject(v, "additionalPrinterColumns");
  for (size_t i = 0; i < r->n_columns; i++) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", r->columns[i].name);
    cJSON_AddStringToObject(c, "type", r->columns[i].type);
    cJSON_AddStringToObject(c, "jsonPath", r->columns[i].json_path);
    if (r->columns[i].description[0])
      cJSON_AddStringToObject(c, "description", r->columns[i].description);
    if (r->columns[i].priority) cJSON_AddNumberToObject(c, "priority", r->columns[i].priority);
    cJSON_AddItemToArray(cols, c);
  }
  cJSON *schema = cJSON_AddObjectToObject(cJSON_AddObjectToObject(v, "schema"), "openAPIV3Schema");
  cJSON_AddStringToObject(schema, "type", "object");
  cJSON_AddBoolToObject(schema, "x-kubernetes-preserve-unknown-fields", 1);
  cJSON *sub = cJSON_AddObjectToObject(v, "subresources");
  if (r->status_subresource) cJSON_AddObjectToObject(sub, "status");
  cJSON *status = cJSON_AddObjectToObject(crd, "status");
  cJSON *acc = cJSON_AddObjectToObject(status, "acceptedNames");
  cJSON_AddStringToObject(acc, "kind", r->kind);
  cJSON_AddStringToObject(acc, "plural", r->resource);
  cJSON *cond = cJSON_CreateObject();
  cJSON_AddStringToObject(cond, "type", "Established");
  cJSON_AddStringToObject(cond, "status", "True");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(status, "conditions"), cond);
  return crd;
}

static int create_simple(kb_k8s_store *st, const char *resource, const char *ns,
                         const char *name) {
  const kb_k8s_res *r = kb_k8s_store_lookup(st, "", "v1", resource);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "metadata"), "name", name);
  kb_k8s_error e;
  int rc = r ? kb_k8s_create(st, r, ns, o, 0, NULL, &e) : -500;
  cJSON_Delete(o);
  return rc == -409 ? 0 : rc;
}

int kb_k8s_store_add_builtins(kb_k8s_store *st) {
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
    if (!kb_k8s_store_add_resource(st, &builtins[i]) &&
        !kb_k8s_store_lookup(st, builtins[i].group, builtins[i].version, builtins[i].resource))
      return -500;
  const kb_k8s_res *crds =
      kb_k8s_store_lookup(st, "apiextensions.k8s.io", "v1", "customresourcedefinitions");
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    if (!r->custom) continue;
    cJSON *crd = crd_for(r);
    kb_k8s_error e;
    int rc = crd ? kb_k8s_create(st, crds, NULL, crd, 0, NULL, &e) : -500;
    cJSON_Delete(crd);
    if (rc && rc != -409) return rc;
  }
  static const char *namespaces[] = {"default", "kube-system", "kube-public", "kube-node-lease",
                                     "kubeflow"};
  for (size_t i = 0; i < 5; i++) {
    int rc = create_simple(st, "namespaces", NULL, namespaces[i]);
    if (!rc) rc = create_simple(st, "serviceaccounts", namespaces[i], "default");
    if (rc) return rc;
  }
  return kb_k8s_apps_seed(st);
}

/* ---- defaulting ------------------------------------------------------------ */

cJSON *kb_k8s_obj_child(cJSON *o, const char *key) {
  cJSON *c = cJSON_GetObjectItemCaseSensitive(o, key);
  if (cJSON_IsObject(c)) return c;
  if (c) cJSON_DeleteItemFromObjectCaseSensitive(o, key);
  return cJSON_AddObjectToObject(o, key);
}

void kb_k8s_default_str(cJSON *o, const char *key, const char *v) {
  if (o && !cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_AddStringToObject(o, key, v);
}

void kb_k8s_default_num(cJSON *o, const char *key, double v) {
  if (o && !cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_AddNumberToObject(o, key, v);
}

int kb_k8s_invalid(kb_k8s_error *err, const kb_k8s_res *res, const cJSON *obj, const char *field,
                const char *what) {
  char q[160];
  snprintf(q, sizeof q, "%s%s%s", res->kind, res->group[0] ? "." : "", res->group);
  return kb_k8s_error_set(err, 422, "Invalid", "%s \"%s\" is invalid: %s: %s", q,
                          kb_k8s_meta_str(obj, "name"), field, what);
}

int kb_k8s_check_containers(const kb_k8s_res *res, const cJSON *obj, const cJSON *pod_spec,
                            const char *prefix, kb_k8s_error *err) {
  const cJSON *cs = cJSON_GetObjectItemCaseSensitive(pod_spec, "containers");
  char field[160];
  if (cJSON_GetArraySize(cs) == 0) {
    snprintf(field, sizeof field, "%scontainers", prefix);
    return kb_k8s_invalid(err, res, obj, field, "Required value");
  }
  int i = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cs) {
    if (!cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"))) {
      snprintf(field, sizeof field, "%scontainers[%d].name", prefix, i);
      return kb_k8s_invalid(err, res, obj, field, "Required value");
    }
    if (!cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "image"))) {
      snprintf(field, sizeof field, "%scontainers[%d].image", prefix, i);
      return kb_k8s_invalid(err, res, obj, field, "Required value");
    }
    i++;
  }
  return 0;
}

void kb_k8s_default_pod_spec(cJSON *spec, const char *restart) {
  kb_k8s_default_str(spec, "restartPolicy", restart);
  kb_k8s_default_num(spec, "terminationGracePeriodSeconds", 30);
  kb_k8s_default_str(spec, "dnsPolicy", "ClusterFirst");
  kb_k8s_default_str(spec, "schedulerName", "default-scheduler");
  kb_k8s_default_str(spec, "serviceAccountName", "default");
  cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(spec, "containers")) {
    kb_k8s_default_str(c, "imagePullPolicy", "IfNotPresent");
    kb_k8s_default_str(c, "terminationMessagePath", "/dev/termination-log");
    kb_k8s_default_str(c, "terminationMessagePolicy", "File");
  }
}

static int default_job(kb_k8s_store *st, const kb_k8s_res *res, cJSON *obj, int create,
                       kb_k8s_error *err) {
  (void)st;
  cJSON *spec = kb_k8s_obj_child(obj, "spec");
  cJSON *tmpl = kb_k8s_obj_child(spec, "template");
  cJSON *pspec = kb_k8s_obj_child(tmpl, "spec");
  if (!spec || !tmpl || !pspec) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  int rc = kb_k8s_check_containers(res, obj, pspec, "spec.template.spec.", err);
  if (rc) return rc;
  const char *rp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pspec, "restartPolicy"));
  if (!rp || (strcmp(rp, "Never") && strcmp(rp, "OnFailure")))
    return kb_k8s_invalid(err, res, obj, "spec.template.spec.restartPolicy",
                   rp ? "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
                      : "Required value: valid values: \"OnFailure\", \"Never\"");
  if (!create) return 0;
  kb_k8s_default_num(spec, "completions", 1);
  kb_k8s_default_num(spec, "parallelism", 1);
  kb_k8s_default_num(spec, "backoffLimit", 6);
  kb_k8s_default_str(spec, "completionMode", "NonIndexed");
  if (!cJSON_GetObjectItemCaseSensitive(spec, "suspend")) cJSON_AddBoolToObject(spec, "suspend", 0);
  kb_k8s_default_str(spec, "podReplacementPolicy", "TerminatingOrFailed");
  kb_k8s_default_pod_spec(pspec, "Never");
  const char *uid = kb_k8s_meta_str(obj, "uid"), *name = kb_k8s_meta_str(obj, "name");
  cJSON *tl = kb_k8s_obj_child(kb_k8s_obj_child(tmpl, "metadata"), "labels");
  cJSON *sel = kb_k8s_obj_child(kb_k8s_obj_child(spec, "selector"), "matchLabels");
  if (!tl || !sel) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  kb_k8s_default_str(tl, "batch.kubernetes.io/controller-uid", uid);
  kb_k8s_default_str(tl, "batch.kubernetes.io/job-name", name);
  kb_k8s_default_str(tl, "controller-uid", uid);
  kb_k8s_default_str(tl, "job-name", name);
  kb_k8s_default_str(sel, "batch.kubernetes.io/controller-uid", uid);
  cJSON *ml = kb_k8s_obj_child(kb_k8s_meta(obj), "labels");
  kb_k8s_default_str(ml, "batch.kubernetes.io/controller-uid", uid);
  kb_k8s_default_str(ml, "batch.kubernetes.io/job-name", name);
  kb_k8s_default_str(ml, "controller-uid", uid);
  kb_k8s_default_str(ml, "job-name", name);
  cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
  cJSON_AddObjectToObject(obj, "status");
  return 0;
}

int kb_k8s_immutable(const kb_k8s_res *res, const cJSON *old, const cJSON *next, kb_k8s_error *err) {
  if (strcmp(res->group, "batch") || strcmp(res->resource, "jobs")) return 0;
  /* the Job fields the apiserver refuses to change once created */
  static const char *fields[] = {"template", "selector", "completionMode"};
  const cJSON *os = cJSON_GetObjectItemCaseSensitive(old, "spec");
  const cJSON *ns = cJSON_GetObjectItemCaseSensitive(next, "spec");
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(os, fields[i]);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(ns, fields[i]);
    if ((a || b) && !(a && b && cJSON_Compare(a, b, 1))) {
      char field[64], what[96];
      snprintf(field, sizeof field, "spec.%s", fields[i]);
      snprintf(what, sizeof what, "Invalid value: %s: field is immutable",
               b ? "the new value" : "null");
      return kb_k8s_invalid(err, res, next, field, what);
    }
  }
  return 0;
}

int kb_k8s_default(kb_k8s_store *st, const kb_k8s_res *res, cJSON *obj, int create,
                kb_k8s_error *err) {
  const char *g = res->group, *r = res->resource;
  if (!strcmp(g, "batch") && !strcmp(r, "jobs")) return default_job(st, res, obj, create, err);
  int rc = kb_k8s_default_apps(st, res, obj, create, err);
  if (rc != 1) return rc;
  if (g[0]) {
    if (create && res->status_subresource) cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    return 0;
  }
  if (!strcmp(r, "pods")) {
    cJSON *spec = kb_k8s_obj_child(obj, "spec");
    rc = kb_k8s_check_containers(res, obj, spec, "spec.", err);
    if (rc || !create) return rc;
    kb_k8s_default_pod_spec(spec, "Always");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON *status = cJSON_AddObjectToObject(obj, "status");
    kb_k8s_default_str(status, "phase", "Pending");
    kb_k8s_default_str(status, "qosClass", "BestEffort");
  } else if (!strcmp(r, "namespaces") && create) {
    cJSON *spec = kb_k8s_obj_child(obj, "spec");
    if (spec && !cJSON_GetObjectItemCaseSensitive(spec, "finalizers"))
      cJSON_AddItemToObject(spec, "finalizers", cJSON_CreateStringArray((const char *[]){"kubernetes"}, 1));
    cJSON *status = kb_k8s_obj_child(obj, "status");
    kb_k8s_default_str(status, "phase", "Active");
    cJSON *labels = kb_k8s_obj_child(kb_k8s_meta(obj), "labels");
    kb_k8s_default_str(labels, "kubernetes.io/metadata.name", kb_k8s_meta_str(obj, "name"));
  } else if (!strcmp(r, "secrets")) {
    kb_k8s_default_str(obj, "type", "Opaque");
  } else if (!strcmp(r, "persistentvolumeclaims") && create) {
    kb_k8s_default_str(kb_k8s_obj_child(obj, "status"), "phase", "Pending");
  }
  return 0;
}
