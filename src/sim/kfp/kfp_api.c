/* The KFP REST front: routes (grpc-gateway patterns of both API
 * versions), request parsing, and delayed answers. A handler runs when
 * the request arrives; its answer waits for the modelled API latency on
 * the simulator's clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfp_internal.h"
#include "sim_internal.h"

#define SVC1(s) "api." s
#define SVC2(s) "kubeflow.pipelines.backend.api.v2beta1." s

typedef struct route {
  int ver;
  const char *method;
  const char *pattern; /* "runs/{x}:terminate" written with a star for {x} */
  kfp_handler_fn fn;
  const kfp_schema *body;
  const char *service, *grpc_method; /* NULL for the hand-written HTTP handlers */
  const char *counter, *counter2;
  const char *latency; /* kb_sim_api_latency endpoint */
} route;

static const route routes[] = {
    /* ---- v2beta1 ---- */
    {2, "GET", "healthz", kb_kfp_h_healthz, NULL, NULL, NULL, NULL, NULL, "Healthz"},
    {2, "POST", "pipelines/upload", kb_kfp_h_upload_pipeline, NULL, NULL, NULL,
     "pipeline_upload_requests", "pipeline_version_upload_requests", "CreatePipeline"},
    {2, "POST", "pipelines/upload_version", kb_kfp_h_upload_version, NULL, NULL, NULL,
     "pipeline_version_upload_requests", NULL, "CreatePipelineVersion"},
    {2, "POST", "pipelines/create", kb_kfp_h_create_pipeline_and_version, &kb_kfp_s_v2_create_pv,
     SVC2("PipelineService"), "CreatePipelineAndVersion", "pipeline_server_create_requests",
     NULL, "CreatePipeline"},
    {2, "GET", "pipelines/names/*", kb_kfp_h_get_pipeline_by_name, NULL, SVC2("PipelineService"),
     "GetPipelineByName", "pipeline_server_get_requests", NULL, "GetPipeline"},
    {2, "GET", "pipelines", kb_kfp_h_list_pipelines, NULL, SVC2("PipelineService"), "ListPipelines",
     "pipeline_server_list_requests", NULL, "ListPipelines"},
    {2, "POST", "pipelines", kb_kfp_h_create_pipeline, &kb_kfp_s_v2_pipeline, SVC2("PipelineService"),
     "CreatePipeline", "pipeline_server_create_requests", NULL, "CreatePipeline"},
    {2, "GET", "pipelines/*", kb_kfp_h_get_pipeline, NULL, SVC2("PipelineService"), "GetPipeline",
     "pipeline_server_get_requests", NULL, "GetPipeline"},
    {2, "DELETE", "pipelines/*", kb_kfp_h_delete_pipeline, NULL, SVC2("PipelineService"),
     "DeletePipeline", "pipeline_server_delete_requests", NULL, "DeletePipeline"},
    {2, "GET", "pipelines/*/versions", kb_kfp_h_list_versions, NULL, SVC2("PipelineService"),
     "ListPipelineVersions", "pipeline_server_list_version_requests", NULL,
     "ListPipelineVersions"},
    {2, "POST", "pipelines/*/versions", kb_kfp_h_create_version, &kb_kfp_s_v2_version,
     SVC2("PipelineService"), "CreatePipelineVersion", "pipeline_server_create_version_requests",
     NULL, "CreatePipelineVersion"},
    {2, "GET", "pipelines/*/versions/*", kb_kfp_h_get_version, NULL, SVC2("PipelineService"),
     "GetPipelineVersion", "pipeline_server_get_version_requests", NULL, "GetPipelineVersion"},
    {2, "DELETE", "pipelines/*/versions/*", kb_kfp_h_delete_version, NULL, SVC2("PipelineService"),
     "DeletePipelineVersion", "pipeline_server_delete_version_requests", NULL,
     "DeletePipelineVersion"},
    {2, "GET", "experiments", kb_kfp_h_list_experiments, NULL, SVC2("ExperimentService"),
     "ListExperiments", "experiment_server_list_requests", NULL, "ListExperiments"},
    {2, "POST", "experiments", kb_kfp_h_create_experiment, &kb_kfp_s_v2_experiment,
     SVC2("ExperimentService"), "CreateExperiment", "experiment_server_create_requests", NULL,
     "CreateExperiment"},
    {2, "GET", "experiments/*", kb_kfp_h_get_experiment, NULL, SVC2("ExperimentService"),
     "GetExperiment", "experiment_server_get_requests", NULL, "GetExperiment"},
    {2, "DELETE", "experiments/*", kb_kfp_h_delete_experiment, NULL, SVC2("ExperimentService"),
     "DeleteExperiment", "experiment_server_delete_requests", NULL, "DeleteExperiment"},
    {2, "POST", "experiments/*:archive", kb_kfp_h_archive_experiment, NULL,
     SVC2("ExperimentService"), "ArchiveExperiment", "experiment_server_archive_requests", NULL,
     "ArchiveExperiment"},
    {2, "POST", "experiments/*:unarchive", kb_kfp_h_unarchive_experiment, NULL,
     SVC2("ExperimentService"), "UnarchiveExperiment", "experiment_server_unarchive_requests",
     NULL, "UnarchiveExperiment"},
    {2, "GET", "runs", kb_kfp_h_list_runs, NULL, SVC2("RunService"), "ListRuns",
     "run_server_list_requests", NULL, "ListRuns"},
    {2, "POST", "runs", kb_kfp_h_create_run, &kb_kfp_s_v2_run, SVC2("RunService"), "CreateRun",
     "run_server_create_requests", NULL, "CreateRun"},
    {2, "GET", "runs/*", kb_kfp_h_get_run, NULL, SVC2("RunService"), "GetRun",
     "run_server_get_requests", NULL, "GetRun"},
    {2, "DELETE", "runs/*", kb_kfp_h_delete_run, NULL, SVC2("RunService"), "DeleteRun",
     "run_server_delete_requests", NULL, "DeleteRun"},
    {2, "POST", "runs/*:archive", kb_kfp_h_archive_run, NULL, SVC2("RunService"), "ArchiveRun",
     "run_server_archive_requests", NULL, "ArchiveRun"},
    {2, "POST", "runs/*:unarchive", kb_kfp_h_unarchive_run, NULL, SVC2("RunService"),
     "UnarchiveRun", "run_server_unarchive_requests", NULL, "UnarchiveRun"},
    {2, "POST", "runs/*:terminate", kb_kfp_h_terminate_run, NULL, SVC2("RunService"),
     "TerminateRun", "run_server_terminate_requests", NULL, "TerminateRun"},
    {2, "POST", "runs/*:retry", kb_kfp_h_retry_run, NULL, SVC2("RunService"), "RetryRun",
     "run_server_retry_requests", NULL, "RetryRun"},
    {2, "GET", "recurringruns", kb_kfp_h_list_recurring, NULL, SVC2("RecurringRunService"),
     "ListRecurringRuns", "job_server_list_requests", NULL, "ListRecurringRuns"},
    {2, "POST", "recurringruns", kb_kfp_h_create_recurring, &kb_kfp_s_v2_recurring,
     SVC2("RecurringRunService"), "CreateRecurringRun", "job_server_create_requests", NULL,
     "CreateRecurringRun"},
    {2, "GET", "recurringruns/*", kb_kfp_h_get_recurring, NULL, SVC2("RecurringRunService"),
     "GetRecurringRun", "job_server_get_requests", NULL, "GetRecurringRun"},
    {2, "DELETE", "recurringruns/*", kb_kfp_h_delete_recurring, NULL, SVC2("RecurringRunService"),
     "DeleteRecurringRun", "job_server_delete_requests", NULL, "DeleteRecurringRun"},
    {2, "POST", "recurringruns/*:enable", kb_kfp_h_enable_recurring, NULL,
     SVC2("RecurringRunService"), "EnableRecurringRun", "job_server_enable_requests", NULL,
     "EnableRecurringRun"},
    {2, "POST", "recurringruns/*:disable", kb_kfp_h_disable_recurring, NULL,
     SVC2("RecurringRunService"), "DisableRecurringRun", "job_server_disable_requests", NULL,
     "DisableRecurringRun"},
    /* ---- v1beta1 ---- */
    {1, "GET", "healthz", kb_kfp_h_healthz, NULL, NULL, NULL, NULL, NULL, "Healthz"},
    {1, "POST", "pipelines/upload", kb_kfp_h_upload_pipeline, NULL, NULL, NULL,
     "pipeline_upload_requests", "pipeline_version_upload_requests", "CreatePipeline"},
    {1, "POST", "pipelines/upload_version", kb_kfp_h_upload_version, NULL, NULL, NULL,
     "pipeline_version_upload_requests", NULL, "CreatePipelineVersion"},
    {1, "GET", "pipelines", kb_kfp_h_list_pipelines, NULL, SVC1("PipelineService"),
     "ListPipelinesV1", "pipeline_server_list_requests", NULL, "ListPipelines"},
    {1, "POST", "pipelines", kb_kfp_h_create_pipeline, &kb_kfp_s_v1_pipeline, SVC1("PipelineService"),
     "CreatePipelineV1", "pipeline_server_create_requests", NULL, "CreatePipeline"},
    {1, "GET", "pipelines/*", kb_kfp_h_get_pipeline, NULL, SVC1("PipelineService"), "GetPipelineV1",
     "pipeline_server_get_requests", NULL, "GetPipeline"},
    {1, "DELETE", "pipelines/*", kb_kfp_h_delete_pipeline, NULL, SVC1("PipelineService"),
     "DeletePipelineV1", "pipeline_server_delete_requests", NULL, "DeletePipeline"},
    {1, "GET", "pipelines/*/templates", kb_kfp_h_get_template, NULL, SVC1("PipelineService"),
     "GetTemplate", NULL, NULL, "GetTemplate"},
    {1, "POST", "pipelines/*/default_version/*", kb_kfp_h_update_default_version, NULL,
     SVC1("PipelineService"), "UpdatePipelineDefaultVersionV1",
     "pipeline_server_update_default_version_requests", NULL, "UpdatePipelineDefaultVersion"},
    {1, "GET", "namespaces/*/pipelines/*", kb_kfp_h_get_pipeline_by_name, NULL,
     SVC1("PipelineService"), "GetPipelineByNameV1", "pipeline_server_get_requests", NULL,
     "GetPipeline"},
    {1, "GET", "pipeline_versions", kb_kfp_h_list_versions, NULL, SVC1("PipelineService"),
     "ListPipelineVersionsV1", "pipeline_server_list_version_requests", NULL,
     "ListPipelineVersions"},
    {1, "POST", "pipeline_versions", kb_kfp_h_create_version, &kb_kfp_s_v1_version,
     SVC1("PipelineService"), "CreatePipelineVersionV1",
     "pipeline_server_create_version_requests", NULL, "CreatePipelineVersion"},
    {1, "GET", "pipeline_versions/*", kb_kfp_h_get_version, NULL, SVC1("PipelineService"),
     "GetPipelineVersionV1", "pipeline_server_get_version_requests", NULL, "GetPipelineVersion"},
    {1, "DELETE", "pipeline_versions/*", kb_kfp_h_delete_version, NULL, SVC1("PipelineService"),
     "DeletePipelineVersionV1", "pipeline_server_delete_version_requests", NULL,
     "DeletePipelineVersion"},
    {1, "GET", "pipeline_versions/*/templates", kb_kfp_h_get_version_template, NULL,
     SVC1("PipelineService"), "GetPipelineVersionTemplate", NULL, NULL, "GetTemplate"},
    {1, "GET", "experiments", kb_kfp_h_list_experiments, NULL, SVC1("ExperimentService"),
     "ListExperimentsV1", "experiment_server_list_requests", NULL, "ListExperiments"},
    {1, "POST", "experiments", kb_kfp_h_create_experiment, &kb_kfp_s_v1_experiment,
     SVC1("ExperimentService"), "CreateExperimentV1", "experiment_server_create_requests", NULL,
     "CreateExperiment"},
    {1, "GET", "experiments/*", kb_kfp_h_get_experiment, NULL, SVC1("ExperimentService"),
     "GetExperimentV1", "experiment_server_get_requests", NULL, "GetExperiment"},
    {1, "DELETE", "experiments/*", kb_kfp_h_delete_experiment, NULL, SVC1("ExperimentService"),
     "DeleteExperimentV1", "experiment_server_delete_requests", NULL, "DeleteExperiment"},
    {1, "POST", "experiments/*:archive", kb_kfp_h_archive_experiment, NULL,
     SVC1("ExperimentService"), "ArchiveExperimentV1", "experiment_server_archive_requests",
     NULL, "ArchiveExperiment"},
    {1, "POST", "experiments/*:unarchive", kb_kfp_h_unarchive_experiment, NULL,
     SVC1("ExperimentService"), "UnarchiveExperimentV1", "experiment_server_unarchive_requests",
     NULL, "UnarchiveExperiment"},
    {1, "GET", "runs", kb_kfp_h_list_runs, NULL, SVC1("RunService"), "ListRunsV1",
     "run_server_list_requests", NULL, "ListRuns"},
    {1, "POST", "runs", kb_kfp_h_create_run, &kb_kfp_s_v1_run, SVC1("RunService"), "CreateRunV1",
     "run_server_create_requests", NULL, "CreateRun"},
    {1, "GET", "runs/*", kb_kfp_h_get_run, NULL, SVC1("RunService"), "GetRunV1",
     "run_server_get_requests", NULL, "GetRun"},
    {1, "DELETE", "runs/*", kb_kfp_h_delete_run, NULL, SVC1("RunService"), "DeleteRunV1",
     "run_server_delete_requests", NULL, "DeleteRun"},
    {1, "POST", "runs/*:archive", kb_kfp_h_archive_run, NULL, SVC1("RunService"), "ArchiveRunV1",
     "run_server_archive_requests", NULL, "ArchiveRun"},
    {1, "POST", "runs/*:unarchive", kb_kfp_h_unarchive_run, NULL, SVC1("RunService"),
     "UnarchiveRunV1", "run_server_unarchive_requests", NULL, "UnarchiveRun"},
    {1, "POST", "runs/*/terminate", kb_kfp_h_terminate_run, NULL, SVC1("RunService"),
     "TerminateRunV1", "run_server_terminate_requests", NULL, "TerminateRun"},
    {1, "POST", "runs/*/retry", kb_kfp_h_retry_run, NULL, SVC1("RunService"), "RetryRunV1",
     "run_server_retry_requests", NULL, "RetryRun"},
    {1, "GET", "jobs", kb_kfp_h_list_recurring, NULL, SVC1("JobService"), "ListJobs",
     "job_server_list_requests", NULL, "ListRecurringRuns"},
    {1, "POST", "jobs", kb_kfp_h_create_recurring, &kb_kfp_s_v1_job, SVC1("JobService"), "CreateJob",
     "job_server_create_requests", NULL, "CreateRecurringRun"},
    {1, "GET", "jobs/*", kb_kfp_h_get_recurring, NULL, SVC1("JobService"), "GetJob",
     "job_server_get_requests", NULL, "GetRecurringRun"},
    {1, "DELETE", "jobs/*", kb_kfp_h_delete_recurring, NULL, SVC1("JobService"), "DeleteJob",
     "job_server_delete_requests", NULL, "DeleteRecurringRun"},
    {1, "POST", "jobs/*/enable", kb_kfp_h_enable_recurring, NULL, SVC1("JobService"), "EnableJob",
     "job_server_enable_requests", NULL, "EnableRecurringRun"},
    {1, "POST", "jobs/*/disable", kb_kfp_h_disable_recurring, NULL, SVC1("JobService"),
     "DisableJob", "job_server_disable_requests", NULL, "DisableRecurringRun"},
};

/* ---- delayed answers ---- */

struct kfp_pending {
  kb_vtimer timer;
  kfp_pending *next, *prev;
  kb_sim_kfp *kfp;
  kb_httpd_req *req;
  int status;
  char *body;
  size_t len;
};

static const kb_httpd_header json_headers[] = {{"Content-Type", "application/json"}};

static void unlink_pending(kb_sim_kfp *kfp, kfp_pending *p) {
  if (p->prev) p->prev->next = p->next;
  else kfp->pending = p->next;
  if (p->next) p->next->prev = p->prev;
}

static void free_pending(kfp_pending *p) {
  free(p->body);
  free(p);
}

static void on_delay(kb_vtimer *t) {
  kfp_pending *p = t->data;
  kb_httpd_respond(p->req, p->status, json_headers, 1, p->body, p->len);
  unlink_pending(p->kfp, p);
  free_pending(p);
}

static void answer(kb_sim_kfp *kfp, kfp_req *r, double delay_sim) {
  uint64_t origin;
  double speed;
  kb_sim_clock_params(kfp->sim, &origin, &speed);
  double ms = speed > 0 && delay_sim > 0 ? delay_sim / speed * 1000.0 : 0;
  kb_httpd_req_set_timing(r->http, ms, delay_sim > 0 ? delay_sim * 1000.0 : 0);
  kfp_pending *p = ms > 0 ? calloc(1, sizeof *p) : NULL;
  if (p) kb_vtimer_init(kb_sim_clock(kfp->sim), &p->timer, on_delay, p);
  if (!p || kb_vtimer_start(&p->timer, delay_sim) != 0) {
    free(p);
    kb_httpd_respond(r->http, r->status, json_headers, 1, r->out.data, r->out.len);
    return;
  }
  p->kfp = kfp;
  p->req = r->http;
  p->status = r->status;
  p->body = kb_buf_detach(&r->out, &p->len);
  p->next = kfp->pending;
  if (kfp->pending) kfp->pending->prev = p;
  kfp->pending = p;
}

/* ---- request parsing ---- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static char *decode(const char *s, size_t n, int plus) {
  char *out = malloc(n + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      *o++ = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else {
      *o++ = plus && s[i] == '+' ? ' ' : s[i];
    }
  }
  *o = 0;
  return out;
}

static void parse_query(kfp_req *r, const char *q) {
  while (*q && r->n_query < KFP_MAX_QUERY) {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    if (n) {
      size_t kn = eq ? (size_t)(eq - q) : n;
      r->query[r->n_query].key = decode(q, kn, 1);
      r->query[r->n_query].value = eq ? decode(eq + 1, n - kn - 1, 1) : kb_kfp_strdup("");
      r->n_query++;
    }
    q += n + (amp != NULL);
  }
}

const char *kb_kfp_query(const kfp_req *r, const char *key) {
  for (size_t i = 0; i < r->n_query; i++)
    if (r->query[i].key && !strcmp(r->query[i].key, key)) return r->query[i].value;
  return NULL;
}

/* Splits the path after the version prefix; a ':' in the last segment
 * starts grpc-gateway's custom verb. Returns -1 on too many segments. */
static int split_path(kfp_req *r, const char *rest) {
  while (*rest) {
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (r->n_segs == KFP_MAX_SEGS) return -1;
    if (!slash) {
      const char *colon = memchr(rest, ':', n);
      if (colon) {
        r->verb = decode(colon + 1, n - (size_t)(colon - rest) - 1, 0);
        n = (size_t)(colon - rest);
      }
    }
    r->segs[r->n_segs++] = decode(rest, n, 0);
    rest += n + (slash != NULL);
    if (!slash) break;
    if (!*rest) r->segs[r->n_segs++] = kb_kfp_strdup(""); /* trailing slash */
  }
  return 0;
}

static int route_matches(const route *rt, kfp_req *r) {
  const char *p = rt->pattern;
  size_t i = 0, np = 0;
  const char *verb = NULL;
  while (*p) {
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    const char *colon = memchr(p, ':', n);
    size_t sn = colon ? (size_t)(colon - p) : n;
    if (colon) verb = colon + 1;
    if (i >= r->n_segs) return 0;
    if (sn == 1 && p[0] == '*') {
      if (!*r->segs[i]) return 0;
      if (np < 4) r->params[np++] = r->segs[i];
    } else if (strlen(r->segs[i]) != sn || memcmp(r->segs[i], p, sn)) {
      return 0;
    }
    i++;
    p += n + (slash != NULL);
  }
  if (i != r->n_segs) return 0;
  if (verb ? !r->verb || strcmp(verb, r->verb) : r->verb != NULL) return 0;
  return 1;
}

static void req_free(kfp_req *r) {
  for (size_t i = 0; i < r->n_segs; i++) free(r->segs[i]);
  for (size_t i = 0; i < r->n_query; i++) free(r->query[i].key), free(r->query[i].value);
  free(r->verb);
  cJSON_Delete(r->body);
  kb_buf_free(&r->out);
}

static void dispatch(kb_sim_kfp *kfp, kfp_req *r) {
  const route *found = NULL;
  int path_seen = 0;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    const route *rt = &routes[i];
    if (rt->ver != r->ver || !route_matches(rt, r)) continue;
    path_seen = 1;
    if (!strcmp(rt->method, r->method) ||
        (!strcmp(rt->method, "GET") && !strcmp(r->method, "HEAD"))) {
      found = rt;
      break;
    }
  }
  if (!found) {
    r->latency_endpoint = "default";
    /* grpc-gateway's routing errors: 405 becomes Unimplemented (501) */
    if (path_seen) kb_kfp_error(r, KFP_UNIMPLEMENTED, NULL, "Method Not Allowed");
    else kb_kfp_error(r, KFP_NOT_FOUND, NULL, "Not Found");
    return;
  }
  r->service = found->service;
  r->grpc_method = found->grpc_method;
  r->latency_endpoint = found->latency;
  if (found->counter) kb_kfp_metrics_inc(kfp->metrics, found->counter);
  if (found->counter2) kb_kfp_metrics_inc(kfp->metrics, found->counter2);
  if (found->body) {
    size_t len;
    const char *text = kb_httpd_req_body(r->http, &len);
    char err[400];
    int bad;
    r->body = kb_kfp_parse_body(text, len, found->body, &bad, err, sizeof err);
    if (bad) {
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, NULL, "%s", err);
      return;
    }
  }
  found->fn(r);
}

int kb_sim_kfp_handle(kb_sim_kfp *kfp, kb_httpd_req *req) {
  return kb_sim_kfp_handle_path(kfp, req, kb_httpd_req_path(req));
}

int kb_sim_kfp_handle_path(kb_sim_kfp *kfp, kb_httpd_req *req, const char *path) {
  int ver = !strncmp(path, "/apis/v1beta1/", 14) ? 1 : !strncmp(path, "/apis/v2beta1/", 14) ? 2 : 0;
  if (!ver) return 0;
  if (kb_kfp_fetch_intercept(kfp, req, path)) return 1; /* an http(s) pipeline URL: fetched first */
  kb_sim_sync(kfp->sim);
  kb_kfp_schedule_tick(kfp);
  kfp_req r;
  memset(&r, 0, sizeof r);
  r.kfp = kfp;
  r.http = req;
  r.ver = ver;
  r.method = kb_httpd_req_method(req);
  r.status = 500;
  parse_query(&r, kb_httpd_req_query(req));
  if (split_path(&r, path + 14)) kb_kfp_error(&r, KFP_NOT_FOUND, NULL, "Not Found");
  else dispatch(kfp, &r);
  if (!r.out.len) kb_kfp_error(&r, KFP_INTERNAL, NULL, "no answer");
  double lat = kb_sim_api_latency(kfp->sim, r.latency_endpoint ? r.latency_endpoint : "default",
                                  r.stored_rows, r.items);
  if (r.service) kb_kfp_metrics_grpc(kfp->metrics, r.service, r.grpc_method, r.grpc_code, lat);
  answer(kfp, &r, lat);
  req_free(&r);
  kb_kfp_schedule_tick(kfp);
  kb_kfp_store_sweep(kfp); /* the answer is serialised: nothing borrows from the store */
  return 1;
}

void kb_kfp_h_healthz(kfp_req *r) {
  kb_buf_clear(&r->out);
  kb_buf_appendf(&r->out,
                 "{\"commit_sha\":\"7b70c7b95f6832772efd6fd0029a4024491a0f44\",\"tag_name\":"
                 "\"2.17.0\",\"multi_user\":false%s}",
                 r->ver == 2 ? ",\"pipeline_store\":\"database\"" : "");
  r->status = 200;
  r->grpc_code = KFP_OK;
}

/* ---- lifecycle ---- */

static kfp_experiment *default_experiment(kb_sim_kfp *kfp) {
  kfp_experiment *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->id = kb_kfp_uuid(kfp);
  e->name = kb_kfp_strdup("Default");
  e->description = kb_kfp_strdup("All runs created without specifying an experiment will be "
                              "grouped here.");
  e->created_at = kb_kfp_now_unix(kfp);
  e->seq = ++kfp->seq;
  if (!e->id || !e->name || !e->description ||
      kb_kfp_store_add(kfp, KFP_EXPERIMENT, e->id, e)) {
    free(e->id), free(e->name), free(e->description), free(e);
    return NULL;
  }
  return e;
}

kb_sim_kfp *kb_sim_kfp_new(kb_sim *sim, uv_loop_t *loop) {
  kb_sim_kfp *kfp = calloc(1, sizeof *kfp);
  if (!kfp) return NULL;
  kfp->sim = sim;
  kfp->loop = loop;
  /* ids are deterministic per simulator config + seed + call sequence */
  kb_sim_rng_seed(&kfp->rng, kb_sim_seed_mix(sim->seed, 0x6b6670 /* "kfp" */, 1));
  kfp->metrics = kb_kfp_metrics_new();
  kfp_experiment *e = kfp->metrics ? default_experiment(kfp) : NULL;
  if (!e) {
    kb_sim_kfp_free(kfp);
    return NULL;
  }
  if (kb_sim_clock(sim)) {
    kb_vtimer_init(kb_sim_clock(sim), &kfp->sched_timer, kb_kfp_on_sched, kfp);
    kfp->has_clock = 1;
  }
  kfp->default_experiment_id = e->id;
  return kfp;
}

void kb_sim_kfp_free(kb_sim_kfp *kfp) {
  if (!kfp) return;
  while (kfp->pending) {
    kfp_pending *p = kfp->pending;
    static const char body[] = "{\"code\":14,\"message\":\"the simulator is shutting down\"}";
    kb_httpd_respond(p->req, 503, json_headers, 1, body, sizeof body - 1);
    unlink_pending(kfp, p);
    kb_vtimer_stop(&p->timer);
    free_pending(p);
  }
  kb_kfp_fetch_free(kfp);
  if (kfp->has_clock) kb_vtimer_stop(&kfp->sched_timer);
  kb_kfp_store_free(kfp);
  kb_kfp_metrics_free(kfp->metrics);
  free(kfp);
}

void kb_sim_kfp_metrics(kb_sim_kfp *kfp, kb_buf *out) {
  kb_kfp_metrics_write(kfp->metrics, kfp, out);
}

size_t kb_sim_kfp_run_count(const kb_sim_kfp *kfp) {
  return kfp->runs.n;
}

int kb_sim_kfp_run_at(const kb_sim_kfp *kfp, size_t i, kb_sim_kfp_run_ref *out) {
  if (i >= kfp->runs.n) return KB_SIM_ENOENT;
  const kfp_run *run = kfp->runs.items[i];
  kb_sim_run_info ri;
  memset(&ri, 0, sizeof ri);
  if (run->sim_run >= 0) kb_sim_run_get(kfp->sim, run->sim_run, &ri);
  *out = (kb_sim_kfp_run_ref){run->id, run->display_name, run->experiment_id, ri.namespace_,
                              run->recurring_run_id, run->sim_run, run->deleted, run->archived};
  return 0;
}

const char *kb_sim_kfp_run_id_of(const kb_sim_kfp *kfp, int sim_index) {
  const kfp_run *run = kb_kfp_run_of_sim(kfp, sim_index);
  return run ? run->id : NULL;
}

void kb_sim_kfp_stats_get(const kb_sim_kfp *kfp, kb_sim_kfp_stats *out) {
  memset(out, 0, sizeof *out);
  out->pipelines = kfp->pipelines.n;
  out->versions = kfp->versions.n;
  out->experiments = kfp->experiments.n;
  out->runs = kfp->runs.n;
  out->recurring = kfp->recurring.n;
  out->live_pipelines = kb_kfp_live_count(&kfp->pipelines);
  out->live_versions = kb_kfp_live_count(&kfp->versions);
  out->live_experiments = kb_kfp_live_count(&kfp->experiments);
  out->live_runs = kb_kfp_live_count(&kfp->runs);
  out->live_recurring = kb_kfp_live_count(&kfp->recurring);
  out->index_entries = kfp->index_n;
  out->index_slots = kfp->index_cap;
  for (size_t i = 0; i < kfp->versions.n; i++) {
    const kfp_version *v = kfp->versions.items[i];
    out->sim_pipelines += 1 + v->n_cache;
  }
  out->sim_map_slots = kfp->sim_to_run_cap;
  out->compactions = kfp->compactions;
  out->kept_versions = kfp->versions.n_kept;
}
