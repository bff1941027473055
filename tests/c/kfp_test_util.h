/* A simulator + KFP API on a loopback HTTP server, on its own thread and
 * loop, for test_sim_kfp.c; requests go out with blocking libcurl from
 * the test's thread. Tests run with tests/ as working directory. */
#ifndef KFP_TEST_UTIL_H
#define KFP_TEST_UTIL_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "kb/buf.h"
#include "kb/http_server.h"
#include "kb/sim_kfp.h"
#include "sim_test_util.h"

typedef struct kt_server {
  uv_loop_t loop;
  uv_async_t stop;
  pthread_t thread;
  kb_sim *sim;
  kb_sim_kfp *kfp;
  kb_httpd *httpd;
  int port;
} kt_server;

/* GET /kt/store: the KFP store's and the model's sizes, read on the loop's
 * thread (where KFP sweeps), with the live KFP runs in store order. */
static void kt_store(kt_server *s, kb_httpd_req *req) {
  kb_sim_kfp_stats st;
  kb_sim_kfp_stats_get(s->kfp, &st);
  cJSON *o = cJSON_CreateObject();
  const struct { const char *k; size_t v; } f[] = {
      {"pipelines", st.pipelines}, {"versions", st.versions}, {"experiments", st.experiments},
      {"runs", st.runs}, {"recurring", st.recurring}, {"live_pipelines", st.live_pipelines},
      {"live_versions", st.live_versions}, {"live_experiments", st.live_experiments},
      {"live_runs", st.live_runs}, {"live_recurring", st.live_recurring},
      {"index_entries", st.index_entries}, {"index_slots", st.index_slots},
      {"sim_pipelines", st.sim_pipelines}, {"sim_map_slots", st.sim_map_slots},
      {"compactions", st.compactions}, {"kept_versions", st.kept_versions},
      {"model_pipeline_slots", kb_sim_pipeline_count(s->sim)},
      {"model_run_slots", kb_sim_run_count(s->sim)}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) cJSON_AddNumberToObject(o, f[i].k, (double)f[i].v);
  size_t live = 0;
  for (size_t i = 0; i < kb_sim_run_count(s->sim); i++) {
    kb_sim_run_info ri;
    live += kb_sim_run_get(s->sim, (int)i, &ri) == 0;
  }
  cJSON_AddNumberToObject(o, "model_runs", (double)live);
  cJSON *ids = cJSON_AddArrayToObject(o, "run_ids");
  for (size_t i = 0; i < kb_sim_kfp_run_count(s->kfp); i++) {
    kb_sim_kfp_run_ref ref;
    if (!kb_sim_kfp_run_at(s->kfp, i, &ref) && !ref.deleted)
      cJSON_AddItemToArray(ids, cJSON_CreateString(ref.run_id));
  }
  char *body = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  kb_httpd_header h[] = {{"Content-Type", "application/json"}};
  kb_httpd_respond(req, 200, h, 1, body, strlen(body));
  cJSON_free(body);
}

static void kt_handle(kb_httpd_req *req, void *ud) {
  kt_server *s = ud;
  if (kb_sim_kfp_handle(s->kfp, req)) return;
  if (!strcmp(kb_httpd_req_path(req), "/kt/store")) {
    kt_store(s, req);
    return;
  }
  kb_httpd_header h[] = {{"Content-Type", "text/plain; version=0.0.4"}};
  if (!strcmp(kb_httpd_req_path(req), "/metrics")) {
    kb_buf b = KB_BUF_INIT;
    kb_sim_kfp_metrics(s->kfp, &b);
    kb_httpd_respond(req, 200, h, 1, b.data, b.len);
    kb_buf_free(&b);
    return;
  }
  kb_httpd_respond(req, 404, h, 1, "not found\n", 10);
}

static void kt_on_stop(uv_async_t *a) {
  kt_server *s = a->data;
  kb_sim_kfp_free(s->kfp);
  s->kfp = NULL;
  kb_httpd_close(s->httpd, NULL, NULL);
  kb_sim_detach(s->sim);
  uv_close((uv_handle_t *)a, NULL);
}

static void *kt_thread(void *ud) {
  kt_server *s = ud;
  uv_run(&s->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* profile "fast" or "default"; speed: sim seconds per real second;
 * pipeline_dir: where local pipeline URLs may point (NULL: nowhere). */
static kt_server *kt_start_dir(const char *profile, double speed, const char *pipeline_dir) {
  kt_server *s = calloc(1, sizeof *s);
  kb_sim_error err = {0};
  kb_sim_config *cfg = kb_sim_config_new(profile, &err);
  s->sim = cfg ? kb_sim_new(cfg, 7, speed, &err) : NULL;
  kb_sim_config_free(cfg);
  if (!s->sim) {
    fprintf(stderr, "kb_sim_new: %s\n", err.message);
    free(s);
    return NULL;
  }
  uv_loop_init(&s->loop);
  kb_sim_attach(s->sim, &s->loop);
  s->kfp = kb_sim_kfp_new(s->sim, &s->loop);
  if (pipeline_dir && kb_sim_kfp_set_pipeline_dir(s->kfp, pipeline_dir) < 0)
    fprintf(stderr, "kt_start: pipeline dir %s: not a folder\n", pipeline_dir);
  kb_httpd_config hc = {0};
  hc.no_date = 1;
  s->httpd = kb_httpd_new(&s->loop, &hc, kt_handle, s);
  kb_httpd_listen(s->httpd, "127.0.0.1", 0);
  s->port = kb_httpd_port(s->httpd);
  uv_async_init(&s->loop, &s->stop, kt_on_stop);
  s->stop.data = s;
  pthread_create(&s->thread, NULL, kt_thread, s);
  return s;
}

/* Local pipeline URLs from the repository (its sample pipelines). */
static kt_server *kt_start(const char *profile, double speed) {
  return kt_start_dir(profile, speed, "..");
}

static void kt_stop(kt_server *s) {
  if (!s) return;
  uv_async_send(&s->stop);
  pthread_join(s->thread, NULL);
  uv_run(&s->loop, UV_RUN_DEFAULT); /* close callbacks left by the last pass */
  uv_loop_close(&s->loop);
  kb_sim_free(s->sim);
  free(s);
}

typedef struct kt_resp {
  long status;
  char *body;
  cJSON *json; /* NULL when the body is not JSON */
} kt_resp;

static size_t kt_write(char *p, size_t sz, size_t n, void *ud) {
  kb_buf_append(ud, p, sz * n);
  return sz * n;
}

static kt_resp kt_req(kt_server *s, const char *method, const char *path, const char *body,
                      size_t len, const char *ctype) {
  kt_resp r = {0, NULL, NULL};
  char url[2048];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
  CURL *c = curl_easy_init();
  kb_buf b = KB_BUF_INIT;
  struct curl_slist *h = NULL;
  char ct[200];
  snprintf(ct, sizeof ct, "Content-Type: %s", ctype ? ctype : "application/json");
  h = curl_slist_append(h, ct);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, kt_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
  }
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  kb_buf_append(&b, "", 0);
  r.body = b.data ? b.data : calloc(1, 1);
  r.json = cJSON_Parse(r.body);
  return r;
}

static kt_resp kt_json(kt_server *s, const char *method, const char *path, const char *body) {
  return kt_req(s, method, path, body, body ? strlen(body) : 0, NULL);
}

static void kt_free(kt_resp *r) {
  free(r->body);
  cJSON_Delete(r->json);
  r->body = NULL;
  r->json = NULL;
}

/* The string at a dotted path ("run.id", "runs.0.state"), or NULL. */
static const char *kt_str(const cJSON *o, const char *path) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  const cJSON *cur = o;
  char *save = NULL;
  for (char *k = strtok_r(buf, ".", &save); k && cur; k = strtok_r(NULL, ".", &save))
    cur = (*k >= '0' && *k <= '9') ? cJSON_GetArrayItem(cur, atoi(k))
                                   : cJSON_GetObjectItemCaseSensitive(cur, k);
  return cJSON_IsString(cur) ? cur->valuestring : NULL;
}

static double kt_num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void kt_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

#endif
