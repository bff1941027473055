/* The simulator server's own endpoints: the admin API under /sim/v1/
 * (status, faults) and the Prometheus /metrics. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "kb/buf.h"
#include "kb/http_server.h"
#include "kb/json.h"
#include "kb/k8s_api.h"
#include "kb/k8s_proto.h"
#include "kb/k8s_store.h"
#include "kb/log.h"
#include "kb/sim_kfp.h"
#include "kb/sim_server.h"
#include "kb/vclock.h"
#include "kb/yaml.h"
#include "k8s_apps.h"
#include "sim_api_faults.h"
#include "sim_glue.h"
#include "argo_server.h"
#include "sim_server_internal.h"

static const char *api_names[API_COUNT] = {"metrics", "admin", "kfp", "kubernetes", "argo", "other"};

/* ---- admin API -------------------------------------------------------------- */

static cJSON *status_json(kb_sim_server *s) {
  kb_sim_stats st;
  kb_sim_stats_get(s->sim, &st);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "sim_time", kb_sim_now(s->sim));
  cJSON_AddNumberToObject(o, "speed", s->speed);
  cJSON_AddNumberToObject(o, "epoch", s->epoch);
  cJSON_AddStringToObject(o, "profile", kb_sim_config_of(s->sim)->profile);
  cJSON *c = cJSON_AddObjectToObject(o, "cluster");
  cJSON_AddNumberToObject(c, "nodes_ready", (double)st.nodes_ready);
  cJSON_AddNumberToObject(c, "nodes_total", (double)st.nodes_total);
  cJSON_AddNumberToObject(c, "pods_pending", (double)st.pods_pending);
  cJSON_AddNumberToObject(c, "pods_unschedulable", (double)st.pods_unschedulable);
  cJSON_AddNumberToObject(c, "pods_running", (double)st.pods_running);
  cJSON_AddNumberToObject(c, "pods_succeeded", (double)st.pods_succeeded);
  cJSON_AddNumberToObject(c, "pods_failed", (double)st.pods_failed);
  cJSON_AddNumberToObject(c, "runs_total", (double)st.runs_total);
  cJSON_AddNumberToObject(c, "runs_active", (double)st.runs_active);
  cJSON_AddNumberToObject(c, "cpu_capacity_m", (double)st.cpu_capacity_m);
  cJSON_AddNumberToObject(c, "cpu_requested_m", (double)st.cpu_requested_m);
  cJSON_AddItemToObject(o, "api_faults", kb_sim_api_faults_json(&s->faults));
  return o;
}

static int apply_string_fault(kb_sim_server *s, const cJSON *body, const char *key,
                              int (*fn)(kb_sim *, const char *, kb_sim_error *),
                              kb_sim_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
  if (!v) return 0;
  if (!cJSON_IsString(v)) {
    kb__srv_set_err(err, KB_SIM_EINVAL, "%s: a pool name expected", key);
    return -1;
  }
  return fn(s->sim, v->valuestring, err) < 0 ? -1 : 0;
}

static int apply_node_fault(kb_sim_server *s, const cJSON *body, const char *key, int fail,
                            kb_sim_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
  if (!v) return 0;
  int node = cJSON_IsString(v) ? kb_sim_node_find(s->sim, v->valuestring) : -1;
  if (node < 0) {
    kb__srv_set_err(err, KB_SIM_ENOENT, "%s: no such node", key);
    return -1;
  }
  int r = fail ? kb_sim_node_fail(s->sim, node, err) : kb_sim_node_restore(s->sim, node, err);
  return r < 0 ? -1 : 0;
}

/* POST /sim/v1/faults {api: {...}, pool_fail, pool_restore, node_fail,
 * node_restore, step_fail_prob} */
static int apply_faults(kb_sim_server *s, const cJSON *body, kb_sim_error *err) {
  static const char *known[] = {"api", "pool_fail", "pool_restore", "node_fail",
                                "node_restore", "step_fail_prob", NULL};
  for (const cJSON *c = body->child; c; c = c->next) {
    int ok = 0;
    for (const char **k = known; *k; k++) ok |= strcmp(c->string, *k) == 0;
    if (!ok) {
      kb__srv_set_err(err, KB_SIM_EINVAL, "unknown fault '%s'", c->string);
      return -1;
    }
  }
  const cJSON *api = cJSON_GetObjectItemCaseSensitive(body, "api");
  if (api && kb_sim_api_faults_apply(&s->faults, api, err) < 0) return -1;
  if (apply_string_fault(s, body, "pool_fail", kb_sim_pool_fail, err) ||
      apply_string_fault(s, body, "pool_restore", kb_sim_pool_restore, err) ||
      apply_node_fault(s, body, "node_fail", 1, err) ||
      apply_node_fault(s, body, "node_restore", 0, err))
    return -1;
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "step_fail_prob");
  if (p && (!cJSON_IsNumber(p) || kb_sim_set_step_fail_prob(s->sim, p->valuedouble, err) < 0)) {
    if (!cJSON_IsNumber(p))
      kb__srv_set_err(err, KB_SIM_EINVAL, "step_fail_prob: a probability expected", NULL);
    return -1;
  }
  return 0;
}

static int admin_authorized(kb_sim_server *s, kb_httpd_req *req) {
  if (s->loopback && !s->admin_token) return 1;
  const char *auth = kb_httpd_req_header(req, "Authorization");
  return s->admin_token && auth && strncmp(auth, "Bearer ", 7) == 0 &&
         strcmp(auth + 7, s->admin_token) == 0;
}

void kb__srv_handle_admin(kb_sim_server *s, kb_httpd_req *req) {
  const char *path = kb_httpd_req_path(req), *method = kb_httpd_req_method(req);
  if (!admin_authorized(s, req)) {
    kb__srv_respond_text(req, 401, "text/plain",
                         "the admin API needs 'Authorization: Bearer <admin token>'\n");
    return;
  }
  if (strcmp(path, "/sim/v1/status") == 0 && strcmp(method, "GET") == 0) {
    kb__srv_respond_json(req, 200, status_json(s));
    return;
  }
  if (strcmp(path, "/sim/v1/faults") == 0 && strcmp(method, "POST") == 0) {
    size_t len;
    const char *text = kb_httpd_req_body(req, &len);
    cJSON *body = cJSON_ParseWithLength(text, len);
    kb_sim_error err = {0};
    if (!cJSON_IsObject(body)) {
      kb__srv_respond_text(req, 400, "text/plain", "the body must be a JSON object of faults\n");
    } else if (apply_faults(s, body, &err) < 0) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "error", err.message);
      kb__srv_respond_json(req, 400, e);
    } else {
      kb__srv_respond_json(req, 200, status_json(s));
    }
    cJSON_Delete(body);
    return;
  }
  kb__srv_respond_text(req, 404, "text/plain",
                       "admin API: GET /sim/v1/status, POST /sim/v1/faults\n");
}

/* ---- /metrics ------------------------------------------------------------- */

/* kb_httpd's on_response hook: the time to each response head, scaled to
 * sim seconds (for a delayed answer, the latency the model chose). */
void kb__srv_on_response(kb_httpd_req *req, int status, double ms, void *ud) {
  (void)status;
  kb_sim_server *s = ud;
  lat_hist *h = &s->latency[kb__srv_classify(kb_httpd_req_path(req))];
  double sec = ms / 1000.0 * (s->speed > 0 ? s->speed : 1);
  size_t i = 0;
  while (i < N_LAT_BOUNDS && sec > lat_bounds[i]) i++;
  h->counts[i]++;
  h->n++;
  h->sum += sec;
}

static void latency_metrics(kb_sim_server *s, kb_buf *out) {
  kb_buf_appendf(out, "# HELP kbrun_sim_http_request_duration_seconds Time to the response head "
                      "in sim seconds: the modelled latency (0 where the API models none), by API.\n"
                      "# TYPE kbrun_sim_http_request_duration_seconds histogram\n");
  for (int a = 0; a < API_COUNT; a++) {
    const lat_hist *h = &s->latency[a];
    uint64_t cum = 0;
    for (size_t i = 0; i <= N_LAT_BOUNDS; i++) {
      cum += h->counts[i];
      char le[32];
      if (i < N_LAT_BOUNDS) snprintf(le, sizeof le, "%g", lat_bounds[i]);
      else snprintf(le, sizeof le, "+Inf");
      kb_buf_appendf(out, "kbrun_sim_http_request_duration_seconds_bucket{api=\"%s\",le=\"%s\"} %llu\n",
                     api_names[a], le, (unsigned long long)cum);
    }
    kb_buf_appendf(out, "kbrun_sim_http_request_duration_seconds_sum{api=\"%s\"} %.6f\n"
                        "kbrun_sim_http_request_duration_seconds_count{api=\"%s\"} %llu\n",
                   api_names[a], h->sum, api_names[a], (unsigned long long)h->n);
  }
}

void kb__srv_handle_metrics(kb_sim_server *s, kb_httpd_req *req) {
  kb_buf out = KB_BUF_INIT;
  kb_sim_stats st;
  kb_sim_stats_get(s->sim, &st);
  kb_buf_appendf(&out, "# HELP kbrun_sim_http_requests_total Requests served by the simulator, by API.\n"
                       "# TYPE kbrun_sim_http_requests_total counter\n");
  for (int i = 0; i < API_COUNT; i++)
    kb_buf_appendf(&out, "kbrun_sim_http_requests_total{api=\"%s\"} %llu\n", api_names[i],
                   (unsigned long long)s->requests[i]);
  static const char *fault_names[] = {"none", "error", "throttle", "reset", "stall"};
  kb_buf_appendf(&out, "# HELP kbrun_sim_faults_injected_total API faults injected, by kind.\n"
                       "# TYPE kbrun_sim_faults_injected_total counter\n");
  for (int i = 1; i < 5; i++)
    kb_buf_appendf(&out, "kbrun_sim_faults_injected_total{kind=\"%s\"} %llu\n", fault_names[i],
                   (unsigned long long)s->faults_injected[i]);
  kb_buf_appendf(&out, "# HELP kbrun_sim_time_seconds The simulator's virtual clock.\n"
                       "# TYPE kbrun_sim_time_seconds gauge\nkbrun_sim_time_seconds %.3f\n",
                 kb_sim_now(s->sim));
  kb_buf_appendf(&out, "# HELP kbrun_sim_pods Pods in the modelled cluster, by phase.\n"
                       "# TYPE kbrun_sim_pods gauge\n"
                       "kbrun_sim_pods{phase=\"Pending\"} %zu\nkbrun_sim_pods{phase=\"Running\"} %zu\n"
                       "kbrun_sim_pods{phase=\"Succeeded\"} %zu\nkbrun_sim_pods{phase=\"Failed\"} %zu\n",
                 st.pods_pending, st.pods_running, st.pods_succeeded, st.pods_failed);
  kb_buf_appendf(&out, "# HELP kbrun_sim_nodes_ready Ready nodes in the modelled cluster.\n"
                       "# TYPE kbrun_sim_nodes_ready gauge\nkbrun_sim_nodes_ready %zu\n",
                 st.nodes_ready);
  kb_k8s_store_stats ks;
  kb_k8s_store_usage(s->store, &ks);
  kb_buf_appendf(&out, "# HELP kbrun_sim_k8s_objects Objects in the Kubernetes view (every type).\n"
                       "# TYPE kbrun_sim_k8s_objects gauge\nkbrun_sim_k8s_objects %zu\n"
                       "# HELP kbrun_sim_k8s_object_bytes Bytes holding the view's objects (their JSON, deflated).\n"
                       "# TYPE kbrun_sim_k8s_object_bytes gauge\nkbrun_sim_k8s_object_bytes %zu\n"
                       "# HELP kbrun_sim_k8s_object_trees Objects of the view held as parsed trees now.\n"
                       "# TYPE kbrun_sim_k8s_object_trees gauge\nkbrun_sim_k8s_object_trees %zu\n"
                       "# HELP kbrun_sim_k8s_mirror_backlog Model objects and events not mirrored yet.\n"
                       "# TYPE kbrun_sim_k8s_mirror_backlog gauge\nkbrun_sim_k8s_mirror_backlog %zu\n"
                       "# HELP kbrun_sim_k8s_longest_turn_seconds CPU time of the longest loop turn of the mirror and of lists.\n"
                       "# TYPE kbrun_sim_k8s_longest_turn_seconds gauge\n"
                       "kbrun_sim_k8s_longest_turn_seconds{what=\"mirror\"} %.6f\n"
                       "kbrun_sim_k8s_longest_turn_seconds{what=\"list\"} %.6f\n"
                       "# HELP kbrun_sim_k8s_list_slices_total Loop turns taken by lists written in slices.\n"
                       "# TYPE kbrun_sim_k8s_list_slices_total counter\nkbrun_sim_k8s_list_slices_total %llu\n",
                 ks.objects, ks.stored_bytes, ks.hot, s->glue ? kb_glue_backlog(s->glue) : 0,
                 s->glue ? kb_glue_longest_turn(s->glue) : 0, kb_k8s_api_longest_slice(s->k8s),
                 (unsigned long long)kb_k8s_api_list_slices(s->k8s));
  latency_metrics(s, &out);
  kb_sim_kfp_metrics(s->kfp, &out);
  kb_httpd_header h[] = {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}};
  kb_httpd_respond(req, 200, h, 1, out.data ? out.data : "", out.len);
  kb_buf_free(&out);
}
