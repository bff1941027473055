/* The simulator server: a thread with its own loop running the model and
 * serving the REST APIs. Requests are dispatched by path: /metrics, the
 * admin API under /sim/v1/, KFP (/apis/v1beta1, /apis/v2beta1), then the
 * Kubernetes API (which also carries the Argo and training-job CRDs). API
 * faults are rolled before dispatch. */
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

enum { API_METRICS, API_ADMIN, API_KFP, API_K8S, API_ARGO, API_OTHER, API_COUNT };
static const char *api_names[API_COUNT] = {"metrics", "admin", "kfp", "kubernetes", "argo", "other"};

/* Response latency buckets (sim seconds) for /metrics. */
static const double lat_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define N_LAT_BOUNDS (sizeof lat_bounds / sizeof lat_bounds[0])

typedef struct lat_hist {
  uint64_t counts[N_LAT_BOUNDS + 1];
  uint64_t n;
  double sum;
} lat_hist;

struct kb_sim_server {
  char *host, *profile, *config_yaml, *config_name, *admin_token, *pipeline_dir;
  uint64_t header_timeout_ms, body_timeout_ms, idle_timeout_ms, max_connections;
  int want_port;
  uint64_t seed;
  double want_speed;

  uv_thread_t thread;
  uv_loop_t own_loop;   /* with a thread of its own */
  uv_loop_t *loop;      /* own_loop, or the caller's (opts.loop) */
  kb_vclock *clock;     /* the caller's (opts.clock), or the model's own */
  int in_loop;          /* runs on the caller's loop: no thread */
  char *unix_path;
  uv_async_t stop_async;
  uv_idle_t finale;     /* in-loop stop: its close frees what is left */
  kb_sim *sim;
  kb_httpd *httpd;
  kb_sim_kfp *kfp;
  kb_k8s_store *store;
  kb_k8s_api *k8s;
  sim_glue *glue;
  kb_argo_server *argo;
  kb_httpd_req *k8s_req; /* the request kb_k8s_api_handle is routing */
  kb_sim_api_faults faults;
  int loopback;
  /* the config's kubernetes_api section */
  char service_cidr[48];
  int authz_deny;
  double pod_gc; /* terminated_pod_gc_threshold; -1: kube-controller-manager's */

  /* start-up handshake with the starting thread */
  uv_mutex_t mu;
  uv_cond_t cond;
  int state; /* 0 starting, 1 ready, -1 failed */
  kb_sim_error start_err;

  /* fixed once ready: read by other threads */
  int port;
  uint64_t origin_ns;
  double speed, epoch;

  uint64_t requests[API_COUNT];
  lat_hist latency[API_COUNT];
  uint64_t faults_injected[5];
  struct stalled_req *stalled; /* requests held by a stall fault */
};

/* ---- small helpers -------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void set_err(kb_sim_error *err, int code, const char *fmt, const char *arg) {
  err->code = code;
  snprintf(err->message, sizeof err->message, fmt, arg ? arg : "");
}

static void respond_json(kb_httpd_req *req, int status, cJSON *body) {
  char *text = cJSON_PrintUnformatted(body);
  kb_httpd_header h[] = {{"Content-Type", "application/json"}};
  kb_httpd_respond(req, status, h, 1, text ? text : "{}", text ? strlen(text) : 2);
  free(text);
  cJSON_Delete(body);
}

static void respond_text(kb_httpd_req *req, int status, const char *type, const char *text) {
  kb_httpd_header h[] = {{"Content-Type", type}};
  kb_httpd_respond(req, status, h, 1, text, strlen(text));
}

static int is_kfp_path(const char *path) {
  return strncmp(path, "/apis/v1beta1/", 14) == 0 || strncmp(path, "/apis/v2beta1/", 14) == 0;
}

/* The KFP API through the Kubernetes API server's service proxy, as
 * kfp.Client() reaches it from a kubeconfig with no host:
 * /api/v1/namespaces/NS/services/[http:]ml-pipeline[:PORT]/proxy/apis/...
 * (any namespace). Returns the path inside the proxy, or NULL. */
static const char *kfp_proxy_path(const char *path) {
  static const char pre[] = "/api/v1/namespaces/";
  if (strncmp(path, pre, sizeof pre - 1) != 0) return NULL;
  const char *p = strchr(path + sizeof pre - 1, '/');
  if (!p || strncmp(p, "/services/", 10) != 0) return NULL;
  p += 10;
  const char *end = strchr(p, '/');
  if (!end || strncmp(end, "/proxy/", 7) != 0) return NULL;
  if (!strncmp(p, "http:", 5)) p += 5;
  else if (!strncmp(p, "https:", 6)) p += 6;
  if (end - p < 11 || strncmp(p, "ml-pipeline", 11) != 0 || (p[11] != ':' && p + 11 != end))
    return NULL;
  return end + 6;
}

static int classify(const char *path) {
  const char *proxied = kfp_proxy_path(path); /* KFP's API and /metrics only */
  if (proxied && strcmp(proxied, "/metrics") == 0) return API_METRICS;
  if (proxied && is_kfp_path(proxied)) return API_KFP;
  if (strcmp(path, "/metrics") == 0) return API_METRICS;
  if (strncmp(path, "/sim/", 5) == 0) return API_ADMIN;
  if (is_kfp_path(path)) return API_KFP;
  if (kb_argo_server_path(path)) return API_ARGO;
  if (strncmp(path, "/api", 4) == 0 || strncmp(path, "/version", 8) == 0 ||
      strncmp(path, "/openapi", 8) == 0 || strcmp(path, "/healthz") == 0 ||
      strcmp(path, "/readyz") == 0 || strcmp(path, "/livez") == 0)
    return API_K8S;
  return API_OTHER;
}

/* ---- faults on the wire --------------------------------------------------- */

/* An error in the API's own shape: grpc-gateway's {code, message,
 * details} for KFP and argo-server, a Status for Kubernetes. retry: a
 * Retry-After value, or NULL. */
static void respond_api_error(kb_httpd_req *req, int api, int status, int grpc_code,
                              const char *reason, const char *msg, const char *retry) {
  cJSON *body = cJSON_CreateObject();
  if (api == API_KFP || api == API_ARGO) {
    cJSON_AddNumberToObject(body, "code", grpc_code);
    cJSON_AddStringToObject(body, "message", msg);
    cJSON_AddItemToObject(body, "details", cJSON_CreateArray());
  } else {
    cJSON_AddStringToObject(body, "kind", "Status");
    cJSON_AddStringToObject(body, "apiVersion", "v1");
    cJSON_AddItemToObject(body, "metadata", cJSON_CreateObject());
    cJSON_AddStringToObject(body, "status", "Failure");
    cJSON_AddStringToObject(body, "message", msg);
    cJSON_AddStringToObject(body, "reason", reason);
    cJSON_AddNumberToObject(body, "code", status);
  }
  char *text = cJSON_PrintUnformatted(body);
  cJSON_Delete(body);
  kb_httpd_header h[] = {{"Content-Type", "application/json"}, {"Retry-After", retry}};
  kb_httpd_respond(req, status, h, retry ? 2 : 1, text ? text : "{}", text ? strlen(text) : 2);
  free(text);
}

static void respond_fault(kb_sim_server *s, kb_httpd_req *req, int api, int status) {
  char retry[32];
  snprintf(retry, sizeof retry, "%.0f", s->faults.retry_after < 1 ? 1 : s->faults.retry_after);
  const char *msg = status == 429 ? "the server is rate limiting requests (injected fault)"
                                  : "the server is currently unavailable (injected fault)";
  respond_api_error(req, api, status, status == 429 ? 8 : 14,
                    status == 429 ? "TooManyRequests" : "ServiceUnavailable", msg, retry);
}

/* Bodies refused before any handler: invalid UTF-8 (stored and echoed
 * raw, it broke every client's list of the object), and in a KFP body a
 * \u0000 escape, which would cut a name short at the NUL. 1 when
 * answered. */
#define K8S_MAX_REQUEST_BYTES (3 * 1024 * 1024)

static int refuse_body(kb_httpd_req *req, int api) {
  if (api != API_KFP && api != API_K8S && api != API_ARGO) return 0;
  /* binary: the protobuf decoder checks each string it finds */
  if (api == API_K8S && kb_k8s_proto_media(kb_httpd_req_header(req, "Content-Type"))) return 0;
  size_t len;
  const unsigned char *b = (const unsigned char *)kb_httpd_req_body(req, &len);
  /* the apiserver's limit on a request body, answered as a Status (its
   * transport's 431 and 400 stay plain text, as Go's net/http writes them) */
  if (api == API_K8S && len > K8S_MAX_REQUEST_BYTES) {
    char msg[96];
    snprintf(msg, sizeof msg, "Request entity too large: limit is %d", K8S_MAX_REQUEST_BYTES);
    respond_api_error(req, api, 413, 0, "RequestEntityTooLarge", msg, NULL);
    return 1;
  }
  for (size_t i = 0; i < len;) { /* one pass: UTF-8, and the KFP NUL escape */
    if (b[i] >= 0x80) {
      int n = kb_json_utf8_seq(b + i, len - i);
      if (n <= 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is not valid UTF-8 (byte %zu)", i);
        respond_api_error(req, api, 400, 3, "BadRequest", msg, NULL);
        return 1;
      }
      i += (size_t)n;
      continue;
    }
    if (api == API_KFP && b[i] == '\\') {
      if (i + 6 <= len && b[i + 1] == 'u' && !memcmp(b + i + 2, "0000", 4)) {
        respond_api_error(req, api, 400, 3, "BadRequest",
                          "a string of the request holds a NUL character (\\u0000)", NULL);
        return 1;
      }
      /* an escape: its second byte is never the start of another (a
       * non-ASCII byte after it still goes through the UTF-8 check) */
      i += i + 1 < len && b[i + 1] < 0x80 ? 2 : 1;
      continue;
    }
    i++;
  }
  return 0;
}

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
    set_err(err, KB_SIM_EINVAL, "%s: a pool name expected", key);
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
    set_err(err, KB_SIM_ENOENT, "%s: no such node", key);
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
      set_err(err, KB_SIM_EINVAL, "unknown fault '%s'", c->string);
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
    if (!cJSON_IsNumber(p)) set_err(err, KB_SIM_EINVAL, "step_fail_prob: a probability expected", NULL);
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

static void handle_admin(kb_sim_server *s, kb_httpd_req *req) {
  const char *path = kb_httpd_req_path(req), *method = kb_httpd_req_method(req);
  if (!admin_authorized(s, req)) {
    respond_text(req, 401, "text/plain", "the admin API needs 'Authorization: Bearer <admin token>'\n");
    return;
  }
  if (strcmp(path, "/sim/v1/status") == 0 && strcmp(method, "GET") == 0) {
    respond_json(req, 200, status_json(s));
    return;
  }
  if (strcmp(path, "/sim/v1/faults") == 0 && strcmp(method, "POST") == 0) {
    size_t len;
    const char *text = kb_httpd_req_body(req, &len);
    cJSON *body = cJSON_ParseWithLength(text, len);
    kb_sim_error err = {0};
    if (!cJSON_IsObject(body)) {
      respond_text(req, 400, "text/plain", "the body must be a JSON object of faults\n");
    } else if (apply_faults(s, body, &err) < 0) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "error", err.message);
      respond_json(req, 400, e);
    } else {
      respond_json(req, 200, status_json(s));
    }
    cJSON_Delete(body);
    return;
  }
  respond_text(req, 404, "text/plain", "admin API: GET /sim/v1/status, POST /sim/v1/faults\n");
}

/* ---- /metrics ------------------------------------------------------------- */

/* kb_httpd's on_response hook: the time to each response head, scaled to
 * sim seconds (for a delayed answer, the latency the model chose). */
static void on_response(kb_httpd_req *req, int status, double ms, void *ud) {
  (void)status;
  kb_sim_server *s = ud;
  lat_hist *h = &s->latency[classify(kb_httpd_req_path(req))];
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

static void handle_metrics(kb_sim_server *s, kb_httpd_req *req) {
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

/* ---- dispatch ----------------------------------------------------------------- */

/* /healthz, /readyz, /livez (and their /etc subpaths), /version: answers
 * that read nothing the mirror writes. */
static int probe_path(const char *path) {
  static const char *const probes[] = {"/healthz", "/readyz", "/livez", "/version"};
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    size_t n = strlen(probes[i]);
    if (!strncmp(path, probes[i], n) && (path[n] == '\0' || path[n] == '/')) return 1;
  }
  return 0;
}

static void dispatch_api(kb_sim_server *s, kb_httpd_req *req, int api) {
  if (api == API_KFP) {
    const char *proxied = kfp_proxy_path(kb_httpd_req_path(req));
    if (proxied ? kb_sim_kfp_handle_path(s->kfp, req, proxied) : kb_sim_kfp_handle(s->kfp, req)) return;
  }
  if (api == API_K8S || api == API_ARGO) {
    /* the store shows the model as of this request (probes read none of it) */
    if (!probe_path(kb_httpd_req_path(req))) {
      kb_glue_flush_all(s->glue);
      kb_glue_reading(s->glue, kb_httpd_req_path(req));
    }
    if (api == API_ARGO && kb_argo_server_handle(s->argo, req)) return;
    s->k8s_req = req;
    int taken = api == API_K8S && kb_k8s_api_handle(s->k8s, req);
    s->k8s_req = NULL;
    if (taken) return;
  }
  respond_text(req, 404, "text/plain", "404 page not found\n");
}

typedef struct stalled_req {
  kb_vtimer timer;
  kb_sim_server *server;
  kb_httpd_req *req;
  int api;
  struct stalled_req *prev, *next;
} stalled_req;

static void stalled_unlink(stalled_req *st) {
  if (st->prev) st->prev->next = st->next;
  else st->server->stalled = st->next;
  if (st->next) st->next->prev = st->prev;
}

static void hold_done(kb_vtimer *t) {
  stalled_req *st = t->data;
  stalled_unlink(st);
  dispatch_api(st->server, st->req, st->api);
  free(st);
}

/* At shutdown: stalled requests get a 503 instead of their stall. */
static void stalled_abort_all(kb_sim_server *s) {
  while (s->stalled) {
    stalled_req *st = s->stalled;
    stalled_unlink(st);
    kb_vtimer_stop(&st->timer);
    respond_text(st->req, 503, "text/plain", "the simulator is shutting down\n");
    free(st);
  }
}

/* Holds a request for `seconds` of sim time, then dispatches it: a stall
 * fault, or a modelled latency served before the handler (argo-server). */
static void hold_then_dispatch(kb_sim_server *s, kb_httpd_req *req, int api, double seconds) {
  stalled_req *st = malloc(sizeof *st);
  if (st) kb_vtimer_init(s->clock, &st->timer, hold_done, st);
  if (!st || kb_vtimer_start(&st->timer, seconds) != 0) {
    free(st);
    dispatch_api(s, req, api);
    return;
  }
  st->server = s;
  st->req = req;
  st->api = api;
  st->prev = NULL;
  st->next = s->stalled;
  if (s->stalled) s->stalled->prev = st;
  s->stalled = st;
}

/* argo-server's modelled latency, in sim seconds; the Server-Timing header
 * says it in both clocks. Streams (workflow-events, logs) and the version and
 * info documents answer at once, as the Kubernetes side does. */
static double argo_latency(kb_sim_server *s, kb_httpd_req *req) {
  const char *path = kb_httpd_req_path(req), *m = kb_httpd_req_method(req);
  if (s->speed <= 0 || strncmp(path, "/api/v1/workflow", 16) != 0 ||
      !strncmp(path, "/api/v1/workflow-events", 23))
    return 0;
  size_t len = strlen(path);
  if (len > 4 && !strcmp(path + len - 4, "/log")) return 0;
  /* /api/v1/workflows/NS is a list, /api/v1/workflows/NS/NAME one object */
  int slashes = 0;
  for (const char *p = path + 8; *p; p++) slashes += *p == '/';
  int list = !strcmp(m, "GET") && slashes <= 1;
  size_t items = 0;
  if (list) { /* a list costs per stored workflow, as the apiserver's does */
    char ns[256] = "";
    if (slashes == 1) snprintf(ns, sizeof ns, "%s", strrchr(path, '/') + 1);
    const kb_k8s_res *wf = kb_k8s_store_lookup(s->store, "argoproj.io", "v1alpha1", "workflows");
    items = wf ? kb_k8s_store_count(s->store, wf, ns[0] ? ns : NULL) : 0;
  }
  double sim_s = kb_sim_api_latency(s->sim, list ? "argo.list" : "argo.single", 0, items);
  kb_httpd_req_set_timing(req, sim_s / s->speed * 1000.0, sim_s * 1000.0);
  return sim_s;
}

static void handle(kb_httpd_req *req, void *ud) {
  kb_sim_server *s = ud;
  const char *path = kb_httpd_req_path(req);
  int api = classify(path);
  s->requests[api]++;
  if (api == API_METRICS) {
    handle_metrics(s, req);
    return;
  }
  if (api == API_ADMIN) {
    handle_admin(s, req);
    return;
  }
  /* Only modelled latency is simulated time; an API that models none
   * reports 0, and this machine's handling time stays real overhead. */
  kb_httpd_req_set_timing(req, 0, 0);
  /* a path-prefix fault (/apis/v1beta1/runs) also hits KFP behind the service proxy */
  const char *proxied = api == API_KFP ? kfp_proxy_path(path) : NULL;
  if (refuse_body(req, api)) return;
  kb_sim_api_fault f = kb_sim_api_faults_roll(&s->faults, proxied ? proxied : path);
  s->faults_injected[f]++;
  switch (f) {
  case KB_SIM_FAULT_ERROR: respond_fault(s, req, api, s->faults.error_status); return;
  case KB_SIM_FAULT_THROTTLE: respond_fault(s, req, api, 429); return;
  case KB_SIM_FAULT_RESET: {
    static const char partial[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                  "Content-Length: 4096\r\n\r\n{\"partial\":";
    kb_httpd_reset(req, partial, sizeof partial - 1);
    return;
  }
  case KB_SIM_FAULT_STALL:
    hold_then_dispatch(s, req, api, s->faults.stall_seconds);
    return;
  default: break;
  }
  double hold = api == API_ARGO ? argo_latency(s, req) : 0;
  if (hold > 0) hold_then_dispatch(s, req, api, hold);
  else dispatch_api(s, req, api);
}

/* ---- the thread ------------------------------------------------------------------ */

/* Splits the config overlay: `api_faults` is the server's, the rest the model's. */
/* kubernetes_api: {authorization: AlwaysAllow | AlwaysDeny,
 *                  service_cluster_ip_range: 10.96.0.0/12,
 *                  terminated_pod_gc_threshold: 12500} (docs/simulator.md) */
static int kubernetes_api_config(kb_sim_server *s, const cJSON *sec, kb_sim_error *err) {
  if (!cJSON_IsObject(sec)) {
    set_err(err, KB_SIM_EINVAL, "config kubernetes_api: expected a mapping%s", NULL);
    return -1;
  }
  for (const cJSON *c = sec->child; c; c = c->next) {
    const char *v = cJSON_GetStringValue(c);
    uint32_t base, size;
    if (!strcmp(c->string, "authorization") && v &&
        (!strcmp(v, "AlwaysAllow") || !strcmp(v, "AlwaysDeny"))) {
      s->authz_deny = !strcmp(v, "AlwaysDeny");
    } else if (!strcmp(c->string, "service_cluster_ip_range") && v &&
               strlen(v) < sizeof s->service_cidr && kb_k8s_cidr_parse(v, &base, &size) == 0) {
      snprintf(s->service_cidr, sizeof s->service_cidr, "%s", v);
    } else if (!strcmp(c->string, "terminated_pod_gc_threshold") && cJSON_IsNumber(c) &&
               c->valuedouble >= 0 && c->valuedouble <= 1e9 &&
               c->valuedouble == (double)(long long)c->valuedouble) {
      s->pod_gc = c->valuedouble;
    } else {
      err->code = KB_SIM_EINVAL;
      snprintf(err->message, sizeof err->message, "config kubernetes_api.%.60s: %s", c->string,
               !strcmp(c->string, "authorization") ? "expected AlwaysAllow or AlwaysDeny"
               : !strcmp(c->string, "service_cluster_ip_range")
                   ? "expected an IPv4 CIDR of /8 to /30 (10.96.0.0/12)"
               : !strcmp(c->string, "terminated_pod_gc_threshold")
                   ? "expected a whole number of pods, 0 (off) to 1000000000"
                   : "unknown key");
      return -1;
    }
  }
  return 0;
}

static kb_sim_config *load_config(kb_sim_server *s, cJSON **api_faults, kb_sim_error *err) {
  cJSON *tree = NULL;
  *api_faults = NULL;
  if (s->config_yaml) {
    kb_yaml_error yerr = {0};
    tree = kb_yaml_parse(s->config_yaml, strlen(s->config_yaml), &yerr);
    if (!tree) {
      err->code = KB_SIM_EPARSE;
      snprintf(err->message, sizeof err->message, "%.60s:%d:%d: %.180s",
               s->config_name ? s->config_name : "simulator config", yerr.line, yerr.column,
               yerr.message);
      return NULL;
    }
    if (!cJSON_IsObject(tree)) {
      cJSON_Delete(tree);
      set_err(err, KB_SIM_EINVAL, "%s: the simulator config must be a mapping",
              s->config_name ? s->config_name : "simulator config");
      return NULL;
    }
    *api_faults = cJSON_DetachItemFromObjectCaseSensitive(tree, "api_faults");
    cJSON *kapi = cJSON_DetachItemFromObjectCaseSensitive(tree, "kubernetes_api");
    int bad = kapi && kubernetes_api_config(s, kapi, err);
    cJSON_Delete(kapi);
    if (bad) {
      cJSON_Delete(tree);
      return NULL;
    }
  }
  if (s->profile) {
    cJSON_DeleteItemFromObjectCaseSensitive(tree, "profile");
    if (!tree) tree = cJSON_CreateObject();
    cJSON_AddStringToObject(tree, "profile", s->profile);
  }
  kb_sim_config *cfg = kb_sim_config_from_json(tree, err);
  cJSON_Delete(tree);
  return cfg;
}

static void signal_state(kb_sim_server *s, int state) {
  uv_mutex_lock(&s->mu);
  s->state = state;
  uv_cond_signal(&s->cond);
  uv_mutex_unlock(&s->mu);
}

static void on_httpd_closed(kb_httpd *srv, void *ud) { (void)srv; (void)ud; }

static void on_stop(uv_async_t *a) { uv_stop(a->loop); }

/* ---- the Kubernetes API ------------------------------------------------------- */

static double store_now(void *ud) {
  kb_sim_server *s = ud;
  return kb_sim_epoch(s->sim) + kb_sim_now(s->sim);
}

/* The k8s API's latency hook: the modelled latency in sim seconds; the
 * Server-Timing header reports it in both clocks.
 * Streams (watch, logs) and discovery are not delayed. */
static double k8s_latency(void *ud, const kb_k8s_req_info *info) {
  kb_sim_server *s = ud;
  if (!info->res || !strcmp(info->verb, "watch") || !strcmp(info->subresource, "log") ||
      s->speed <= 0)
    return 0;
  int list = !strcmp(info->verb, "list") || !strcmp(info->verb, "deletecollection");
  double sim_s = kb_sim_api_latency(s->sim, list ? "k8s.list" : "k8s.single", 0,
                                    list ? info->stored : 0);
  if (s->k8s_req) kb_httpd_req_set_timing(s->k8s_req, sim_s / s->speed * 1000.0, sim_s * 1000.0);
  return sim_s;
}

static int setup_k8s(kb_sim_server *s) {
  kb_k8s_store_config sc = {.now = store_now, .now_ud = s, .seed = s->seed ? s->seed : 1,
                            .service_cidr = s->service_cidr[0] ? s->service_cidr : NULL};
  s->store = kb_k8s_store_new(&sc);
  if (!s->store || kb_k8s_store_add_builtins(s->store) < 0) return -1;
  s->k8s = kb_k8s_api_new(s->loop, s->store);
  if (!s->k8s) return -1;
  kb_k8s_api_set_authorization(s->k8s, s->authz_deny);
  s->glue = kb_glue_new(s->sim, s->store, NULL, s->loop);
  if (!s->glue || kb_glue_start(s->glue) < 0) return -1;
  if (s->pod_gc >= 0) kb_glue_set_pod_gc(s->glue, (size_t)s->pod_gc);
  s->argo = kb_argo_server_new(s->store, s->loop);
  return s->argo ? 0 : -1;
}

static int setup(kb_sim_server *s) {
  kb_sim_error *err = &s->start_err;
  cJSON *api_faults = NULL;
  kb_sim_config *cfg = load_config(s, &api_faults, err);
  if (!cfg) return -1;
  s->sim = kb_sim_new(cfg, s->seed, s->want_speed, err);
  kb_sim_config_free(cfg);
  if (!s->sim) {
    cJSON_Delete(api_faults);
    return -1;
  }
  kb_sim_api_faults_init(&s->faults, s->seed);
  int bad = api_faults && kb_sim_api_faults_apply(&s->faults, api_faults, err) < 0;
  cJSON_Delete(api_faults);
  if (bad) return -1;
  kb_sim_set_epoch(s->sim, (double)time(NULL));
  /* The store is built before the model's clock starts: at 600x, building
   * it would otherwise cost a varying few sim seconds before the first
   * request. Its latency hook needs the clock, set right after. */
  if (setup_k8s(s) < 0) {
    set_err(err, KB_SIM_ENOMEM, "out of memory starting the simulator's Kubernetes API%s", NULL);
    return -1;
  }
  int att = s->clock ? kb_sim_attach_clock(s->sim, s->clock) : kb_sim_attach(s->sim, s->loop);
  if (att < 0) {
    set_err(err, KB_SIM_ESTATE, "cannot attach the simulator to its loop%s", NULL);
    return -1;
  }
  s->clock = kb_sim_clock(s->sim);
  kb_k8s_api_set_latency(s->k8s, s->clock, k8s_latency, s);
  kb_argo_server_set_clock(s->argo, s->clock);
  kb_sim_clock_params(s->sim, &s->origin_ns, &s->speed);
  s->epoch = kb_sim_epoch(s->sim);
  s->kfp = kb_sim_kfp_new(s->sim, s->loop);
  int pd = s->kfp && s->pipeline_dir ? kb_sim_kfp_set_pipeline_dir(s->kfp, s->pipeline_dir) : 0;
  if (pd < 0) {
    err->code = KB_SIM_EINVAL;
    snprintf(err->message, sizeof err->message, "pipeline dir '%.160s': %.60s", s->pipeline_dir,
             strerror(-pd));
    return -1;
  }
  kb_glue_set_kfp(s->glue, s->kfp);
  /* Server-Timing tells clients how long the modelled latency held each
   * response, so they can scale just that part to the virtual clock. */
  kb_httpd_config hcfg = {.server_timing = "kbrun-sim", .on_response = on_response,
                          .on_response_ud = s, .date_now = store_now, .date_now_ud = s,
                          .header_timeout_ms = s->header_timeout_ms,
                          .body_timeout_ms = s->body_timeout_ms,
                          .idle_timeout_ms = s->idle_timeout_ms,
                          .max_connections = s->max_connections};
  s->httpd = kb_httpd_new(s->loop, &hcfg, handle, s);
  if (!s->kfp || !s->httpd) {
    set_err(err, KB_SIM_ENOMEM, "out of memory starting the simulator%s", NULL);
    return -1;
  }
  int r = kb_httpd_listen(s->httpd, s->host, s->want_port);
  if (r < 0) {
    err->code = KB_SIM_EINVAL;
    snprintf(err->message, sizeof err->message, "cannot listen on %s:%d: %s",
             s->host ? s->host : "127.0.0.1", s->want_port, kb_httpd_strerror(r));
    return -1;
  }
  s->port = kb_httpd_port(s->httpd);
  int v4 = s->host && strspn(s->host, "0123456789.") == strlen(s->host) && strcmp(s->host, "0.0.0.0");
  kb_glue_serving(s->glue, s->clock, v4 ? s->host : "127.0.0.1", s->port);
  if (s->unix_path && (r = kb_httpd_listen_unix(s->httpd, s->unix_path)) < 0) {
    err->code = KB_SIM_EINVAL;
    snprintf(err->message, sizeof err->message, "cannot listen on %.150s: %s", s->unix_path,
             kb_httpd_strerror(r));
    return -1;
  }
  return 0;
}

/* Order matters: the API modules finish the requests they hold, the model
 * stops its timer, then the HTTP server closes its connections. What the
 * handles' close callbacks may still touch is freed after them
 * (release_rest): on our own thread after a last run of the loop, on the
 * caller's loop from the close of `finale`, which comes after them. */
static void stop_serving(kb_sim_server *s) {
  stalled_abort_all(s);
  kb_argo_server_free(s->argo);
  s->argo = NULL;
  if (s->k8s) kb_k8s_api_free(s->k8s);
  s->k8s = NULL;
  if (s->kfp) kb_sim_kfp_free(s->kfp);
  s->kfp = NULL;
  kb_glue_stop(s->glue);
  if (s->sim) kb_sim_detach(s->sim);
}

static void server_free(kb_sim_server *s);

static void release_rest(kb_sim_server *s) {
  kb_glue_free(s->glue);
  s->glue = NULL;
  kb_k8s_store_free(s->store);
  s->store = NULL;
  if (s->sim) kb_sim_free(s->sim);
  s->sim = NULL;
}

static void teardown(kb_sim_server *s) {
  stop_serving(s);
  if (s->httpd) kb_httpd_close(s->httpd, on_httpd_closed, s);
  s->httpd = NULL;
  uv_close((uv_handle_t *)&s->stop_async, NULL);
  uv_run(s->loop, UV_RUN_DEFAULT);
  release_rest(s);
  if (uv_loop_close(s->loop) != 0)
    kb_log(KB_LOG_WARN, "simulator: its loop closed with handles still open");
}

static void thread_main(void *arg) {
  kb_sim_server *s = arg;
  uv_async_init(s->loop, &s->stop_async, on_stop);
  s->stop_async.data = s;
  if (setup(s) < 0) {
    teardown(s);
    signal_state(s, -1);
    return;
  }
  signal_state(s, 1);
  uv_run(s->loop, UV_RUN_DEFAULT);
  teardown(s);
}

static void finale_closed(uv_handle_t *h) {
  kb_sim_server *s = h->data;
  release_rest(s);
  server_free(s);
}

static void inloop_httpd_closed(kb_httpd *srv, void *ud) {
  (void)srv;
  kb_sim_server *s = ud;
  uv_close((uv_handle_t *)&s->finale, finale_closed);
}

static void inloop_stop(kb_sim_server *s) {
  stop_serving(s);
  if (s->unix_path) unlink(s->unix_path);
  if (s->httpd) {
    kb_httpd *h = s->httpd;
    s->httpd = NULL;
    kb_httpd_close(h, inloop_httpd_closed, s);
  } else {
    inloop_httpd_closed(NULL, s);
  }
}

static void server_free(kb_sim_server *s) {
  free(s->host);
  free(s->profile);
  free(s->config_yaml);
  free(s->config_name);
  free(s->admin_token);
  free(s->pipeline_dir);
  free(s->unix_path);
  uv_mutex_destroy(&s->mu);
  uv_cond_destroy(&s->cond);
  free(s);
}

static int is_loopback(const char *host) {
  return !host || strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
         strcmp(host, "::1") == 0 || strcmp(host, "[::1]") == 0;
}

/* On the caller's loop and clock: set up here and now. */
static kb_sim_server *start_in_loop(kb_sim_server *s, kb_sim_error *err) {
  uv_idle_init(s->loop, &s->finale);
  s->finale.data = s;
  if (setup(s) < 0) {
    *err = s->start_err;
    inloop_stop(s);
    return NULL;
  }
  s->state = 1;
  return s;
}

kb_sim_server *kb_sim_server_start(const kb_sim_server_opts *o, kb_sim_error *err) {
  kb_sim_server *s = calloc(1, sizeof *s);
  if (s) s->pod_gc = -1;
  if (!s) {
    set_err(err, KB_SIM_ENOMEM, "out of memory%s", NULL);
    return NULL;
  }
  s->host = dup_or_null(o->host);
  s->profile = dup_or_null(o->profile);
  s->config_yaml = dup_or_null(o->config_yaml);
  s->config_name = dup_or_null(o->config_name);
  s->admin_token = dup_or_null(o->admin_token);
  s->pipeline_dir = dup_or_null(o->pipeline_dir);
  s->header_timeout_ms = o->header_timeout_ms;
  s->body_timeout_ms = o->body_timeout_ms;
  s->idle_timeout_ms = o->idle_timeout_ms;
  s->max_connections = o->max_connections;
  s->unix_path = dup_or_null(o->unix_path);
  s->want_port = o->port;
  s->seed = o->seed;
  s->want_speed = o->speed;
  s->loopback = is_loopback(o->host);
  uv_mutex_init(&s->mu);
  uv_cond_init(&s->cond);
  if (!s->loopback && !s->admin_token) {
    set_err(err, KB_SIM_EINVAL,
            "the simulator listens on %s, beyond loopback: give an admin token so its "
            "fault API is not open to the network", o->host);
    server_free(s);
    return NULL;
  }
  if (o->loop) {
    s->in_loop = 1;
    s->loop = o->loop;
    s->clock = o->clock;
    return start_in_loop(s, err);
  }
  s->loop = &s->own_loop;
  uv_loop_init(s->loop);
  if (uv_thread_create(&s->thread, thread_main, s) != 0) {
    set_err(err, KB_SIM_ENOMEM, "cannot start the simulator thread%s", NULL);
    uv_loop_close(s->loop);
    server_free(s);
    return NULL;
  }
  uv_mutex_lock(&s->mu);
  while (s->state == 0) uv_cond_wait(&s->cond, &s->mu);
  uv_mutex_unlock(&s->mu);
  if (s->state < 0) {
    uv_thread_join(&s->thread);
    *err = s->start_err;
    server_free(s);
    return NULL;
  }
  return s;
}

int kb_sim_server_port(const kb_sim_server *s) { return s->port; }
const char *kb_sim_server_host(const kb_sim_server *s) { return s->host ? s->host : "127.0.0.1"; }

void kb_sim_server_clock(const kb_sim_server *s, uint64_t *origin_ns, double *speed,
                         double *epoch) {
  *origin_ns = s->origin_ns;
  *speed = s->speed;
  *epoch = s->epoch;
}

double kb_sim_server_now(const kb_sim_server *s) {
  if (s->in_loop) return kb_sim_now(s->sim);
  return (double)(uv_hrtime() - s->origin_ns) / 1e9 * s->speed;
}

void kb_sim_server_stop(kb_sim_server *s) {
  if (!s) return;
  if (s->in_loop) {
    inloop_stop(s);
    return;
  }
  uv_async_send(&s->stop_async);
  uv_thread_join(&s->thread);
  server_free(s);
}

int kb_sim_server_write_kubeconfig(const kb_sim_server *s, const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return -errno;
  const char *host = kb_sim_server_host(s);
  int v6 = strchr(host, ':') != NULL && host[0] != '[';
  fprintf(f,
          "apiVersion: v1\nkind: Config\n"
          "clusters:\n- name: kbrun-sim\n  cluster:\n    server: http://%s%s%s:%d\n"
          "users:\n- name: kbrun-sim\n  user: {}\n"
          "contexts:\n- name: kbrun-sim\n  context:\n    cluster: kbrun-sim\n    user: kbrun-sim\n"
          "    namespace: default\n"
          "current-context: kbrun-sim\n",
          v6 ? "[" : "", host, v6 ? "]" : "", s->port);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return -e;
  }
  return 0;
}
