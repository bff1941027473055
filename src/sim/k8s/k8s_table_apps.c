/* Table columns of the workload, service and cluster kinds, as
 * pkg/printers/internalversion/printers.go prints them: Deployment (READY
 * UP-TO-DATE AVAILABLE), ReplicaSet (DESIRED CURRENT READY), Service (TYPE
 * CLUSTER-IP EXTERNAL-IP PORT(S)), Endpoints, EndpointSlice, CronJob
 * (SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE), Lease (HOLDER), PV,
 * StorageClass, PriorityClass, each with AGE. */
#include <stdio.h>
#include <string.h>

#include "k8s_table.h"

#define NAME {"Name", "string", "name", "Name must be unique within a namespace.", 0}
#define AGE {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0}
#define S(n, d) {n, "string", "", d, 0}
#define I(n, d) {n, "integer", "", d, 0}

static const k8s_col deploy_cols[] = {
    NAME, S("Ready", "Number of the pod with ready state"),
    I("Up-to-date", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
    I("Available", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
    AGE};
static const k8s_col rs_cols[] = {
    NAME, I("Desired", "Number of desired pods."), I("Current", "Number of actual pods."),
    I("Ready", "The number of ready replicas for this replica set."), AGE};
static const k8s_col svc_cols[] = {
    NAME, S("Type", "The type of the service."), S("Cluster-IP", "The IP address of the service."),
    S("External-IP", "The external IP address of the service."),
    S("Port(s)", "The ports of the service."), AGE};
static const k8s_col ep_cols[] = {NAME, S("Endpoints", "The endpoints of the service."), AGE};
static const k8s_col eps_cols[] = {
    NAME, S("AddressType", "The type of address."), S("Ports", "The ports of the slice."),
    S("Endpoints", "The addresses of the slice."), AGE};
static const k8s_col cj_cols[] = {
    NAME, S("Schedule", "The schedule."), S("Timezone", "The time zone of the schedule."),
    S("Suspend", "Whether it is suspended."), I("Active", "The number of active jobs."),
    S("Last Schedule", "When it last ran."), AGE};
static const k8s_col lease_cols[] = {NAME, S("Holder", "The holder of the lease."), AGE};
static const k8s_col pv_cols[] = {
    NAME, S("Capacity", "The capacity."), S("Access Modes", "The access modes."),
    S("Reclaim Policy", "The reclaim policy."), S("Status", "The phase."),
    S("Claim", "The bound claim."), S("StorageClass", "The storage class."), AGE};
static const k8s_col sc_cols[] = {
    NAME, S("Provisioner", "The provisioner."), S("ReclaimPolicy", "The reclaim policy."),
    S("VolumeBindingMode", "The volume binding mode."),
    S("AllowVolumeExpansion", "Whether volumes can be expanded."), AGE};
static const k8s_col pc_cols[] = {
    NAME, I("Value", "The priority."), S("Global-Default", "Whether it is the default."),
    S("Preemption-Policy", "The preemption policy."), AGE};
static const k8s_col age_cols[] = {NAME, AGE};

static int is(const kb_k8s_res *r, const char *group, const char *resource) {
  return !strcmp(r->group, group) && !strcmp(r->resource, resource);
}

const k8s_col *kb_k8s_apps_columns(const kb_k8s_res *r, size_t *n) {
#define RET(a) return (*n = sizeof a / sizeof a[0], a)
  if (is(r, "apps", "deployments")) RET(deploy_cols);
  if (is(r, "apps", "replicasets")) RET(rs_cols);
  if (is(r, "", "services")) RET(svc_cols);
  if (is(r, "", "endpoints")) RET(ep_cols);
  if (is(r, "discovery.k8s.io", "endpointslices")) RET(eps_cols);
  if (is(r, "batch", "cronjobs")) RET(cj_cols);
  if (is(r, "coordination.k8s.io", "leases")) RET(lease_cols);
  if (is(r, "", "persistentvolumes")) RET(pv_cols);
  if (is(r, "storage.k8s.io", "storageclasses")) RET(sc_cols);
  if (is(r, "scheduling.k8s.io", "priorityclasses")) RET(pc_cols);
  if (is(r, "authorization.k8s.io", "selfsubjectaccessreviews") ||
      is(r, "authentication.k8s.io", "selfsubjectreviews"))
    RET(age_cols);
  return NULL;
#undef RET
}

static const char *str(const cJSON *o, const char *path) {
  return cJSON_GetStringValue(kb_k8s_path(o, path));
}

static int num(const cJSON *o, const char *path) {
  const cJSON *v = kb_k8s_path(o, path);
  return cJSON_IsNumber(v) ? v->valueint : 0;
}

static void add(cJSON *cells, const char *s) { cJSON_AddItemToArray(cells, cJSON_CreateString(s ? s : "")); }
static void addn(cJSON *cells, int v) { cJSON_AddItemToArray(cells, cJSON_CreateNumber(v)); }

static void add_since(cJSON *cells, double now, const char *ts) {
  char buf[32];
  double t = ts ? kb_k8s_parse_time(ts) : -1;
  if (t < 0) snprintf(buf, sizeof buf, "<none>");
  else kb_k8s_human_duration(now - t, buf, sizeof buf);
  add(cells, buf);
}

static void add_age(cJSON *cells, double now, const cJSON *o) {
  add_since(cells, now, str(o, "metadata.creationTimestamp"));
}

/* "80/TCP,443:30443/TCP" */
static void ports_text(const cJSON *ports, char *out, size_t n) {
  size_t at = 0;
  out[0] = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, ports) {
    int w = num(p, "nodePort") ? snprintf(out + at, n - at, "%s%d:%d/%s", at ? "," : "", num(p, "port"),
                                          num(p, "nodePort"), str(p, "protocol") ? str(p, "protocol") : "TCP")
                               : snprintf(out + at, n - at, "%s%d/%s", at ? "," : "", num(p, "port"),
                                          str(p, "protocol") ? str(p, "protocol") : "TCP");
    if (w < 0 || (size_t)w >= n - at) break;
    at += (size_t)w;
  }
  if (!at) snprintf(out, n, "<none>");
}

/* "10.244.0.5:8080,10.244.0.6:8080 + 1 more..." as printers.go shortens it */
static void endpoints_text(const cJSON *o, char *out, size_t n) {
  size_t at = 0;
  int shown = 0, total = 0;
  out[0] = 0;
  const cJSON *s, *a, *p;
  cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(o, "subsets"))
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(s, "addresses"))
      cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(s, "ports")) {
        total++;
        if (shown == 3) continue;
        int w = snprintf(out + at, n - at, "%s%s:%d", at ? "," : "", str(a, "ip"), num(p, "port"));
        if (w < 0 || (size_t)w >= n - at) continue;
        at += (size_t)w, shown++;
      }
  if (!total) snprintf(out, n, "<none>");
  else if (total > shown) snprintf(out + at, n - at, " + %d more...", total - shown);
}

int kb_k8s_apps_cells(const kb_k8s_res *r, cJSON *cells, const cJSON *o, double now) {
  char buf[512];
  if (is(r, "apps", "deployments")) {
    snprintf(buf, sizeof buf, "%d/%d", num(o, "status.readyReplicas"), num(o, "spec.replicas"));
    add(cells, buf);
    addn(cells, num(o, "status.updatedReplicas"));
    addn(cells, num(o, "status.availableReplicas"));
  } else if (is(r, "apps", "replicasets")) {
    addn(cells, num(o, "spec.replicas"));
    addn(cells, num(o, "status.replicas"));
    addn(cells, num(o, "status.readyReplicas"));
  } else if (is(r, "", "services")) {
    add(cells, str(o, "spec.type"));
    add(cells, str(o, "spec.clusterIP") ? str(o, "spec.clusterIP") : "None");
    add(cells, "<none>");
    ports_text(kb_k8s_path(o, "spec.ports"), buf, sizeof buf);
    add(cells, buf);
  } else if (is(r, "", "endpoints")) {
    endpoints_text(o, buf, sizeof buf);
    add(cells, buf);
  } else if (is(r, "discovery.k8s.io", "endpointslices")) {
    add(cells, str(o, "addressType"));
    const cJSON *p, *e;
    size_t at = 0;
    buf[0] = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(o, "ports")) {
      int w = snprintf(buf + at, sizeof buf - at, "%s%d", at ? "," : "", num(p, "port"));
      if (w > 0 && (size_t)w < sizeof buf - at) at += (size_t)w;
    }
    add(cells, at ? buf : "<unset>");
    at = 0;
    buf[0] = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "endpoints")) {
      const char *ip = cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "addresses"), 0));
      int w = snprintf(buf + at, sizeof buf - at, "%s%s", at ? "," : "", ip ? ip : "");
      if (w > 0 && (size_t)w < sizeof buf - at) at += (size_t)w;
    }
    add(cells, at ? buf : "<unset>");
  } else if (is(r, "batch", "cronjobs")) {
    add(cells, str(o, "spec.schedule"));
    add(cells, str(o, "spec.timeZone") ? str(o, "spec.timeZone") : "<none>");
    add(cells, cJSON_IsTrue(kb_k8s_path(o, "spec.suspend")) ? "True" : "False");
    addn(cells, cJSON_GetArraySize(kb_k8s_path(o, "status.active")));
    add_since(cells, now, str(o, "status.lastScheduleTime"));
  } else if (is(r, "coordination.k8s.io", "leases")) {
    add(cells, str(o, "spec.holderIdentity") ? str(o, "spec.holderIdentity") : "<none>");
  } else if (is(r, "", "persistentvolumes")) {
    add(cells, str(o, "spec.capacity.storage"));
    add(cells, "");
    add(cells, str(o, "spec.persistentVolumeReclaimPolicy"));
    add(cells, str(o, "status.phase"));
    const char *cn = str(o, "spec.claimRef.name"), *cns = str(o, "spec.claimRef.namespace");
    if (cn) snprintf(buf, sizeof buf, "%s/%s", cns ? cns : "", cn);
    add(cells, cn ? buf : "");
    add(cells, str(o, "spec.storageClassName"));
  } else if (is(r, "storage.k8s.io", "storageclasses")) {
    const cJSON *ann = kb_k8s_path(o, "metadata.annotations");
    const char *def = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(ann, "storageclass.kubernetes.io/is-default-class"));
    /* the name cell says "(default)", as kubectl shows it */
    cJSON *name = cJSON_GetArrayItem(cells, 0);
    if (def && !strcmp(def, "true") && cJSON_IsString(name)) {
      snprintf(buf, sizeof buf, "%s (default)", name->valuestring);
      cJSON_ReplaceItemInArray(cells, 0, cJSON_CreateString(buf));
    }
    add(cells, str(o, "provisioner"));
    add(cells, str(o, "reclaimPolicy"));
    add(cells, str(o, "volumeBindingMode"));
    add(cells, cJSON_IsTrue(kb_k8s_path(o, "allowVolumeExpansion")) ? "true" : "false");
  } else if (is(r, "scheduling.k8s.io", "priorityclasses")) {
    addn(cells, num(o, "value"));
    add(cells, cJSON_IsTrue(kb_k8s_path(o, "globalDefault")) ? "true" : "false");
    add(cells, str(o, "preemptionPolicy"));
  } else if (!kb_k8s_apps_columns(r, &(size_t){0})) {
    return 0;
  }
  add_age(cells, now, o);
  return 1;
}
