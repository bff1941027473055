/* The simulator server: a thread with its own loop running the model and
 * serving the REST APIs. Requests are dispatched by path: /metrics, the
 * admin API under /sim/v1/, KFP (/apis/v1beta1, /apis/v2beta1), then the
 * Kubernetes API (which also carries the Argo and training-job CRDs). API
 * faults are rolled before dispatch. */
/* This file: the server's lifecycle (config, setup, the thread or the
 * caller's loop, stop and teardown) and the public kb_sim_server_* calls.
 * Routing is in server_route.c, the admin API and /metrics in
 * server_admin.c; sim_server_internal.h is what they share. */
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

/* ---- small helpers -------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void kb__srv_set_err(kb_sim_error *err, int code, const char *fmt, const char *arg) {
  err->code = code;
  snprintf(err->message, sizeof err->message, fmt, arg ? arg : "");
}

/* ---- the thread ------------------------------------------------------------------ */

/* Splits the config overlay: `api_faults` is the server's, the rest the model's. */
/* kubernetes_api: {authorization: AlwaysAllow | AlwaysDeny,
 *                  service_cluster_ip_range: 10.96.0.0/12,
 *                  terminated_pod_gc_threshold: 12500} (docs/simulator.md) */
static int kubernetes_api_config(kb_sim_server *s, const cJSON *sec, kb_sim_error *err) {
  if (!cJSON_IsObject(sec)) {
    kb__srv_set_err(err, KB_SIM_EINVAL, "config kubernetes_api: expected a mapping%s", NULL);
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
      kb__srv_set_err(err, KB_SIM_EINVAL, "%s: the simulator config must be a mapping",
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
    kb__srv_set_err(err, KB_SIM_ENOMEM,
                    "out of memory starting the simulator's Kubernetes API%s", NULL);
    return -1;
  }
  int att = s->clock ? kb_sim_attach_clock(s->sim, s->clock) : kb_sim_attach(s->sim, s->loop);
  if (att < 0) {
    kb__srv_set_err(err, KB_SIM_ESTATE, "cannot attach the simulator to its loop%s", NULL);
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
  kb_httpd_config hcfg = {.server_timing = "kbrun-sim", .on_response = kb__srv_on_response,
                          .on_response_ud = s, .date_now = store_now, .date_now_ud = s,
                          .header_timeout_ms = s->header_timeout_ms,
                          .body_timeout_ms = s->body_timeout_ms,
                          .idle_timeout_ms = s->idle_timeout_ms,
                          .max_connections = s->max_connections};
  s->httpd = kb_httpd_new(s->loop, &hcfg, kb__srv_handle, s);
  if (!s->kfp || !s->httpd) {
    kb__srv_set_err(err, KB_SIM_ENOMEM, "out of memory starting the simulator%s", NULL);
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
  kb__srv_stalled_abort_all(s);
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
    kb__srv_set_err(err, KB_SIM_ENOMEM, "out of memory%s", NULL);
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
    kb__srv_set_err(err, KB_SIM_EINVAL,
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
    kb__srv_set_err(err, KB_SIM_ENOMEM, "cannot start the simulator thread%s", NULL);
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
