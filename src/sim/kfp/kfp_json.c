/* The JSON shapes of KFP objects, v2beta1 and v1beta1, as the server's
 * converters (api_converter.go) fill them and protojson writes them:
 * proto field order, snake_case, zero scalars omitted, timestamps always
 * present once set (an unfinished run's finished_at is the Unix epoch). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kb/fnv.h"
#include "kfp_internal.h"

void kb_kfp_time_str(int64_t t, char out[32]) {
  time_t tt = (time_t)t;
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int64_t kb_kfp_time_parse(const char *s) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return -1;
  if (*end == '.')
    for (end++; *end >= '0' && *end <= '9'; end++) {
    }
  long off = 0;
  if (*end == 'Z') {
    end++;
  } else if (*end == '+' || *end == '-') {
    int hh, mm;
    if (sscanf(end + 1, "%2d:%2d", &hh, &mm) != 2) return -1;
    off = (hh * 3600 + mm * 60) * (*end == '+' ? 1 : -1);
    end += 6;
  } else {
    return -1;
  }
  if (*end) return -1;
  return (int64_t)timegm(&tm) - off;
}

int64_t kb_kfp_sim_time(const kb_sim_kfp *kfp, double t) {
  return (int64_t)floor(kb_sim_epoch(kfp->sim) + t);
}

const char *kb_kfp_v1_status(kb_sim_run_state s) {
  switch (s) {
  case KB_SIM_RUN_PENDING: case KB_SIM_RUN_PAUSED: return "Pending";
  case KB_SIM_RUN_RUNNING: return "Running";
  case KB_SIM_RUN_SUCCEEDED: return "Succeeded";
  case KB_SIM_RUN_SKIPPED: return "Skipped";
  case KB_SIM_RUN_FAILED: case KB_SIM_RUN_CANCELED: return "Failed";
  case KB_SIM_RUN_CANCELING: return "Terminating";
  default: return "Unknown";
  }
}

static void add_str(cJSON *o, const char *k, const char *v) {
  if (v && *v) cJSON_AddStringToObject(o, k, v);
}

static void add_time(cJSON *o, const char *k, int64_t t) {
  char buf[32];
  kb_kfp_time_str(t, buf);
  cJSON_AddStringToObject(o, k, buf);
}

static void add_i64s(cJSON *o, const char *k, int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  cJSON_AddStringToObject(o, k, buf);
}

static void add_copy(cJSON *o, const char *k, const cJSON *v) {
  if (v) cJSON_AddItemToObject(o, k, cJSON_Duplicate(v, 1));
}

cJSON *kb_kfp_j_v2_pipeline(const kb_sim_kfp *kfp, const kfp_pipeline *p) {
  (void)kfp;
  cJSON *o = cJSON_CreateObject();
  add_str(o, "pipeline_id", p->id);
  add_str(o, "display_name", p->display_name);
  add_str(o, "name", p->name);
  add_str(o, "description", p->description);
  add_time(o, "created_at", p->created_at);
  add_str(o, "namespace", p->namespace_);
  if (p->tags && cJSON_GetArraySize(p->tags)) add_copy(o, "tags", p->tags);
  return o;
}

cJSON *kb_kfp_j_v2_version(const kb_sim_kfp *kfp, const kfp_version *v) {
  (void)kfp;
  cJSON *o = cJSON_CreateObject();
  add_str(o, "pipeline_id", v->pipeline_id);
  add_str(o, "pipeline_version_id", v->id);
  add_str(o, "display_name", v->display_name);
  add_str(o, "name", v->name);
  add_str(o, "description", v->description);
  add_time(o, "created_at", v->created_at);
  if (v->package_url && *v->package_url)
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "package_url"), "pipeline_url",
                            v->package_url);
  add_str(o, "code_source_url", v->code_source_url);
  add_copy(o, "pipeline_spec", v->spec);
  if (v->tags && cJSON_GetArraySize(v->tags)) add_copy(o, "tags", v->tags);
  return o;
}

cJSON *kb_kfp_j_v2_experiment(const kb_sim_kfp *kfp, const kfp_experiment *e) {
  (void)kfp;
  cJSON *o = cJSON_CreateObject();
  add_str(o, "experiment_id", e->id);
  add_str(o, "display_name", e->name);
  add_str(o, "description", e->description);
  add_time(o, "created_at", e->created_at);
  add_str(o, "namespace", e->namespace_);
  cJSON_AddStringToObject(o, "storage_state", e->archived ? "ARCHIVED" : "AVAILABLE");
  add_time(o, "last_run_created_at", e->last_run_created_at);
  return o;
}

static void add_source_v2(cJSON *o, const kfp_target *t) {
  if (t->pipeline_version_id) {
    cJSON *ref = cJSON_AddObjectToObject(o, "pipeline_version_reference");
    add_str(ref, "pipeline_id", t->pipeline_id);
    add_str(ref, "pipeline_version_id", t->pipeline_version_id);
  } else if (t->pipeline_spec) {
    add_copy(o, "pipeline_spec", t->pipeline_spec);
  }
}

/* v1 parameters are strings; v2 shows them as Values (strings stay strings). */
static void add_runtime_config(cJSON *o, const kfp_target *t) {
  if (!t->parameters && !t->pipeline_root) return;
  cJSON *rc = cJSON_AddObjectToObject(o, "runtime_config");
  if (t->parameters && cJSON_GetArraySize(t->parameters)) add_copy(rc, "parameters", t->parameters);
  add_str(rc, "pipeline_root", t->pipeline_root);
}

static const char *state_name(kb_sim_run_state s) {
  return s == KB_SIM_RUN_UNSPECIFIED ? "RUNTIME_STATE_UNSPECIFIED" : kb_sim_run_state_name(s);
}

static int run_info(const kb_sim_kfp *kfp, const kfp_run *run, kb_sim_run_info *ri) {
  memset(ri, 0, sizeof *ri);
  ri->finished_at = -1;
  return kb_sim_run_get(kfp->sim, run->sim_run, ri);
}

static int64_t finished_at(const kb_sim_kfp *kfp, const kb_sim_run_info *ri) {
  return ri->finished_at < 0 ? 0 : kb_kfp_sim_time(kfp, ri->finished_at);
}

cJSON *kb_kfp_j_v2_run(const kb_sim_kfp *kfp, const kfp_run *run) {
  kb_sim_run_info ri;
  run_info(kfp, run, &ri);
  cJSON *o = cJSON_CreateObject();
  add_str(o, "experiment_id", run->experiment_id);
  add_str(o, "run_id", run->id);
  add_str(o, "display_name", run->display_name);
  cJSON_AddStringToObject(o, "storage_state", run->archived ? "ARCHIVED" : "AVAILABLE");
  add_str(o, "description", run->description);
  add_source_v2(o, &run->t);
  add_runtime_config(o, &run->t);
  add_str(o, "service_account", run->service_account);
  add_time(o, "created_at", run->created_at);
  add_time(o, "scheduled_at", run->created_at);
  add_time(o, "finished_at", finished_at(kfp, &ri));
  if (ri.state != KB_SIM_RUN_UNSPECIFIED) cJSON_AddStringToObject(o, "state", state_name(ri.state));
  add_str(o, "recurring_run_id", run->recurring_run_id);
  if (ri.n_history) {
    cJSON *h = cJSON_AddArrayToObject(o, "state_history");
    for (size_t i = 0; i < ri.n_history; i++) {
      cJSON *e = cJSON_CreateObject();
      int64_t t = kb_kfp_sim_time(kfp, ri.history[i].time);
      if (t > 0) add_time(e, "update_time", t);
      cJSON_AddStringToObject(e, "state", state_name(ri.history[i].state));
      if (ri.error && i + 1 == ri.n_history && ri.history[i].state == KB_SIM_RUN_FAILED) {
        cJSON *err = cJSON_AddObjectToObject(e, "error");
        cJSON_AddNumberToObject(err, "code", KFP_UNKNOWN);
        cJSON_AddStringToObject(err, "message", ri.error);
      }
      cJSON_AddItemToArray(h, e);
    }
  }
  return o;
}

/* ---- run_details.task_details ---- */

/* Argo's node phase as the v2beta1 RuntimeState KFP's persistence agent
 * stores for the task (Error is a failure; Omitted is never run). */
static const char *task_state(const char *phase) {
  static const struct { const char *phase, *state; } map[] = {
      {"Pending", "PENDING"}, {"Running", "RUNNING"},  {"Succeeded", "SUCCEEDED"},
      {"Skipped", "SKIPPED"}, {"Omitted", "SKIPPED"},  {"Failed", "FAILED"},
      {"Error", "FAILED"},
  };
  for (size_t i = 0; phase && i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(phase, map[i].phase)) return map[i].state;
  return "RUNTIME_STATE_UNSPECIFIED";
}

/* A task's id: real KFP stores a UUID per task row, so it is the same on
 * every GetRun; here it is derived from the run's id and the Argo node id
 * (two FNV-1a 64 hashes, as a version-4-shaped UUID). */
static void task_uuid(const char *run_id, const char *node_id, char out[37]) {
  uint64_t h[2];
  for (int k = 0; k < 2; k++)
    h[k] = kb_fnv64(kb_fnv64(kb_fnv64(KB_FNV64_INIT + (uint64_t)k, run_id), "/"), node_id);
  snprintf(out, 37, "%08x-%04x-4%03x-%04x-%012llx", (unsigned)(h[0] >> 32),
           (unsigned)(h[0] >> 16) & 0xffff, (unsigned)h[0] & 0xfff,
           (unsigned)(0x8000 | ((h[1] >> 48) & 0x3fff)),
           (unsigned long long)(h[1] & 0xffffffffffffULL));
}

static const char *jstring(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* One task per node of the run's Argo workflow (the DAG, its drivers and
 * executors), as KFP v2's persistence agent reports them: display name,
 * times, state, the node id as pod_name, the children as child_tasks. */
static cJSON *task_details(const kb_sim_kfp *kfp, const kfp_run *run) {
  cJSON *list = cJSON_CreateArray();
  cJSON *st = kb_sim_run_workflow_status(kfp->sim, run->sim_run);
  const cJSON *node;
  cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(st, "nodes")) {
    const char *id = jstring(node, "id"), *started = jstring(node, "startedAt");
    const char *finished = jstring(node, "finishedAt"), *message = jstring(node, "message");
    if (!id) continue;
    char uuid[37];
    task_uuid(run->id, id, uuid);
    cJSON *t = cJSON_CreateObject();
    add_str(t, "run_id", run->id);
    add_str(t, "task_id", uuid);
    add_str(t, "display_name", jstring(node, "displayName"));
    add_str(t, "create_time", started);
    add_str(t, "start_time", started);
    add_str(t, "end_time", finished);
    const char *state = task_state(jstring(node, "phase"));
    cJSON_AddStringToObject(t, "state", state);
    if (message && !strcmp(state, "FAILED")) {
      cJSON *err = cJSON_AddObjectToObject(t, "error");
      cJSON_AddNumberToObject(err, "code", KFP_UNKNOWN);
      cJSON_AddStringToObject(err, "message", message);
    }
    add_str(t, "pod_name", id);
    const cJSON *child;
    cJSON *children = NULL;
    cJSON_ArrayForEach(child, cJSON_GetObjectItemCaseSensitive(node, "children")) {
      if (!cJSON_IsString(child)) continue;
      if (!children) children = cJSON_AddArrayToObject(t, "child_tasks");
      cJSON *c = cJSON_CreateObject();
      cJSON_AddStringToObject(c, "pod_name", child->valuestring);
      cJSON_AddItemToArray(children, c);
    }
    cJSON_AddItemToArray(list, t);
  }
  cJSON_Delete(st);
  return list;
}

cJSON *kb_kfp_j_v2_run_detail(const kb_sim_kfp *kfp, const kfp_run *run) {
  cJSON *o = kb_kfp_j_v2_run(kfp, run);
  cJSON *tasks = task_details(kfp, run);
  if (cJSON_GetArraySize(tasks))
    cJSON_AddItemToObject(cJSON_AddObjectToObject(o, "run_details"), "task_details", tasks);
  else
    cJSON_Delete(tasks);
  return o;
}

static void trigger_json(cJSON *o, const kfp_recurring *rr) {
  cJSON *tr = cJSON_AddObjectToObject(o, "trigger");
  cJSON *s = cJSON_AddObjectToObject(tr, rr->cron ? "cron_schedule" : "periodic_schedule");
  if (rr->start_time >= 0) add_time(s, "start_time", (int64_t)rr->start_time);
  if (rr->end_time >= 0) add_time(s, "end_time", (int64_t)rr->end_time);
  if (rr->cron) cJSON_AddStringToObject(s, "cron", rr->cron);
  else add_i64s(s, "interval_second", rr->interval);
}

cJSON *kb_kfp_j_v2_recurring(const kb_sim_kfp *kfp, const kfp_recurring *rr) {
  (void)kfp;
  cJSON *o = cJSON_CreateObject();
  add_str(o, "recurring_run_id", rr->id);
  add_str(o, "display_name", rr->display_name);
  add_str(o, "description", rr->description);
  add_source_v2(o, &rr->t);
  add_runtime_config(o, &rr->t);
  add_str(o, "service_account", rr->service_account);
  add_i64s(o, "max_concurrency", rr->max_concurrency);
  trigger_json(o, rr);
  cJSON_AddStringToObject(o, "mode", rr->enabled ? "ENABLE" : "DISABLE");
  add_time(o, "created_at", rr->created_at);
  add_time(o, "updated_at", rr->updated_at);
  cJSON_AddStringToObject(o, "status", rr->enabled ? "ENABLED" : "DISABLED");
  if (rr->no_catchup) cJSON_AddBoolToObject(o, "no_catchup", 1);
  add_str(o, "experiment_id", rr->experiment_id);
  return o;
}

/* ---- v1beta1 ---- */

static cJSON *ref(const char *type, const char *id, const char *name, const char *rel) {
  cJSON *r = cJSON_CreateObject();
  cJSON *k = cJSON_AddObjectToObject(r, "key");
  cJSON_AddStringToObject(k, "type", type);
  add_str(k, "id", id);
  add_str(r, "name", name);
  cJSON_AddStringToObject(r, "relationship", rel);
  return r;
}

/* Pipeline inputs with their defaults: Argo spec.arguments.parameters or
 * the IR's root.inputDefinitions.parameters. */
static cJSON *template_params(const kfp_version *v) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *doc = v->docs ? cJSON_GetArrayItem(v->docs, 0) : NULL;
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "spec"), "arguments"),
      "parameters");
  const cJSON *it;
  cJSON_ArrayForEach(it, args) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(it, "value");
    if (!cJSON_IsString(n)) continue;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", n->valuestring);
    if (cJSON_IsString(val)) add_str(p, "value", val->valuestring);
    cJSON_AddItemToArray(out, p);
  }
  const cJSON *defs = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "root"),
                                       "inputDefinitions"),
      "parameters");
  cJSON_ArrayForEach(it, defs) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", it->string);
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(it, "defaultValue");
    if (cJSON_IsString(dv)) {
      add_str(p, "value", dv->valuestring);
    } else if (dv) {
      char *s = cJSON_PrintUnformatted(dv);
      if (s) add_str(p, "value", s);
      cJSON_free(s);
    }
    cJSON_AddItemToArray(out, p);
  }
  if (!cJSON_GetArraySize(out)) {
    cJSON_Delete(out);
    return NULL;
  }
  return out;
}

cJSON *kb_kfp_j_v1_version(const kb_sim_kfp *kfp, const kfp_version *v) {
  (void)kfp;
  cJSON *o = cJSON_CreateObject();
  add_str(o, "id", v->id);
  add_str(o, "name", v->name);
  add_time(o, "created_at", v->created_at);
  cJSON *params = template_params(v);
  if (params) cJSON_AddItemToObject(o, "parameters", params);
  add_str(o, "code_source_url", v->code_source_url);
  if (v->package_url && *v->package_url)
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "package_url"), "pipeline_url",
                            v->package_url);
  cJSON *refs = cJSON_AddArrayToObject(o, "resource_references");
  cJSON_AddItemToArray(refs, ref("PIPELINE", v->pipeline_id, NULL, "OWNER"));
  add_str(o, "description", v->description);
  return o;
}

cJSON *kb_kfp_j_v1_pipeline(const kb_sim_kfp *kfp, const kfp_pipeline *p) {
  cJSON *o = cJSON_CreateObject();
  kfp_version *v = kb_kfp_latest_version(kfp, p->id);
  add_str(o, "id", p->id);
  add_time(o, "created_at", p->created_at);
  add_str(o, "name", p->name);
  add_str(o, "description", p->description);
  if (v) {
    cJSON *params = template_params(v);
    if (params) cJSON_AddItemToObject(o, "parameters", params);
    if (v->package_url && *v->package_url)
      cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "url"), "pipeline_url", v->package_url);
    cJSON_AddItemToObject(o, "default_version", kb_kfp_j_v1_version(kfp, v));
  }
  if (p->namespace_ && *p->namespace_) {
    cJSON *refs = cJSON_AddArrayToObject(o, "resource_references");
    cJSON_AddItemToArray(refs, ref("NAMESPACE", p->namespace_, NULL, "OWNER"));
  }
  return o;
}

cJSON *kb_kfp_j_v1_experiment(const kb_sim_kfp *kfp, const kfp_experiment *e) {
  (void)kfp;
  cJSON *o = cJSON_CreateObject();
  add_str(o, "id", e->id);
  add_str(o, "name", e->name);
  add_str(o, "description", e->description);
  add_time(o, "created_at", e->created_at);
  if (e->namespace_ && *e->namespace_) {
    cJSON *refs = cJSON_AddArrayToObject(o, "resource_references");
    cJSON_AddItemToArray(refs, ref("NAMESPACE", e->namespace_, NULL, "OWNER"));
  }
  cJSON_AddStringToObject(o, "storage_state",
                          e->archived ? "STORAGESTATE_ARCHIVED" : "STORAGESTATE_AVAILABLE");
  return o;
}

/* The template as the run's spec manifest: the Argo workflow (v1) or the
 * IR (v2), as a JSON string. */
static void add_manifests(cJSON *spec, const kb_sim_kfp *kfp, const kfp_target *t) {
  const cJSON *doc = t->pipeline_spec;
  const char *format = NULL;
  if (!doc && t->pipeline_version_id) {
    kfp_version *v = kb_kfp_lookup(kfp, t->pipeline_version_id, KFP_VERSION);
    if (v) {
      doc = cJSON_GetArrayItem(v->docs, 0);
      format = v->format;
    }
  }
  if (!doc) return;
  if (!format)
    format = cJSON_GetObjectItemCaseSensitive(doc, "apiVersion") ? "v1" : "v2";
  char *s = cJSON_PrintUnformatted(doc);
  if (s) cJSON_AddStringToObject(spec, strcmp(format, "v1") ? "pipeline_manifest" : "workflow_manifest", s);
  cJSON_free(s);
}

static cJSON *v1_params(const kfp_target *t) {
  if (!t->parameters || !cJSON_GetArraySize(t->parameters)) return NULL;
  cJSON *a = cJSON_CreateArray();
  const cJSON *it;
  cJSON_ArrayForEach(it, t->parameters) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", it->string);
    if (cJSON_IsString(it)) {
      add_str(p, "value", it->valuestring);
    } else {
      char *s = cJSON_PrintUnformatted(it);
      if (s) add_str(p, "value", s);
      cJSON_free(s);
    }
    cJSON_AddItemToArray(a, p);
  }
  return a;
}

static cJSON *v1_spec(const kb_sim_kfp *kfp, const kfp_target *t) {
  cJSON *spec = cJSON_CreateObject();
  add_str(spec, "pipeline_id", t->pipeline_id);
  kfp_pipeline *p = t->pipeline_id ? kb_kfp_lookup(kfp, t->pipeline_id, KFP_PIPELINE) : NULL;
  if (p) add_str(spec, "pipeline_name", p->name);
  add_manifests(spec, kfp, t);
  cJSON *params = v1_params(t);
  if (params) cJSON_AddItemToObject(spec, "parameters", params);
  if (t->pipeline_root) {
    cJSON *rc = cJSON_AddObjectToObject(spec, "runtime_config");
    add_str(rc, "pipeline_root", t->pipeline_root);
  }
  return spec;
}

static cJSON *v1_refs(const kb_sim_kfp *kfp, const char *experiment_id,
                      const char *recurring_id, const kfp_target *t) {
  cJSON *refs = cJSON_CreateArray();
  if (experiment_id) {
    kfp_experiment *e = kb_kfp_lookup(kfp, experiment_id, KFP_EXPERIMENT);
    cJSON_AddItemToArray(refs, ref("EXPERIMENT", experiment_id, e ? e->name : NULL, "OWNER"));
  }
  if (recurring_id) {
    cJSON_AddItemToArray(refs, ref("JOB", recurring_id, NULL, "CREATOR"));
  } else if (t->pipeline_version_id) {
    kfp_version *v = kb_kfp_lookup(kfp, t->pipeline_version_id, KFP_VERSION);
    cJSON_AddItemToArray(
        refs, ref("PIPELINE_VERSION", t->pipeline_version_id, v ? v->name : NULL, "CREATOR"));
  } else if (t->pipeline_id) {
    cJSON_AddItemToArray(refs, ref("PIPELINE", t->pipeline_id, NULL, "CREATOR"));
  }
  return refs;
}

cJSON *kb_kfp_j_v1_run(const kb_sim_kfp *kfp, const kfp_run *run) {
  kb_sim_run_info ri;
  run_info(kfp, run, &ri);
  cJSON *o = cJSON_CreateObject();
  add_str(o, "id", run->id);
  add_str(o, "name", run->display_name);
  cJSON_AddStringToObject(o, "storage_state",
                          run->archived ? "STORAGESTATE_ARCHIVED" : "STORAGESTATE_AVAILABLE");
  add_str(o, "description", run->description);
  cJSON_AddItemToObject(o, "pipeline_spec", v1_spec(kfp, &run->t));
  cJSON_AddItemToObject(o, "resource_references",
                        v1_refs(kfp, run->experiment_id, run->recurring_run_id, &run->t));
  add_str(o, "service_account", run->service_account);
  add_time(o, "created_at", run->created_at);
  add_time(o, "scheduled_at", run->created_at);
  add_time(o, "finished_at", finished_at(kfp, &ri));
  cJSON_AddStringToObject(o, "status", kb_kfp_v1_status(ri.state));
  if (ri.error && ri.state == KB_SIM_RUN_FAILED) add_str(o, "error", ri.error);
  return o;
}

/* The Argo Workflow as the persistence agent stored it. */
static char *workflow_manifest(const kb_sim_kfp *kfp, const kfp_run *run) {
  kb_sim_run_info ri;
  if (run_info(kfp, run, &ri)) return NULL;
  cJSON *wf = cJSON_CreateObject();
  cJSON_AddStringToObject(wf, "kind", "Workflow");
  cJSON_AddStringToObject(wf, "apiVersion", "argoproj.io/v1alpha1");
  cJSON *md = cJSON_AddObjectToObject(wf, "metadata");
  add_str(md, "name", ri.workflow);
  add_str(md, "namespace", ri.namespace_);
  add_time(md, "creationTimestamp", run->created_at);
  cJSON *labels = cJSON_AddObjectToObject(md, "labels");
  cJSON_AddStringToObject(labels, "pipeline/runid", run->id);
  if (ri.wf_phase && *ri.wf_phase)
    cJSON_AddStringToObject(labels, "workflows.argoproj.io/phase", ri.wf_phase);
  const kfp_version *v = run->t.pipeline_version_id
                             ? kb_kfp_lookup(kfp, run->t.pipeline_version_id, KFP_VERSION)
                             : NULL;
  const cJSON *doc = v && !strcmp(v->format, "v1") ? cJSON_GetArrayItem(v->docs, 0) : NULL;
  if (!v && cJSON_GetObjectItemCaseSensitive(run->t.pipeline_spec, "apiVersion"))
    doc = run->t.pipeline_spec; /* an inline v1 workflow_manifest */
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(doc, "spec");
  if (spec) {
    add_copy(wf, "spec", spec);
  } else {
    /* A Workflow always has a spec. The IR compiles to driver and executor
     * templates the simulator does not model; keep argocompiler's names. */
    cJSON *ws = cJSON_AddObjectToObject(wf, "spec");
    cJSON_AddStringToObject(ws, "entrypoint", "entrypoint");
    add_str(ws, "serviceAccountName", run->service_account);
  }
  cJSON *st = kb_sim_run_workflow_status(kfp->sim, run->sim_run);
  if (st) cJSON_AddItemToObject(wf, "status", st);
  char *s = cJSON_PrintUnformatted(wf);
  cJSON_Delete(wf);
  return s;
}

/* The manifest as a JSON string literal ("{\"kind\":...}"), rebuilt only
 * when the model run or its version changed since the last call. */
static const char *manifest_literal(const kb_sim_kfp *kfp, kfp_run *run) {
  uint64_t version = kb_sim_run_version(kfp->sim, run->sim_run);
  if (run->manifest_json && run->manifest_run == run->sim_run && run->manifest_version == version)
    return run->manifest_json;
  char *m = workflow_manifest(kfp, run);
  cJSON *str = m ? cJSON_CreateString(m) : NULL;
  char *lit = str ? cJSON_PrintUnformatted(str) : NULL;
  cJSON_Delete(str);
  cJSON_free(m);
  if (!lit) return NULL;
  cJSON_free(run->manifest_json);
  run->manifest_json = lit;
  run->manifest_run = run->sim_run;
  run->manifest_version = version;
  return lit;
}

cJSON *kb_kfp_j_v1_run_detail(const kb_sim_kfp *kfp, kfp_run *run) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "run", kb_kfp_j_v1_run(kfp, run));
  cJSON *rt = cJSON_AddObjectToObject(o, "pipeline_runtime");
  const char *lit = manifest_literal(kfp, run);
  if (lit) cJSON_AddRawToObject(rt, "workflow_manifest", lit);
  return o;
}

cJSON *kb_kfp_j_v1_job(const kb_sim_kfp *kfp, const kfp_recurring *rr) {
  cJSON *o = cJSON_CreateObject();
  add_str(o, "id", rr->id);
  add_str(o, "name", rr->display_name);
  add_str(o, "description", rr->description);
  cJSON_AddItemToObject(o, "pipeline_spec", v1_spec(kfp, &rr->t));
  cJSON_AddItemToObject(o, "resource_references", v1_refs(kfp, rr->experiment_id, NULL, &rr->t));
  add_str(o, "service_account", rr->service_account);
  add_i64s(o, "max_concurrency", rr->max_concurrency);
  trigger_json(o, rr);
  cJSON_AddStringToObject(o, "mode", rr->enabled ? "ENABLED" : "DISABLED");
  add_time(o, "created_at", rr->created_at);
  add_time(o, "updated_at", rr->updated_at);
  cJSON_AddStringToObject(o, "status", rr->enabled ? "Enabled" : "Disabled");
  if (rr->enabled) cJSON_AddBoolToObject(o, "enabled", 1);
  if (rr->no_catchup) cJSON_AddBoolToObject(o, "no_catchup", 1);
  return o;
}
