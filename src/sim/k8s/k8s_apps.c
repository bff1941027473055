/* Defaulting and validation on create/update for the workload, service and
 * cluster kinds (apps/v1 Deployment and ReplicaSet, v1 Service with its
 * ClusterIP allocation, batch/v1 CronJob, v1 PersistentVolume), as the
 * 1.32 apiserver applies them: the fields clients read back are there,
 * and the common mistakes (no selector, a template whose labels the
 * selector does not match, a bad schedule) are 422 Invalid. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_apps.h"
#include "sim_cron.h"

/* Every matchLabels pair of the selector is among the template's labels. */
static int selector_matches(const cJSON *sel, const cJSON *labels) {
  const cJSON *ml = cJSON_GetObjectItemCaseSensitive(sel, "matchLabels"), *kv;
  cJSON_ArrayForEach(kv, ml) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(labels, kv->string));
    if (!v || !cJSON_IsString(kv) || strcmp(v, kv->valuestring)) return 0;
  }
  return 1;
}

/* Deployment and ReplicaSet: selector required and matching the template. */
static int default_replicated(const kb_k8s_res *res, cJSON *obj, int create, kb_k8s_error *err) {
  cJSON *spec = kb_k8s_obj_child(obj, "spec");
  cJSON *tmpl = kb_k8s_obj_child(spec, "template");
  cJSON *tmd = kb_k8s_obj_child(tmpl, "metadata");
  cJSON *pspec = kb_k8s_obj_child(tmpl, "spec");
  if (!spec || !tmpl || !tmd || !pspec) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  const cJSON *sel = cJSON_GetObjectItemCaseSensitive(spec, "selector");
  if (!cJSON_IsObject(sel) || !sel->child)
    return kb_k8s_invalid(err, res, obj, "spec.selector", "Required value");
  if (!selector_matches(sel, cJSON_GetObjectItemCaseSensitive(tmd, "labels")))
    return kb_k8s_invalid(err, res, obj, "spec.template.metadata.labels",
                   "Invalid value: the template's labels: `selector` does not match template "
                   "`labels`");
  int rc = kb_k8s_check_containers(res, obj, pspec, "spec.template.spec.", err);
  if (rc) return rc;
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(pspec, "restartPolicy");
  if (cJSON_IsString(rp) && strcmp(rp->valuestring, "Always"))
    return kb_k8s_invalid(err, res, obj, "spec.template.spec.restartPolicy",
                   "Unsupported value: only \"Always\" is supported");
  const cJSON *rep = cJSON_GetObjectItemCaseSensitive(spec, "replicas");
  if (rep && (!cJSON_IsNumber(rep) || rep->valuedouble < 0))
    return kb_k8s_invalid(err, res, obj, "spec.replicas",
                   "Invalid value: must be greater than or equal to 0");
  kb_k8s_default_num(spec, "replicas", 1);
  kb_k8s_default_num(spec, "minReadySeconds", 0);
  kb_k8s_default_pod_spec(pspec, "Always");
  if (!strcmp(res->resource, "deployments")) {
    /* a Deployment's alone: a ReplicaSet has no revision history */
    kb_k8s_default_num(spec, "revisionHistoryLimit", 10);
    kb_k8s_default_num(spec, "progressDeadlineSeconds", 600);
    cJSON *strat = kb_k8s_obj_child(spec, "strategy");
    kb_k8s_default_str(strat, "type", "RollingUpdate");
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(strat, "type"));
    if (type && !strcmp(type, "RollingUpdate")) {
      cJSON *ru = kb_k8s_obj_child(strat, "rollingUpdate");
      kb_k8s_default_str(ru, "maxSurge", "25%");
      kb_k8s_default_str(ru, "maxUnavailable", "25%");
    } else if (!type || strcmp(type, "Recreate")) {
      return kb_k8s_invalid(err, res, obj, "spec.strategy.type",
                     "Unsupported value: supported values: \"Recreate\", \"RollingUpdate\"");
    }
  }
  if (create) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON_AddObjectToObject(obj, "status");
  }
  return 0;
}

/* ---- Service ---- */

int kb_k8s_cidr_parse(const char *cidr, uint32_t *base, uint32_t *size) {
  char ip[64];
  const char *slash = cidr ? strchr(cidr, '/') : NULL;
  if (!slash || (size_t)(slash - cidr) >= sizeof ip) return -1;
  memcpy(ip, cidr, (size_t)(slash - cidr));
  ip[slash - cidr] = 0;
  struct in_addr a;
  char *end;
  long bits = strtol(slash + 1, &end, 10);
  if (inet_pton(AF_INET, ip, &a) != 1 || *end || bits < 8 || bits > 30) return -1;
  *size = 1u << (32 - bits);
  *base = ntohl(a.s_addr) & ~(*size - 1);
  return 0;
}

void kb_k8s_ip_str(uint32_t ip, char out[16]) {
  snprintf(out, 16, "%u.%u.%u.%u", ip >> 24, ip >> 16 & 255, ip >> 8 & 255, ip & 255);
}

/* The lowest free address of the range after its first (which is the
 * `kubernetes` Service's, as the apiserver reserves it). */
static int allocate_ip(kb_k8s_store *st, const kb_k8s_res *res, char out[16]) {
  uint32_t base, size;
  if (kb_k8s_cidr_parse(st->service_cidr, &base, &size)) return -1;
  if (size > 65536) size = 65536; /* the first 64Ki addresses are plenty */
  uint8_t *used = calloc(size, 1);
  if (!used) return -1;
  cJSON *list = NULL;
  kb_k8s_list_opts lo = {0};
  if (kb_k8s_list(st, res, &lo, &list, NULL) == 0) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items")) {
      const char *ip = cJSON_GetStringValue(kb_k8s_path(it, "spec.clusterIP"));
      struct in_addr a;
      if (ip && inet_pton(AF_INET, ip, &a) == 1 && ntohl(a.s_addr) - base < size)
        used[ntohl(a.s_addr) - base] = 1;
    }
  }
  cJSON_Delete(list);
  int rc = -1;
  for (uint32_t i = 2; i + 1 < size && rc; i++)
    if (!used[i]) kb_k8s_ip_str(base + i, out), rc = 0;
  free(used);
  return rc;
}

static int default_service(kb_k8s_store *st, const kb_k8s_res *res, cJSON *obj, int create,
                           kb_k8s_error *err) {
  cJSON *spec = kb_k8s_obj_child(obj, "spec");
  if (!spec) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  kb_k8s_default_str(spec, "type", "ClusterIP");
  const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "type"));
  if (!type || (strcmp(type, "ClusterIP") && strcmp(type, "NodePort") &&
                strcmp(type, "LoadBalancer") && strcmp(type, "ExternalName")))
    return kb_k8s_invalid(err, res, obj, "spec.type",
                   "Unsupported value: supported values: \"ClusterIP\", \"ExternalName\", "
                   "\"LoadBalancer\", \"NodePort\"");
  int i = 0;
  cJSON *p;
  cJSON *ports = cJSON_GetObjectItemCaseSensitive(spec, "ports");
  if (strcmp(type, "ExternalName") && cJSON_GetArraySize(ports) == 0)
    return kb_k8s_invalid(err, res, obj, "spec.ports", "Required value");
  cJSON_ArrayForEach(p, ports) {
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(p, "port");
    char field[64];
    snprintf(field, sizeof field, "spec.ports[%d].port", i++);
    if (!cJSON_IsNumber(port) || port->valueint < 1 || port->valueint > 65535)
      return kb_k8s_invalid(err, res, obj, field, "Invalid value: must be between 1 and 65535, inclusive");
    kb_k8s_default_str(p, "protocol", "TCP");
    kb_k8s_default_num(p, "targetPort", port->valueint);
  }
  if (cJSON_GetArraySize(ports) > 1) {
    i = 0;
    cJSON_ArrayForEach(p, ports) {
      char field[64];
      snprintf(field, sizeof field, "spec.ports[%d].name", i++);
      if (!cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name")))
        return kb_k8s_invalid(err, res, obj, field, "Required value");
    }
  }
  if (!create) return 0;
  kb_k8s_default_str(spec, "sessionAffinity", "None");
  kb_k8s_default_str(spec, "internalTrafficPolicy", "Cluster");
  const char *cip = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "clusterIP"));
  if (strcmp(type, "ExternalName") && (!cip || !*cip)) {
    char ip[16];
    if (allocate_ip(st, res, ip))
      return kb_k8s_error_set(err, 500, "InternalError",
                              "failed to allocate a serviceIP: range is full");
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "clusterIP");
    cJSON_AddStringToObject(spec, "clusterIP", ip);
    cip = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "clusterIP"));
  }
  if (cip && !cJSON_GetObjectItemCaseSensitive(spec, "clusterIPs"))
    cJSON_AddItemToObject(spec, "clusterIPs", cJSON_CreateStringArray(&cip, 1));
  if (strcmp(type, "ExternalName")) {
    const char *fam = "IPv4";
    if (!cJSON_GetObjectItemCaseSensitive(spec, "ipFamilies"))
      cJSON_AddItemToObject(spec, "ipFamilies", cJSON_CreateStringArray(&fam, 1));
    kb_k8s_default_str(spec, "ipFamilyPolicy", "SingleStack");
  }
  cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
  cJSON_AddObjectToObject(cJSON_AddObjectToObject(obj, "status"), "loadBalancer");
  return 0;
}

/* ---- CronJob ---- */

static int default_cronjob(const kb_k8s_res *res, cJSON *obj, int create, kb_k8s_error *err) {
  cJSON *spec = kb_k8s_obj_child(obj, "spec");
  if (!spec) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  const char *sched = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "schedule"));
  if (!sched || !*sched) return kb_k8s_invalid(err, res, obj, "spec.schedule", "Required value");
  if (!(kb_sim_cron_valid(sched) && kb_sim_cron_fields(sched) != 6)) {
    char what[300];
    snprintf(what, sizeof what, "Invalid value: \"%.200s\": unparseable schedule", sched);
    return kb_k8s_invalid(err, res, obj, "spec.schedule", what);
  }
  cJSON *jt = kb_k8s_obj_child(spec, "jobTemplate");
  cJSON *jspec = kb_k8s_obj_child(jt, "spec");
  cJSON *tmpl = kb_k8s_obj_child(jspec, "template");
  cJSON *pspec = kb_k8s_obj_child(tmpl, "spec");
  if (!jt || !jspec || !tmpl || !pspec) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  int rc = kb_k8s_check_containers(res, obj, pspec, "spec.jobTemplate.spec.template.spec.", err);
  if (rc) return rc;
  const char *rp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pspec, "restartPolicy"));
  if (!rp || (strcmp(rp, "Never") && strcmp(rp, "OnFailure")))
    return kb_k8s_invalid(err, res, obj, "spec.jobTemplate.spec.template.spec.restartPolicy",
                   "Required value: valid values: \"OnFailure\", \"Never\"");
  const char *cp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "concurrencyPolicy"));
  if (cp && strcmp(cp, "Allow") && strcmp(cp, "Forbid") && strcmp(cp, "Replace"))
    return kb_k8s_invalid(err, res, obj, "spec.concurrencyPolicy",
                   "Unsupported value: supported values: \"Allow\", \"Forbid\", \"Replace\"");
  kb_k8s_default_str(spec, "concurrencyPolicy", "Allow");
  if (!cJSON_GetObjectItemCaseSensitive(spec, "suspend")) cJSON_AddBoolToObject(spec, "suspend", 0);
  kb_k8s_default_num(spec, "successfulJobsHistoryLimit", 3);
  kb_k8s_default_num(spec, "failedJobsHistoryLimit", 1);
  kb_k8s_default_num(jspec, "backoffLimit", 6);
  kb_k8s_default_num(jspec, "completions", 1);
  kb_k8s_default_num(jspec, "parallelism", 1);
  kb_k8s_default_pod_spec(pspec, "Never");
  if (create) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON_AddObjectToObject(obj, "status");
  }
  return 0;
}

int kb_k8s_default_apps(kb_k8s_store *st, const kb_k8s_res *res, cJSON *obj, int create,
                     kb_k8s_error *err) {
  const char *g = res->group, *r = res->resource;
  if (!strcmp(g, "apps") && (!strcmp(r, "deployments") || !strcmp(r, "replicasets")))
    return default_replicated(res, obj, create, err);
  if (!strcmp(g, "batch") && !strcmp(r, "cronjobs")) return default_cronjob(res, obj, create, err);
  if (!g[0] && !strcmp(r, "services")) return default_service(st, res, obj, create, err);
  if (!g[0] && !strcmp(r, "persistentvolumes") && create) {
    cJSON *spec = kb_k8s_obj_child(obj, "spec");
    kb_k8s_default_str(spec, "persistentVolumeReclaimPolicy", "Retain");
    kb_k8s_default_str(spec, "volumeMode", "Filesystem");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    kb_k8s_default_str(cJSON_AddObjectToObject(obj, "status"), "phase", "Available");
    return 0;
  }
  if (!strcmp(g, "storage.k8s.io") && !strcmp(r, "storageclasses") && create) {
    kb_k8s_default_str(obj, "reclaimPolicy", "Delete");
    kb_k8s_default_str(obj, "volumeBindingMode", "Immediate");
    return 0;
  }
  if (!strcmp(g, "scheduling.k8s.io") && !strcmp(r, "priorityclasses")) {
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(obj, "value")))
      return kb_k8s_invalid(err, res, obj, "value", "Required value");
    kb_k8s_default_str(obj, "preemptionPolicy", "PreemptLowerPriority");
    return 0;
  }
  return 1; /* not one of these kinds */
}

/* ---- seed objects ---- */

static int seed(kb_k8s_store *st, const char *group, const char *resource, const char *ns,
                const char *json) {
  const kb_k8s_res *r = NULL;
  for (size_t i = 0; i < kb_k8s_store_resource_count(st) && !r; i++) {
    const kb_k8s_res *c = kb_k8s_store_resource_at(st, i);
    if (!strcmp(c->group, group) && !strcmp(c->resource, resource)) r = c;
  }
  cJSON *o = cJSON_Parse(json);
  kb_k8s_error e;
  int rc = r && o ? kb_k8s_create(st, r, ns, o, 0, NULL, &e) : -500;
  cJSON_Delete(o);
  return rc == -409 ? 0 : rc;
}

int kb_k8s_apps_seed(kb_k8s_store *st) {
  uint32_t base, size;
  char ip[16], svc[600];
  if (kb_k8s_cidr_parse(st->service_cidr, &base, &size)) return -500;
  kb_k8s_ip_str(base + 1, ip);
  snprintf(svc, sizeof svc,
           "{\"metadata\":{\"name\":\"kubernetes\",\"labels\":{\"component\":\"apiserver\","
           "\"provider\":\"kubernetes\"}},\"spec\":{\"clusterIP\":\"%s\",\"ports\":[{\"name\":"
           "\"https\",\"port\":443,\"protocol\":\"TCP\",\"targetPort\":6443}]}}",
           ip);
  int rc = seed(st, "storage.k8s.io", "storageclasses", NULL,
                "{\"metadata\":{\"name\":\"standard\",\"annotations\":{"
                "\"storageclass.kubernetes.io/is-default-class\":\"true\"}},"
                "\"provisioner\":\"rancher.io/local-path\",\"reclaimPolicy\":\"Delete\","
                "\"volumeBindingMode\":\"WaitForFirstConsumer\"}");
  if (!rc)
    rc = seed(st, "scheduling.k8s.io", "priorityclasses", NULL,
              "{\"metadata\":{\"name\":\"system-cluster-critical\"},\"value\":2000000000,"
              "\"globalDefault\":false,\"description\":\"Used for system critical pods that "
              "must run in the cluster, but can be moved to another node if necessary.\"}");
  if (!rc)
    rc = seed(st, "scheduling.k8s.io", "priorityclasses", NULL,
              "{\"metadata\":{\"name\":\"system-node-critical\"},\"value\":2000001000,"
              "\"globalDefault\":false,\"description\":\"Used for system critical pods that "
              "must not be moved from their current node.\"}");
  if (!rc) rc = seed(st, "", "services", "default", svc);
  return rc;
}
