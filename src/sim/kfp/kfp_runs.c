/* Runs (v2beta1 and v1beta1): the KFP record (id, names, experiment,
 * what it executes) over a simulator run, which owns the state and the
 * timestamps. v1 create/get answer ApiRunDetail with the Argo workflow
 * as pipeline_runtime.workflow_manifest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/yaml.h"
#include "kfp_internal.h"

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const cJSON *jget(const cJSON *o, const char *proto, const char *camel) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, proto);
  return v ? v : cJSON_GetObjectItemCaseSensitive(o, camel);
}

static const char *jstr2(const cJSON *o, const char *proto, const char *camel) {
  const cJSON *v = jget(o, proto, camel);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

const char *kb_kfp_v1_ref_id(const cJSON *obj, const char *type) {
  const cJSON *ref;
  cJSON_ArrayForEach(ref, jget(obj, "resource_references", "resourceReferences")) {
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(ref, "key");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(key, "type");
    int match = cJSON_IsString(t) ? !strcmp(t->valuestring, type)
                : cJSON_IsNumber(t) ? ((!strcmp(type, "EXPERIMENT") && t->valueint == 1) ||
                                       (!strcmp(type, "JOB") && t->valueint == 2) ||
                                       (!strcmp(type, "PIPELINE") && t->valueint == 3) ||
                                       (!strcmp(type, "PIPELINE_VERSION") && t->valueint == 4))
                                    : 0;
    if (match && jstr(key, "id")) return jstr(key, "id");
  }
  return NULL;
}

static int set_version(kfp_req *r, kfp_target *t, const char *pid, const char *vid,
                       const char *wrap) {
  kb_sim_kfp *kfp = r->kfp;
  kfp_version *v = NULL;
  if (vid && *vid) {
    v = kb_kfp_lookup(kfp, vid, KFP_VERSION);
    if (!v) {
      kb_kfp_not_found(r, wrap, "PipelineVersion", vid);
      return -1;
    }
  } else {
    if (!kb_kfp_lookup(kfp, pid, KFP_PIPELINE)) {
      kb_kfp_not_found(r, wrap, "Pipeline", pid);
      return -1;
    }
    v = kb_kfp_latest_version(kfp, pid);
    if (!v) {
      kb_kfp_not_found(r, wrap, "PipelineVersion", "Latest");
      return -1;
    }
  }
  t->pipeline_id = kb_kfp_strdup(v->pipeline_id);
  t->pipeline_version_id = kb_kfp_strdup(v->id);
  t->version = v;
  v->pins++;
  return 0;
}

static void no_source(kfp_req *r, const char *wrap) {
  const char *ext = "Failed to fetch a template with an empty pipeline spec manifest";
  kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
}

int kb_kfp_target_from_v2(kfp_req *r, const cJSON *obj, kfp_target *t, const char *wrap) {
  memset(t, 0, sizeof *t);
  const cJSON *ref = jget(obj, "pipeline_version_reference", "pipelineVersionReference");
  const char *pid = jstr2(ref, "pipeline_id", "pipelineId");
  const char *vid = jstr2(ref, "pipeline_version_id", "pipelineVersionId");
  if (!vid || !*vid) vid = jstr2(obj, "pipeline_version_id", "pipelineVersionId");
  const cJSON *spec = jget(obj, "pipeline_spec", "pipelineSpec");
  if ((pid && *pid) || (vid && *vid)) {
    if (set_version(r, t, pid, vid, wrap)) return -1;
  } else if (cJSON_IsObject(spec)) {
    t->pipeline_spec = cJSON_Duplicate(spec, 1);
  } else {
    no_source(r, wrap);
    return -1;
  }
  const cJSON *rc = jget(obj, "runtime_config", "runtimeConfig");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(rc, "parameters");
  if (cJSON_IsObject(params) && cJSON_GetArraySize(params))
    t->parameters = cJSON_Duplicate(params, 1);
  t->pipeline_root = kb_kfp_strdup(jstr2(rc, "pipeline_root", "pipelineRoot"));
  return 0;
}

int kb_kfp_target_from_v1(kfp_req *r, const cJSON *obj, kfp_target *t, const char *wrap) {
  memset(t, 0, sizeof *t);
  const cJSON *spec = jget(obj, "pipeline_spec", "pipelineSpec");
  const char *vid = kb_kfp_v1_ref_id(obj, "PIPELINE_VERSION");
  const char *pid = kb_kfp_v1_ref_id(obj, "PIPELINE");
  if (!pid) pid = jstr2(spec, "pipeline_id", "pipelineId");
  const char *manifest = jstr2(spec, "workflow_manifest", "workflowManifest");
  if (!manifest || !*manifest) manifest = jstr2(spec, "pipeline_manifest", "pipelineManifest");
  if ((vid && *vid) || (pid && *pid)) {
    if (set_version(r, t, pid, vid, wrap)) return -1;
  } else if (manifest && *manifest) {
    kb_yaml_error ye;
    t->pipeline_spec = kb_yaml_parse(manifest, strlen(manifest), &ye);
    if (!cJSON_IsObject(t->pipeline_spec)) {
      char ext[400];
      snprintf(ext, sizeof ext, "Failed to unmarshal the workflow manifest: %s", ye.message);
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
      kb_kfp_target_free(t);
      return -1;
    }
  } else {
    no_source(r, wrap);
    return -1;
  }
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(spec, "parameters")) {
    const char *name = jstr(p, "name");
    if (!name) continue;
    if (!t->parameters) t->parameters = cJSON_CreateObject();
    cJSON_AddStringToObject(t->parameters, name, jstr(p, "value") ? jstr(p, "value") : "");
  }
  const cJSON *rc = jget(spec, "runtime_config", "runtimeConfig");
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(rc, "parameters");
  if (!t->parameters && cJSON_IsObject(rp) && cJSON_GetArraySize(rp))
    t->parameters = cJSON_Duplicate(rp, 1);
  t->pipeline_root = kb_kfp_strdup(jstr2(rc, "pipeline_root", "pipelineRoot"));
  t->v1_params = 1;
  return 0;
}

/* An inline spec as the simulator wants it: the IR's {pipeline_spec,
 * platform_spec} wrapper becomes the two YAML documents. */
static int load_inline(kb_sim_kfp *kfp, const cJSON *spec, const cJSON *params,
                       kb_sim_error *err) {
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(spec, "pipeline_spec");
  if (!cJSON_IsObject(ps)) return kb_sim_pipeline_load(kfp->sim, spec, params, err);
  cJSON *docs = cJSON_CreateArray();
  cJSON_AddItemReferenceToArray(docs, (cJSON *)ps);
  const cJSON *plat = cJSON_GetObjectItemCaseSensitive(spec, "platform_spec");
  if (cJSON_IsObject(plat)) cJSON_AddItemReferenceToArray(docs, (cJSON *)plat);
  int rc = kb_sim_pipeline_load(kfp->sim, docs, params, err);
  cJSON_Delete(docs);
  return rc;
}

/* Parameter sets whose loads a version keeps: enough for the sweeps a
 * benchmark runs, bounded so that runs with ever-new parameters (a seed
 * per run) do not grow the version without end. */
#define KFP_PARAMS_CACHE 16

/* The version's load for these parameters (cached), or -1. */
static int version_sim_pipeline(kb_sim_kfp *kfp, kfp_version *v, const cJSON *params,
                                kb_sim_error *err, int *hold) {
  if (!params) return v->sim_pipeline;
  char *key = cJSON_PrintUnformatted(params);
  for (size_t i = 0; key && i < v->n_cache; i++)
    if (!strcmp(v->cache[i].key, key)) {
      cJSON_free(key);
      return v->cache[i].sim_pipeline;
    }
  const cJSON *docs = cJSON_GetArraySize(v->docs) > 1 ? v->docs : cJSON_GetArrayItem(v->docs, 0);
  int sp = kb_sim_pipeline_load(kfp->sim, docs, params, err);
  char *owned = sp >= 0 && key ? kb_kfp_strdup(key) : NULL;
  cJSON_free(key);
  if (sp < 0) return -1;
  if (!owned) {
    *hold = 1; /* not cached: the caller releases it */
    return sp;
  }
  if (v->n_cache == KFP_PARAMS_CACHE) {
    /* the oldest goes; runs still using it keep it alive in the model */
    kb_sim_pipeline_release(kfp->sim, v->cache[0].sim_pipeline);
    free(v->cache[0].key);
    memmove(v->cache, v->cache + 1, --v->n_cache * sizeof *v->cache);
  }
  kfp_params_sim *c = v->n_cache ? v->cache : malloc(KFP_PARAMS_CACHE * sizeof *c);
  if (!c) {
    free(owned);
    *hold = 1;
    return sp;
  }
  v->cache = c;
  c[v->n_cache++] = (kfp_params_sim){owned, sp};
  return sp;
}

int kb_kfp_target_sim_pipeline(kfp_req *r, const kfp_target *t, const char *wrap, int *hold) {
  kb_sim_kfp *kfp = r->kfp;
  kb_sim_error err = {0};
  int sp;
  *hold = 0;
  if (t->pipeline_version_id) {
    /* the pinned version: a deleted one still runs (recurring runs and
     * retries keep their reference) */
    if (!t->version) {
      kb_kfp_not_found(r, wrap, "PipelineVersion", t->pipeline_version_id);
      return -1;
    }
    sp = version_sim_pipeline(kfp, t->version, t->parameters, &err, hold);
  } else {
    sp = load_inline(kfp, t->pipeline_spec, t->parameters, &err);
    *hold = sp >= 0;
  }
  if (sp < 0) {
    char ext[400];
    snprintf(ext, sizeof ext, "Failed to compile the pipeline: %s", err.message);
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
  }
  return sp;
}

kfp_run *kb_kfp_run_start(kb_sim_kfp *kfp, kfp_req *r, const char *display_name,
                       const char *description, const char *experiment_id,
                       const kfp_target *t, const char *service_account,
                       const char *recurring_run_id, const char *wrap) {
  kfp_req scratch;
  if (!r) { /* a recurring run: errors go nowhere */
    memset(&scratch, 0, sizeof scratch);
    scratch.kfp = kfp;
    r = &scratch;
  }
  int hold;
  int sp = kb_kfp_target_sim_pipeline(r, t, wrap, &hold);
  kfp_run *run = sp >= 0 ? calloc(1, sizeof *run) : NULL;
  if (sp >= 0 && !run)
    kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error", "%s: InternalServerError: out of memory",
              wrap);
  if (run) {
    run->id = kb_kfp_uuid(kfp);
    run->display_name = kb_kfp_strdup(display_name);
    run->description = kb_kfp_strdup(description);
    run->experiment_id = kb_kfp_strdup(experiment_id);
    run->service_account =
        kb_kfp_strdup(service_account && *service_account ? service_account : "pipeline-runner");
    run->recurring_run_id = kb_kfp_strdup(recurring_run_id);
    run->seq = ++kfp->seq;
    kb_sim_error err = {0};
    kb_sim_run_opts o = {display_name, NULL, "kubeflow", -1};
    run->sim_run = -1;
    if (!run->id || !run->display_name || kb_kfp_target_copy(&run->t, t) ||
        (run->sim_run = kb_sim_run_create(kfp->sim, sp, &o, &err)) < 0 ||
        kb_kfp_map_sim_run(kfp, run->sim_run, run) ||
        kb_kfp_store_add(kfp, KFP_RUN, run->id, run)) {
      if (run->sim_run >= 0) {
        kb_kfp_map_sim_run(kfp, run->sim_run, NULL);
        kb_sim_run_delete(kfp->sim, run->sim_run, NULL);
      }
      kb_kfp_run_free(run);
      run = NULL;
      kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error",
                "%s: InternalServerError: Failed to create a workflow: %s", wrap,
                err.message[0] ? err.message : "out of memory");
    }
  }
  if (hold) kb_sim_pipeline_release(kfp->sim, sp); /* the run (if any) keeps it */
  if (run) {
    kb_sim_run_info ri;
    memset(&ri, 0, sizeof ri);
    kb_sim_run_get(kfp->sim, run->sim_run, &ri);
    run->created_at = kb_kfp_sim_time(kfp, ri.created_at);
    kfp_experiment *e = kb_kfp_lookup(kfp, experiment_id, KFP_EXPERIMENT);
    if (e) e->last_run_created_at = run->created_at;
  }
  if (r == &scratch) kb_buf_free(&scratch.out);
  return run;
}

void kb_kfp_run_delete(kb_sim_kfp *kfp, kfp_run *run) {
  /* the model frees them and may reuse their ids: forget them first */
  for (size_t i = 0; i < run->n_retried; i++) {
    kb_kfp_map_sim_run(kfp, run->retried[i], NULL);
    kb_sim_run_delete(kfp->sim, run->retried[i], NULL);
  }
  run->n_retried = 0;
  if (run->sim_run >= 0) {
    kb_kfp_map_sim_run(kfp, run->sim_run, NULL);
    kb_sim_run_delete(kfp->sim, run->sim_run, NULL);
    run->sim_run = -1;
  }
  kb_kfp_mark_deleted(kfp, KFP_RUN, run);
}

void kb_kfp_h_create_run(kfp_req *r) {
  kb_sim_kfp *kfp = r->kfp;
  const cJSON *b = r->body;
  const char *wrap = r->ver == 1 ? "Failed to create a new v1beta1 run" : "Failed to create a new run";
  const char *name = r->ver == 1 ? jstr(b, "name") : jstr2(b, "display_name", "displayName");
  if (!name || !*name) {
    const char *ext = "The run name is empty. Please specify a valid name";
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext,
              "Failed to create a run due to invalid name: Invalid input error: %s", ext);
    return;
  }
  const char *exp = r->ver == 1 ? kb_kfp_v1_ref_id(b, "EXPERIMENT")
                                 : jstr2(b, "experiment_id", "experimentId");
  if (!exp || !*exp) exp = kb_kfp_query(r, "experiment_id");
  if (!exp || !*exp) exp = kfp->default_experiment_id;
  if (!kb_kfp_lookup(kfp, exp, KFP_EXPERIMENT)) {
    kb_kfp_not_found(r, "Failed to create a run due to invalid experimentId and namespace "
                     "combination: Failed to get experiment",
                  "Experiment", exp);
    return;
  }
  kfp_target t;
  if ((r->ver == 1 ? kb_kfp_target_from_v1 : kb_kfp_target_from_v2)(r, b, &t, wrap)) return;
  kfp_run *run = kb_kfp_run_start(kfp, r, name, jstr(b, "description"), exp, &t,
                               jstr2(b, "service_account", "serviceAccount"), NULL, wrap);
  kb_kfp_target_free(&t);
  if (!run) return;
  r->stored_rows = kb_kfp_live_count(&kfp->runs);
  kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_run_detail(kfp, run) : kb_kfp_j_v2_run(kfp, run));
}

static kfp_run *find(kfp_req *r, const char *wrap) {
  kfp_run *run = kb_kfp_lookup(r->kfp, r->params[0], KFP_RUN);
  if (!run) {
    char w[700];
    if (snprintf(w, sizeof w, "%s: Failed to fetch run %s", wrap, r->params[0]) >= (int)sizeof w)
      w[sizeof w - 1] = 0;
    kb_kfp_not_found(r, w, "Run", r->params[0]);
  }
  return run;
}

void kb_kfp_h_get_run(kfp_req *r) {
  kfp_run *run = find(r, r->ver == 1 ? "Failed to get a v1beta1 run" : "Failed to get a run");
  if (run) kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_run_detail(r->kfp, run) : kb_kfp_j_v2_run_detail(r->kfp, run));
}

static cJSON *render_v2(const kb_sim_kfp *k, const void *o) { return kb_kfp_j_v2_run(k, o); }
static cJSON *render_v1(const kb_sim_kfp *k, const void *o) { return kb_kfp_j_v1_run(k, o); }

void kb_kfp_h_list_runs(kfp_req *r) {
  kb_sim_kfp *kfp = r->kfp;
  const char *exp = NULL;
  if (r->ver == 2) {
    exp = kb_kfp_query(r, "experiment_id");
  } else {
    const char *type = kb_kfp_query(r, "resource_reference_key.type");
    if (type && !strcmp(type, "EXPERIMENT")) exp = kb_kfp_query(r, "resource_reference_key.id");
  }
  if (exp && !*exp) exp = NULL;
  kfp_vec cand = {0};
  for (size_t i = 0; i < kfp->runs.n; i++) {
    kfp_run *run = kfp->runs.items[i];
    if (run->deleted) continue;
    if (exp && (!run->experiment_id || strcmp(run->experiment_id, exp))) continue;
    kb_kfp_vec_push(&cand, run);
  }
  r->stored_rows = kb_kfp_live_count(&kfp->runs);
  kb_kfp_reply_list(r, &kb_kfp_list_runs, &cand,
                    r->ver == 1 ? "Failed to list v1beta1 runs" : "Failed to list runs", "runs",
                    r->ver == 1 ? render_v1 : render_v2);
}

void kb_kfp_h_delete_run(kfp_req *r) {
  const char *wrap = r->ver == 1 ? "Failed to delete a v1beta1 run" : "Failed to delete a run";
  char w[300];
  snprintf(w, sizeof w, "%s: Failed to delete run %s as it does not exist", wrap, r->params[0]);
  kfp_run *run = find(r, w);
  if (!run) return;
  kb_kfp_run_delete(r->kfp, run);
  r->stored_rows = kb_kfp_live_count(&r->kfp->runs);
  kb_kfp_reply_empty(r);
}

static void set_archived(kfp_req *r, int archived) {
  const char *what = archived ? "archive" : "unarchive";
  char wrap[200];
  snprintf(wrap, sizeof wrap, "Failed to %s a %srun: Failed to %s run %s as it failed to be "
                              "retrieved",
           what, r->ver == 1 ? "v1beta1 " : "", what, r->params[0]);
  kfp_run *run = find(r, wrap);
  if (!run) return;
  run->archived = archived;
  kb_kfp_reply_empty(r);
}

void kb_kfp_h_archive_run(kfp_req *r) {
  set_archived(r, 1);
}

void kb_kfp_h_unarchive_run(kfp_req *r) {
  set_archived(r, 0);
}

void kb_kfp_h_terminate_run(kfp_req *r) {
  char wrap[300];
  snprintf(wrap, sizeof wrap, "Failed to terminate a %srun: Failed to terminate run %s due to "
                              "error fetching the run",
           r->ver == 1 ? "v1beta1 " : "", r->params[0]);
  kfp_run *run = find(r, wrap);
  if (!run) return;
  /* a finished workflow ignores the patch: nothing changes */
  kb_sim_run_terminate(r->kfp->sim, run->sim_run, NULL);
  kb_kfp_reply_empty(r);
}

void kb_kfp_h_retry_run(kfp_req *r) {
  kb_sim_kfp *kfp = r->kfp;
  char wrap[300];
  snprintf(wrap, sizeof wrap, "Failed to retry a run: Failed to retry run %s due to error "
                              "fetching the run",
           r->params[0]);
  kfp_run *run = find(r, wrap);
  if (!run) return;
  kb_sim_run_info ri;
  memset(&ri, 0, sizeof ri);
  kb_sim_run_get(kfp->sim, run->sim_run, &ri);
  if (ri.state != KB_SIM_RUN_FAILED && ri.state != KB_SIM_RUN_CANCELED) {
    kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error",
              "Failed to retry a run: InternalServerError: Failed to retry run %s as it does not "
              "allow retries: workflow cannot be retried",
              run->id);
    return;
  }
  /* The simulator cannot resume a workflow: it reruns the pipeline under
   * the same KFP run (same id and created_at). */
  int *retried = realloc(run->retried, (run->n_retried + 1) * sizeof *retried);
  if (!retried) {
    kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error",
              "Failed to retry a run: InternalServerError: out of memory");
    return;
  }
  run->retried = retried;
  int hold;
  int sp = kb_kfp_target_sim_pipeline(r, &run->t, "Failed to retry a run", &hold);
  if (sp < 0) return;
  kb_sim_error err = {0};
  kb_sim_run_opts o = {run->display_name, NULL, "kubeflow", -1};
  int sr = kb_sim_run_create(kfp->sim, sp, &o, &err);
  if (hold) kb_sim_pipeline_release(kfp->sim, sp);
  if (sr < 0 || kb_kfp_map_sim_run(kfp, sr, run)) {
    if (sr >= 0) kb_sim_run_delete(kfp->sim, sr, NULL);
    kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error",
              "Failed to retry a run: InternalServerError: %s",
              sr < 0 ? err.message : "out of memory");
    return;
  }
  /* the old model run stays (its workflow and pods, mapped to this run)
   * until the KFP run is deleted */
  if (run->sim_run >= 0) run->retried[run->n_retried++] = run->sim_run;
  run->sim_run = sr;
  kb_kfp_reply_empty(r);
}
