/* Shared by the files of the simulator server: server.c (the thread, the
 * loop, start-up and shutdown, the public kb_sim_server_* calls),
 * server_route.c (classifying and dispatching requests, faults on the
 * wire, stalls) and server_admin.c (the admin API and /metrics). Not a
 * public header (kb/sim_server.h is). */
#ifndef KB_SIM_SERVER_INTERNAL_H
#define KB_SIM_SERVER_INTERNAL_H

#include <stdint.h>

#include <uv.h>

#include "kb/http_server.h"
#include "kb/json.h"
#include "kb/k8s_api.h"
#include "kb/k8s_store.h"
#include "kb/sim_kfp.h"
#include "kb/sim_server.h"
#include "kb/vclock.h"
#include "sim_api_faults.h"
#include "sim_glue.h"
#include "argo_server.h"

enum { API_METRICS, API_ADMIN, API_KFP, API_K8S, API_ARGO, API_OTHER, API_COUNT };

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

/* server.c */
void kb__srv_set_err(kb_sim_error *err, int code, const char *fmt, const char *arg);

/* server_route.c */
void kb__srv_respond_json(kb_httpd_req *req, int status, cJSON *body);
void kb__srv_respond_text(kb_httpd_req *req, int status, const char *type, const char *text);
/* The API a path belongs to (API_*). */
int kb__srv_classify(const char *path);
/* The httpd's request handler (ud: the server). */
void kb__srv_handle(kb_httpd_req *req, void *ud);
/* Ends the requests a stall fault holds (at stop). */
void kb__srv_stalled_abort_all(kb_sim_server *s);

/* server_admin.c */
void kb__srv_handle_admin(kb_sim_server *s, kb_httpd_req *req);
void kb__srv_handle_metrics(kb_sim_server *s, kb_httpd_req *req);
/* The httpd's response hook: counts and times responses for /metrics. */
void kb__srv_on_response(kb_httpd_req *req, int status, double ms, void *ud);

#endif
