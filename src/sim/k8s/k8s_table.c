/* The meta.k8s.io/v1 Table format (what `kubectl get` prints): the column
 * sets of k/k pkg/printers/internalversion/printers.go for the built-in
 * types, and additionalPrinterColumns for custom ones. Cells are the
 * strings the apiserver renders (Age as a human duration like "5m"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_table.h"

typedef k8s_col col;

#define STR(n, d) {n, "string", "", d, 0}
#define STRW(n, d) {n, "string", "", d, 1}
static const col pod_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    STR("Status", "The aggregate status of the containers in this pod."),
    STR("Restarts", "The number of times the containers in this pod have been restarted and "
                    "when the last container in this pod has restarted."),
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
    STRW("IP", "IP address allocated to the pod."),
    STRW("Node", "Name of the Node this pod is assigned to."),
    STRW("Nominated Node", "Name of the node this pod is nominated to run on."),
    STRW("Readiness Gates", "Readiness gates of this pod."),
};
static const col job_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Status", "Status of the job."),
    STR("Completions", "The completion status of the job."),
    STR("Duration", "Time required to complete the job."),
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
    STRW("Containers", "Names of each container in the template."),
    STRW("Images", "Images referenced by each container in the template."),
    STRW("Selector", "A label query over pods that should match the pod count."),
};
static const col node_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Status", "The status of the node"),
    STR("Roles", "The roles of the node"),
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
    STR("Version", "Kubelet Version reported by the node."),
    STRW("Internal-IP", "List of internal IPs."),
    STRW("External-IP", "List of external IPs."),
    STRW("OS-Image", "OS image reported by the node."),
    STRW("Kernel-Version", "Kernel version reported by the node."),
    STRW("Container-Runtime", "Container runtime reported by the node."),
};
static const col ns_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Status", "The status of the namespace"),
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
};
static const col cm_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Data", "string", "", "Data contains the configuration data.", 0},
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
};
static const col secret_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Type", "The type of secret"),
    {"Data", "string", "", "Data contains the secret data.", 0},
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
};
static const col pvc_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Status", "Phase represents the current phase of PersistentVolumeClaim."),
    STR("Volume", "VolumeName is the binding reference to the PersistentVolume backing this "
                  "claim."),
    STR("Capacity", "Capacity represents the actual resources of the underlying volume."),
    STR("Access Modes", "AccessModes contains the desired access modes the volume should have."),
    STR("StorageClass", "StorageClassName is the name of the StorageClass required by the claim."),
    STR("VolumeAttributesClass", "The name of the VolumeAttributesClass."),
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
    STRW("VolumeMode", "volumeMode defines what type of volume is required by the claim."),
};
static const col event_cols[] = {
    STR("Last Seen", "Time when last this event was observed."),
    STR("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    STR("Reason", "This should be a short, machine understandable string that gives the reason "
                  "for the transition into the object's current status."),
    STR("Object", "The object that this event is about."),
    STR("Message", "A human-readable description of the status of this operation."),
};
static const col sa_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Secrets", "Secrets is a list of the secrets in the same namespace that pods running "
                   "using this ServiceAccount are allowed to use."),
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
};
static const col crd_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Created At", "date", "", "CreationTimestamp is a timestamp representing the server time "
                               "when this object was created.", 0},
};
static const col pdb_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Min Available", "The minimum number of pods that must be available simultaneously."),
    STR("Max Unavailable", "The maximum number of pods that may be unavailable simultaneously."),
    {"Allowed Disruptions", "integer", "", "Calculated number of pods that may be disrupted at this time.", 0},
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
};
static const col generic_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    STR("Age", "CreationTimestamp is a timestamp representing the server time when this "
               "object was created."),
};

/* ---- cell helpers ---------------------------------------------------------- */

static const char *sget(const cJSON *o, const char *path) {
  return cJSON_GetStringValue(kb_k8s_path(o, path));
}

static double nget(const cJSON *o, const char *path, double dflt) {
  const cJSON *v = kb_k8s_path(o, path);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

void kb_k8s_human_duration(double secs, char *out, size_t n) {
  if (secs < -1) {
    snprintf(out, n, "<invalid>");
    return;
  }
  if (secs < 0) secs = 0;
  long s = (long)secs, m = s / 60, h = s / 3600, d = h / 24;
  if (s < 120) snprintf(out, n, "%lds", s);
  else if (m < 10) s % 60 ? snprintf(out, n, "%ldm%lds", m, s % 60) : snprintf(out, n, "%ldm", m);
  else if (m < 180) snprintf(out, n, "%ldm", m);
  else if (h < 8) m % 60 ? snprintf(out, n, "%ldh%ldm", h, m % 60) : snprintf(out, n, "%ldh", h);
  else if (h < 48) snprintf(out, n, "%ldh", h);
  else if (h < 192) h % 24 ? snprintf(out, n, "%ldd%ldh", d, h % 24) : snprintf(out, n, "%ldd", d);
  else if (h < 24 * 365 * 2) snprintf(out, n, "%ldd", d);
  else if (h < 24 * 365 * 8)
    (d % 365) ? snprintf(out, n, "%ldy%ldd", d / 365, d % 365) : snprintf(out, n, "%ldy", d / 365);
  else snprintf(out, n, "%ldy", d / 365);
}

static void age_of(double now, const char *ts, char *out, size_t n) {
  double t = kb_k8s_parse_time(ts);
  if (t < 0) snprintf(out, n, "<unknown>");
  else kb_k8s_human_duration(now - t, out, n);
}

static void add_str(cJSON *cells, const char *s) {
  cJSON_AddItemToArray(cells, cJSON_CreateString(s ? s : ""));
}

static void add_age(cJSON *cells, double now, const cJSON *obj) {
  char buf[32];
  age_of(now, sget(obj, "metadata.creationTimestamp"), buf, sizeof buf);
  add_str(cells, buf);
}

static int map_size(const cJSON *o, const char *path) { return cJSON_GetArraySize(kb_k8s_path(o, path)); }

/* The STATUS column of `kubectl get pods`, simplified from printPod. */
static void pod_status(const cJSON *pod, char *out, size_t n, int *ready, int *total,
                       long *restarts) {
  const char *reason = sget(pod, "status.reason");
  if (!reason) reason = sget(pod, "status.phase");
  snprintf(out, n, "%s", reason ? reason : "Pending");
  *ready = 0;
  *total = map_size(pod, "spec.containers");
  *restarts = 0;
  const cJSON *cs;
  cJSON_ArrayForEach(cs, kb_k8s_path(pod, "status.containerStatuses")) {
    *restarts += (long)nget(cs, "restartCount", 0);
    const char *w = sget(cs, "state.waiting.reason");
    const cJSON *term = kb_k8s_path(cs, "state.terminated");
    if (w && *w) {
      snprintf(out, n, "%s", w);
    } else if (term) {
      const char *r = sget(term, "reason");
      if (r && *r) snprintf(out, n, "%s", r);
      else snprintf(out, n, "ExitCode:%d", (int)nget(term, "exitCode", 0));
    } else if (cJSON_IsTrue(kb_k8s_path(cs, "ready")) && kb_k8s_path(cs, "state.running")) {
      (*ready)++;
    }
  }
  if (sget(pod, "metadata.deletionTimestamp")) snprintf(out, n, "Terminating");
}

static void pod_cells(cJSON *cells, const cJSON *o, double now) {
  char status[64], buf[64];
  int ready, total;
  long restarts;
  pod_status(o, status, sizeof status, &ready, &total, &restarts);
  snprintf(buf, sizeof buf, "%d/%d", ready, total);
  add_str(cells, buf);
  add_str(cells, status);
  cJSON_AddItemToArray(cells, cJSON_CreateNumber((double)restarts));
  add_age(cells, now, o);
  const char *ip = sget(o, "status.podIP");
  const char *node = sget(o, "spec.nodeName");
  const char *nom = sget(o, "status.nominatedNodeName");
  add_str(cells, ip && *ip ? ip : "<none>");
  add_str(cells, node && *node ? node : "<none>");
  add_str(cells, nom && *nom ? nom : "<none>");
  add_str(cells, "<none>");
}

static int has_condition(const cJSON *o, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, kb_k8s_path(o, "status.conditions")) {
    const char *t = sget(c, "type"), *s = sget(c, "status");
    if (t && s && !strcmp(t, type) && !strcmp(s, "True")) return 1;
  }
  return 0;
}

static void join_field(const cJSON *list, const char *field, char *out, size_t n) {
  size_t used = 0;
  out[0] = '\0';
  const cJSON *c;
  cJSON_ArrayForEach(c, list) {
    const char *v = sget(c, field);
    if (v && used < n) used += (size_t)snprintf(out + used, n - used, "%s%s", used ? "," : "", v);
  }
}

static void job_cells(cJSON *cells, const cJSON *o, double now) {
  char buf[512];
  const char *status = "Running";
  if (has_condition(o, "Complete")) status = "Complete";
  else if (has_condition(o, "Failed")) status = "Failed";
  else if (sget(o, "metadata.deletionTimestamp")) status = "Terminating";
  else if (has_condition(o, "SuccessCriteriaMet")) status = "SuccessCriteriaMet";
  else if (has_condition(o, "FailureTarget")) status = "FailureTarget";
  else if (cJSON_IsTrue(kb_k8s_path(o, "spec.suspend"))) status = "Suspended";
  add_str(cells, status);
  const cJSON *comp = kb_k8s_path(o, "spec.completions");
  double succeeded = nget(o, "status.succeeded", 0);
  if (cJSON_IsNumber(comp)) snprintf(buf, sizeof buf, "%d/%d", (int)succeeded, comp->valueint);
  else snprintf(buf, sizeof buf, "%d/1 of %d", (int)succeeded, (int)nget(o, "spec.parallelism", 1));
  add_str(cells, buf);
  double start = kb_k8s_parse_time(sget(o, "status.startTime"));
  double end = kb_k8s_parse_time(sget(o, "status.completionTime"));
  if (start < 0) buf[0] = '\0';
  else kb_k8s_human_duration((end >= 0 ? end : now) - start, buf, sizeof buf);
  add_str(cells, buf);
  add_age(cells, now, o);
  const cJSON *cs = kb_k8s_path(o, "spec.template.spec.containers");
  join_field(cs, "name", buf, sizeof buf);
  add_str(cells, buf);
  join_field(cs, "image", buf, sizeof buf);
  add_str(cells, buf);
  size_t used = 0;
  buf[0] = '\0';
  const cJSON *l;
  cJSON_ArrayForEach(l, kb_k8s_path(o, "spec.selector.matchLabels")) {
    if (cJSON_IsString(l) && used < sizeof buf)
      used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s=%s", used ? "," : "",
                               l->string, l->valuestring);
  }
  add_str(cells, used ? buf : "<none>");
}

static void node_cells(cJSON *cells, const cJSON *o, double now) {
  char buf[256] = "Unknown";
  const cJSON *c;
  cJSON_ArrayForEach(c, kb_k8s_path(o, "status.conditions")) {
    const char *t = sget(c, "type"), *s = sget(c, "status");
    if (t && s && !strcmp(t, "Ready")) snprintf(buf, sizeof buf, "%s", !strcmp(s, "True") ? "Ready" : "NotReady");
  }
  if (cJSON_IsTrue(kb_k8s_path(o, "spec.unschedulable")))
    strncat(buf, ",SchedulingDisabled", sizeof buf - strlen(buf) - 1);
  add_str(cells, buf);
  size_t used = 0;
  buf[0] = '\0';
  const cJSON *l;
  static const char role[] = "node-role.kubernetes.io/";
  cJSON_ArrayForEach(l, kb_k8s_path(o, "metadata.labels")) {
    if (!strncmp(l->string, role, sizeof role - 1) && used < sizeof buf)
      used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", used ? "," : "",
                               l->string + sizeof role - 1);
  }
  add_str(cells, used ? buf : "<none>");
  add_age(cells, now, o);
  const char *v = sget(o, "status.nodeInfo.kubeletVersion");
  add_str(cells, v ? v : "");
  const char *in = "<none>", *ex = "<none>";
  cJSON_ArrayForEach(c, kb_k8s_path(o, "status.addresses")) {
    const char *t = sget(c, "type"), *a = sget(c, "address");
    if (t && a && !strcmp(t, "InternalIP")) in = a;
    if (t && a && !strcmp(t, "ExternalIP")) ex = a;
  }
  add_str(cells, in);
  add_str(cells, ex);
  const char *os = sget(o, "status.nodeInfo.osImage"), *k = sget(o, "status.nodeInfo.kernelVersion");
  const char *rt = sget(o, "status.nodeInfo.containerRuntimeVersion");
  add_str(cells, os ? os : "<unknown>");
  add_str(cells, k ? k : "<unknown>");
  add_str(cells, rt ? rt : "<unknown>");
}

static void event_cells(cJSON *cells, const cJSON *o, double now) {
  char buf[512];
  const char *last = sget(o, "lastTimestamp");
  if (!last) last = sget(o, "eventTime");
  if (!last) last = sget(o, "metadata.creationTimestamp");
  age_of(now, last, buf, sizeof buf);
  add_str(cells, buf);
  add_str(cells, sget(o, "type"));
  add_str(cells, sget(o, "reason"));
  const char *kind = sget(o, "involvedObject.kind"), *name = sget(o, "involvedObject.name");
  char lower[64] = "";
  for (size_t i = 0; kind && kind[i] && i < sizeof lower - 1; i++)
    lower[i] = (char)(kind[i] >= 'A' && kind[i] <= 'Z' ? kind[i] + 32 : kind[i]), lower[i + 1] = 0;
  snprintf(buf, sizeof buf, "%s/%s", lower, name ? name : "");
  add_str(cells, buf);
  add_str(cells, sget(o, "message"));
}

/* A printer column value: dates become ages, others their JSON text. */
static void custom_cell(cJSON *cells, const kb_k8s_column *c, const cJSON *o, double now) {
  const cJSON *v = kb_k8s_path(o, c->json_path);
  if (!v || cJSON_IsNull(v)) {
    cJSON_AddItemToArray(cells, cJSON_CreateNull());
  } else if (!strcmp(c->type, "date") && cJSON_IsString(v)) {
    char buf[32];
    age_of(now, v->valuestring, buf, sizeof buf);
    add_str(cells, buf);
  } else {
    cJSON_AddItemToArray(cells, cJSON_Duplicate(v, 1));
  }
}

static const col *builtin_cols(const kb_k8s_res *r, size_t *n) {
#define RET(a) return (*n = sizeof a / sizeof a[0], a)
  const col *apps = kb_k8s_apps_columns(r, n); /* k8s_table_apps.c */
  if (apps) return apps;
  if (!strcmp(r->group, "batch") && !strcmp(r->resource, "jobs")) RET(job_cols);
  if (!strcmp(r->group, "apiextensions.k8s.io")) RET(crd_cols);
  if (!strcmp(r->group, "policy")) RET(pdb_cols);
  if (r->group[0]) RET(generic_cols);
  if (!strcmp(r->resource, "pods")) RET(pod_cols);
  if (!strcmp(r->resource, "nodes")) RET(node_cols);
  if (!strcmp(r->resource, "namespaces")) RET(ns_cols);
  if (!strcmp(r->resource, "configmaps")) RET(cm_cols);
  if (!strcmp(r->resource, "secrets")) RET(secret_cols);
  if (!strcmp(r->resource, "persistentvolumeclaims")) RET(pvc_cols);
  if (!strcmp(r->resource, "events")) RET(event_cols);
  if (!strcmp(r->resource, "serviceaccounts")) RET(sa_cols);
  RET(generic_cols);
#undef RET
}

static cJSON *col_def(const char *name, const char *type, const char *format, const char *desc,
                      int priority) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "name", name);
  cJSON_AddStringToObject(c, "type", type);
  cJSON_AddStringToObject(c, "format", format);
  cJSON_AddStringToObject(c, "description", desc);
  cJSON_AddNumberToObject(c, "priority", priority);
  return c;
}

static cJSON *column_defs(const kb_k8s_res *r) {
  cJSON *defs = cJSON_CreateArray();
  if (r->custom) {
    cJSON_AddItemToArray(defs, col_def("Name", "string", "name", generic_cols[0].desc, 0));
    for (size_t i = 0; i < r->n_columns; i++) {
      const kb_k8s_column *c = &r->columns[i];
      cJSON_AddItemToArray(defs, col_def(c->name, c->type, "", c->description, c->priority));
    }
    if (!r->n_columns) cJSON_AddItemToArray(defs, col_def("Age", "date", "", generic_cols[1].desc, 0));
    return defs;
  }
  size_t n;
  const col *cols = builtin_cols(r, &n);
  for (size_t i = 0; i < n; i++)
    cJSON_AddItemToArray(defs, col_def(cols[i].name, cols[i].type, cols[i].format, cols[i].desc,
                                       cols[i].priority));
  return defs;
}

static cJSON *row_cells(const kb_k8s_res *r, const cJSON *o, double now) {
  cJSON *cells = cJSON_CreateArray();
  const char *name = sget(o, "metadata.name");
  char buf[64];
  if (!(!r->group[0] && !strcmp(r->resource, "events"))) add_str(cells, name);
  if (r->custom) {
    for (size_t i = 0; i < r->n_columns; i++) custom_cell(cells, &r->columns[i], o, now);
    if (!r->n_columns) add_age(cells, now, o);
  } else if (kb_k8s_apps_cells(r, cells, o, now)) {
    /* k8s_table_apps.c */
  } else if (!strcmp(r->group, "batch")) {
    job_cells(cells, o, now);
  } else if (!strcmp(r->group, "policy")) { /* PodDisruptionBudgets */
    const char *keys[] = {"spec.minAvailable", "spec.maxUnavailable"};
    for (int i = 0; i < 2; i++) {
      const cJSON *v = kb_k8s_path(o, keys[i]);
      if (cJSON_IsNumber(v)) snprintf(buf, sizeof buf, "%d", v->valueint);
      else snprintf(buf, sizeof buf, "%s", cJSON_IsString(v) ? v->valuestring : "N/A");
      add_str(cells, buf);
    }
    cJSON_AddItemToArray(cells, cJSON_CreateNumber(nget(o, "status.disruptionsAllowed", 0)));
    add_age(cells, now, o);
  } else if (r->group[0]) { /* CRDs */
    add_str(cells, sget(o, "metadata.creationTimestamp"));
  } else if (!strcmp(r->resource, "pods")) {
    pod_cells(cells, o, now);
  } else if (!strcmp(r->resource, "nodes")) {
    node_cells(cells, o, now);
  } else if (!strcmp(r->resource, "namespaces")) {
    const char *p = sget(o, "status.phase");
    add_str(cells, p ? p : "Active");
    add_age(cells, now, o);
  } else if (!strcmp(r->resource, "configmaps")) {
    cJSON_AddItemToArray(cells, cJSON_CreateNumber(map_size(o, "data") + map_size(o, "binaryData")));
    add_age(cells, now, o);
  } else if (!strcmp(r->resource, "secrets")) {
    add_str(cells, sget(o, "type"));
    cJSON_AddItemToArray(cells, cJSON_CreateNumber(map_size(o, "data") + map_size(o, "stringData")));
    add_age(cells, now, o);
  } else if (!strcmp(r->resource, "persistentvolumeclaims")) {
    const char *p = sget(o, "status.phase"), *sc = sget(o, "spec.storageClassName");
    add_str(cells, p ? p : "Pending");
    add_str(cells, sget(o, "spec.volumeName"));
    add_str(cells, sget(o, "status.capacity.storage"));
    buf[0] = '\0';
    const cJSON *m;
    cJSON_ArrayForEach(m, kb_k8s_path(o, "status.accessModes")) {
      const char *s = cJSON_GetStringValue(m);
      const char *ab = !s ? "" : !strcmp(s, "ReadWriteOnce") ? "RWO" : !strcmp(s, "ReadOnlyMany") ? "ROX"
                       : !strcmp(s, "ReadWriteMany") ? "RWX" : "RWOP";
      if (strlen(buf) + 6 < sizeof buf) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", buf[0] ? "," : "", ab);
    }
    add_str(cells, buf);
    add_str(cells, sc ? sc : "<unset>");
    add_str(cells, "<unset>");
    add_age(cells, now, o);
    const char *vm = sget(o, "spec.volumeMode");
    add_str(cells, vm ? vm : "Filesystem");
  } else if (!strcmp(r->resource, "events")) {
    event_cells(cells, o, now);
  } else if (!strcmp(r->resource, "serviceaccounts")) {
    cJSON_AddItemToArray(cells, cJSON_CreateNumber(map_size(o, "secrets")));
    add_age(cells, now, o);
  } else {
    add_age(cells, now, o);
  }
  return cells;
}

/* The row's object: PartialObjectMetadata (the default), the full object
 * (includeObject=Object) or nothing (None). */
static cJSON *row_object(const kb_k8s_res *r, const cJSON *o, k8s_table_include inc) {
  (void)r;
  if (inc == K8S_TABLE_OBJECT) return cJSON_Duplicate(o, 1);
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "kind", "PartialObjectMetadata");
  cJSON_AddStringToObject(p, "apiVersion", "meta.k8s.io/v1");
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "metadata");
  cJSON_AddItemToObject(p, "metadata", m ? cJSON_Duplicate(m, 1) : cJSON_CreateObject());
  return p;
}

cJSON *kb_k8s_table(const kb_k8s_res *res, const cJSON *const *objs, size_t n, double now,
                 k8s_table_include inc, int with_columns, const char *rv, const char *cont) {
  cJSON *t = cJSON_CreateObject();
  if (!t) return NULL;
  cJSON_AddStringToObject(t, "kind", "Table");
  cJSON_AddStringToObject(t, "apiVersion", "meta.k8s.io/v1");
  cJSON *m = cJSON_AddObjectToObject(t, "metadata");
  if (rv) cJSON_AddStringToObject(m, "resourceVersion", rv);
  if (cont && *cont) cJSON_AddStringToObject(m, "continue", cont);
  if (with_columns) cJSON_AddItemToObject(t, "columnDefinitions", column_defs(res));
  cJSON *rows = cJSON_AddArrayToObject(t, "rows");
  for (size_t i = 0; i < n; i++) {
    cJSON *row = cJSON_CreateObject();
    cJSON_AddItemToObject(row, "cells", row_cells(res, objs[i], now));
    if (inc != K8S_TABLE_NONE) cJSON_AddItemToObject(row, "object", row_object(res, objs[i], inc));
    cJSON_AddItemToArray(rows, row);
  }
  return t;
}
