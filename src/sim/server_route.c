/* The simulator server's routing: which API a path belongs to, faults
 * rolled and answered on the wire, requests held by a stall or by the
 * latency model, then dispatch to the API's handler. */
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

void kb__srv_respond_json(kb_httpd_req *req, int status, cJSON *body) {
  char *text = cJSON_PrintUnformatted(body);
  kb_httpd_header h[] = {{"Content-Type", "application/json"}};
  kb_httpd_respond(req, status, h, 1, text ? text : "{}", text ? strlen(text) : 2);
  free(text);
  cJSON_Delete(body);
}

void kb__srv_respond_text(kb_httpd_req *req, int status, const char *type, const char *text) {
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

int kb__srv_classify(const char *path) {
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
  kb__srv_respond_text(req, 404, "text/plain", "404 page not found\n");
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
void kb__srv_stalled_abort_all(kb_sim_server *s) {
  while (s->stalled) {
    stalled_req *st = s->stalled;
    stalled_unlink(st);
    kb_vtimer_stop(&st->timer);
    kb__srv_respond_text(st->req, 503, "text/plain", "the simulator is shutting down\n");
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

void kb__srv_handle(kb_httpd_req *req, void *ud) {
  kb_sim_server *s = ud;
  const char *path = kb_httpd_req_path(req);
  int api = kb__srv_classify(path);
  s->requests[api]++;
  if (api == API_METRICS) {
    kb__srv_handle_metrics(s, req);
    return;
  }
  if (api == API_ADMIN) {
    kb__srv_handle_admin(s, req);
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

