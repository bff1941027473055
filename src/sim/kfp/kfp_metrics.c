/* The API server's Prometheus series: KFP's per-handler counters and
 * object gauges (names and help texts as the server registers them), and
 * go-grpc-prometheus' grpc_server_* series for the gRPC methods behind
 * the gateway. Handling time is the modelled latency in sim seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfp_internal.h"

static const char *const counters[][2] = {
    {"experiment_server_create_requests", "The total number of CreateExperiment requests"},
    {"experiment_server_get_requests", "The total number of GetExperiment requests"},
    {"experiment_server_list_requests", "The total number of ListExperimentsV1 requests"},
    {"experiment_server_delete_requests", "The total number of DeleteExperiment requests"},
    {"experiment_server_archive_requests", "The total number of ArchiveExperiment requests"},
    {"experiment_server_unarchive_requests", "The total number of UnarchiveExperiment requests"},
    {"job_server_create_requests", "The total number of CreateJob requests"},
    {"job_server_get_requests", "The total number of GetJob requests"},
    {"job_server_list_requests", "The total number of ListJobs requests"},
    {"job_server_delete_requests", "The total number of DeleteJob requests"},
    {"job_server_disable_requests", "The total number of DisableJob requests"},
    {"job_server_enable_requests", "The total number of EnableJob requests"},
    {"pipeline_server_create_requests", "The total number of CreatePipeline requests"},
    {"pipeline_server_get_requests", "The total number of GetPipeline requests"},
    {"pipeline_server_list_requests", "The total number of ListPipelines requests"},
    {"pipeline_server_delete_requests", "The total number of DeletePipeline requests"},
    {"pipeline_server_update_requests", "The total number of UpdatePipeline requests"},
    {"pipeline_server_create_version_requests", "The total number of CreatePipelineVersion requests"},
    {"pipeline_server_get_version_requests", "The total number of GetPipelineVersion requests"},
    {"pipeline_server_list_version_requests", "The total number of ListPipelineVersions requests"},
    {"pipeline_server_delete_version_requests", "The total number of DeletePipelineVersion requests"},
    {"pipeline_server_update_version_requests", "The total number of UpdatePipelineVersion requests"},
    {"pipeline_server_update_default_version_requests",
     "The total number of UpdatePipelineDefaultVersion requests"},
    {"pipeline_upload_requests", "The number of pipeline upload requests"},
    {"pipeline_version_upload_requests", "The number of pipeline version upload requests"},
    {"run_server_create_requests", "The total number of CreateRun requests"},
    {"run_server_get_requests", "The total number of GetRun requests"},
    {"run_server_list_requests", "The total number of ListRuns requests"},
    {"run_server_delete_requests", "The total number of DeleteRun requests"},
    {"run_server_archive_requests", "The total number of ArchiveRun requests"},
    {"run_server_unarchive_requests", "The total number of UnarchiveRun requests"},
    {"run_server_report_metrics_requests", "The total number of ReportRunMetrics requests"},
    {"run_server_read_artifact_requests", "The total number of ReadArtifact requests"},
    {"run_server_terminate_requests", "The total number of TerminateRun requests"},
    {"run_server_retry_requests", "The total number of RetryRun requests"},
};
#define N_COUNTERS (sizeof counters / sizeof counters[0])

static const double buckets[] = {0.005, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 15, 30, 60, 120, 300};
#define N_BUCKETS (sizeof buckets / sizeof buckets[0])

typedef struct handled {
  const char *service, *method; /* static strings of the route table */
  int code;
  uint64_t n;
} handled;

typedef struct timing {
  const char *service, *method;
  uint64_t started;
  uint64_t counts[N_BUCKETS];
  uint64_t count;
  double sum;
} timing;

struct kfp_metrics {
  uint64_t values[N_COUNTERS];
  handled *h;
  size_t nh, caph;
  timing *t;
  size_t nt, capt;
};

kfp_metrics *kb_kfp_metrics_new(void) {
  return calloc(1, sizeof(kfp_metrics));
}

void kb_kfp_metrics_free(kfp_metrics *m) {
  if (!m) return;
  free(m->h);
  free(m->t);
  free(m);
}

void kb_kfp_metrics_inc(kfp_metrics *m, const char *counter) {
  for (size_t i = 0; i < N_COUNTERS; i++)
    if (!strcmp(counters[i][0], counter)) {
      m->values[i]++;
      return;
    }
}

static timing *timing_of(kfp_metrics *m, const char *service, const char *method) {
  for (size_t i = 0; i < m->nt; i++)
    if (!strcmp(m->t[i].service, service) && !strcmp(m->t[i].method, method)) return &m->t[i];
  if (m->nt == m->capt) {
    size_t cap = m->capt ? m->capt * 2 : 16;
    timing *t = realloc(m->t, cap * sizeof *t);
    if (!t) return NULL;
    m->t = t;
    m->capt = cap;
  }
  timing *t = &m->t[m->nt++];
  memset(t, 0, sizeof *t);
  t->service = service;
  t->method = method;
  return t;
}

void kb_kfp_metrics_grpc(kfp_metrics *m, const char *service, const char *method, int code,
                      double seconds) {
  timing *t = timing_of(m, service, method);
  if (t) {
    t->started++;
    t->count++;
    t->sum += seconds;
    for (size_t b = 0; b < N_BUCKETS; b++)
      if (seconds <= buckets[b]) t->counts[b]++;
  }
  for (size_t i = 0; i < m->nh; i++)
    if (m->h[i].code == code && !strcmp(m->h[i].service, service) &&
        !strcmp(m->h[i].method, method)) {
      m->h[i].n++;
      return;
    }
  if (m->nh == m->caph) {
    size_t cap = m->caph ? m->caph * 2 : 16;
    handled *h = realloc(m->h, cap * sizeof *h);
    if (!h) return;
    m->h = h;
    m->caph = cap;
  }
  m->h[m->nh++] = (handled){service, method, code, 1};
}

static void gauge(kb_buf *out, const char *name, const char *help, size_t v) {
  kb_buf_appendf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %zu\n", name, help, name, name, v);
}

static void fmt_le(char *buf, size_t n, double le) {
  snprintf(buf, n, "%g", le);
}

void kb_kfp_metrics_write(kfp_metrics *m, const kb_sim_kfp *kfp, kb_buf *out) {
  for (size_t i = 0; i < N_COUNTERS; i++)
    kb_buf_appendf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", counters[i][0],
                   counters[i][1], counters[i][0], counters[i][0],
                   (unsigned long long)m->values[i]);
  gauge(out, "run_server_run_count", "The current number of runs in Kubeflow Pipelines instance",
        kb_kfp_live_count(&kfp->runs));
  gauge(out, "pipeline_server_pipeline_count",
        "The current number of pipelines in Kubeflow Pipelines instance",
        kb_kfp_live_count(&kfp->pipelines));
  gauge(out, "pipeline_server_pipeline_version_count",
        "The current number of pipeline versions in Kubeflow Pipelines instance",
        kb_kfp_live_count(&kfp->versions));
  gauge(out, "experiment_server_run_count",
        "The current number of experiments in Kubeflow Pipelines instance",
        kb_kfp_live_count(&kfp->experiments));
  gauge(out, "job_server_job_count", "The current number of jobs in Kubeflow Pipelines instance",
        kb_kfp_live_count(&kfp->recurring));
  if (!m->nt) return;
  kb_buf_appendf(out, "# HELP grpc_server_handled_total Total number of RPCs completed on the "
                      "server, regardless of success or failure.\n"
                      "# TYPE grpc_server_handled_total counter\n");
  for (size_t i = 0; i < m->nh; i++)
    kb_buf_appendf(out,
                   "grpc_server_handled_total{grpc_code=\"%s\",grpc_method=\"%s\","
                   "grpc_service=\"%s\",grpc_type=\"unary\"} %llu\n",
                   kb_kfp_code_name(m->h[i].code), m->h[i].method, m->h[i].service,
                   (unsigned long long)m->h[i].n);
  kb_buf_appendf(out, "# HELP grpc_server_handling_seconds Histogram of response latency "
                      "(seconds) of gRPC that had been application-level handled by the "
                      "server.\n# TYPE grpc_server_handling_seconds histogram\n");
  for (size_t i = 0; i < m->nt; i++) {
    const timing *t = &m->t[i];
    char labels[256], le[32];
    snprintf(labels, sizeof labels, "grpc_method=\"%s\",grpc_service=\"%s\",grpc_type=\"unary\"",
             t->method, t->service);
    for (size_t b = 0; b < N_BUCKETS; b++) {
      fmt_le(le, sizeof le, buckets[b]);
      kb_buf_appendf(out, "grpc_server_handling_seconds_bucket{%s,le=\"%s\"} %llu\n", labels, le,
                     (unsigned long long)t->counts[b]);
    }
    kb_buf_appendf(out, "grpc_server_handling_seconds_bucket{%s,le=\"+Inf\"} %llu\n", labels,
                   (unsigned long long)t->count);
    kb_buf_appendf(out, "grpc_server_handling_seconds_sum{%s} %.9g\n", labels, t->sum);
    kb_buf_appendf(out, "grpc_server_handling_seconds_count{%s} %llu\n", labels,
                   (unsigned long long)t->count);
  }
  kb_buf_appendf(out, "# HELP grpc_server_started_total Total number of RPCs started on the "
                      "server.\n# TYPE grpc_server_started_total counter\n");
  for (size_t i = 0; i < m->nt; i++)
    kb_buf_appendf(out,
                   "grpc_server_started_total{grpc_method=\"%s\",grpc_service=\"%s\","
                   "grpc_type=\"unary\"} %llu\n",
                   m->t[i].method, m->t[i].service, (unsigned long long)m->t[i].started);
}
