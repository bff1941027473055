/* The mirror coalesces: the model (manual clock, no loop turns in between)
 * runs a 10-step pipeline to its end before the mirror writes anything,
 * then one flush writes each pod once, as one ADDED with its final state
 * (Succeeded, its node, Argo's completed=true label), not a replay of the
 * create, bind and status writes it would have taken live. A pod the mirror
 * wrote while it ran and that changed several times since is one MODIFIED
 * more. A watcher's events are consistent with a list: resourceVersions
 * rise, and the last event of each pod is the listed object. Pods the
 * terminated-pod GC would delete as soon as they were written are not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "../../src/sim/controllers/sim_glue.h"
#include "../../src/sim/k8s/k8s_internal.h"
#include "kb/k8s_store.h"
#include "kb/sim.h"
#include "kbtest.h"
#include "sim_test_util.h"

#define PIPELINE "data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml"
#define MAX_SEEN 256

typedef struct seen {
  char name[128];
  int added, modified, deleted;
  unsigned long long rv; /* of the last event */
  char phase[32], node[64], completed[8];
} seen;

typedef struct rec {
  seen v[MAX_SEEN];
  size_t n;
  unsigned long long last_rv;
  int rv_fell; /* an event's resourceVersion was not above the one before */
} rec;

static const char *str_at(const cJSON *o, const char *a, const char *b) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, b));
}

static seen *seen_of(rec *r, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (!strcmp(r->v[i].name, name)) return &r->v[i];
  if (r->n == MAX_SEEN) return NULL;
  seen *s = &r->v[r->n++];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  return s;
}

static void on_pod(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  rec *r = ud;
  seen *s = seen_of(r, kb_k8s_meta_str(obj, "name"));
  if (!s) return;
  const char *rvs = kb_k8s_meta_str(obj, "resourceVersion");
  unsigned long long rv = rvs ? strtoull(rvs, NULL, 10) : 0;
  if (rv <= r->last_rv) r->rv_fell = 1;
  r->last_rv = rv;
  s->rv = rv;
  if (type == KB_K8S_ADDED) s->added++;
  else if (type == KB_K8S_MODIFIED) s->modified++;
  else s->deleted++;
  const char *v = str_at(obj, "status", "phase");
  snprintf(s->phase, sizeof s->phase, "%s", v ? v : "");
  v = str_at(obj, "spec", "nodeName");
  snprintf(s->node, sizeof s->node, "%s", v ? v : "");
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "labels");
  v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(labels, "workflows.argoproj.io/completed"));
  snprintf(s->completed, sizeof s->completed, "%s", v ? v : "");
}

typedef struct env {
  uv_loop_t loop;
  kb_sim *sim;
  kb_k8s_store *st;
  sim_glue *g;
  const kb_k8s_res *pods;
  int pipeline;
  rec r;
  kb_k8s_watch *w;
} env;

static double store_now(void *ud) {
  const env *e = ud;
  return kb_sim_epoch(e->sim) + kb_sim_now(e->sim);
}

static void env_init(env *e) {
  memset(e, 0, sizeof *e);
  KB_CHECK(uv_loop_init(&e->loop) == 0);
  kb_sim_error err;
  kb_sim_config *cfg = kb_sim_config_new("fast", &err);
  KB_CHECK(cfg != NULL);
  e->sim = kb_sim_new(cfg, 7, 0, &err);
  kb_sim_config_free(cfg);
  KB_CHECK(e->sim != NULL);
  kb_sim_set_epoch(e->sim, 1700000000);
  kb_k8s_store_config sc = {.now = store_now, .now_ud = e, .seed = 3};
  e->st = kb_k8s_store_new(&sc);
  KB_CHECK(e->st && kb_k8s_store_add_builtins(e->st) == 0);
  e->pods = kb_k8s_store_lookup(e->st, "", "v1", "pods");
  e->g = kb_glue_new(e->sim, e->st, NULL, &e->loop);
  KB_CHECK(e->g && kb_glue_start(e->g) == 0);
  size_t len;
  char *text = st_read_file(PIPELINE, &len);
  KB_CHECK(text != NULL);
  e->pipeline = text ? kb_sim_pipeline_load_yaml(e->sim, text, len, NULL, &err) : -1;
  free(text);
  KB_CHECK(e->pipeline >= 0);
  e->w = kb_k8s_store_on(e->st, e->pods, on_pod, &e->r);
  KB_CHECK(e->w != NULL);
}

static void env_free(env *e) {
  kb_k8s_watch_cancel(e->w);
  kb_glue_stop(e->g);
  uv_run(&e->loop, UV_RUN_NOWAIT); /* the glue's handles close */
  kb_glue_free(e->g);
  kb_k8s_store_free(e->st);
  kb_sim_free(e->sim);
  KB_CHECK(uv_loop_close(&e->loop) == 0);
}

/* Every stored pod is the last state the watcher got, and it ended. */
static size_t check_list_matches(env *e) {
  size_t n;
  const k8s_bucket *b = kb_k8s_bucket_of(e->st, e->pods);
  n = b ? b->n : 0;
  for (size_t i = 0; b && i < b->n; i++) {
    const cJSON *o = kb_k8s_entry_tree(e->st, &b->v[i]);
    seen *s = seen_of(&e->r, kb_k8s_meta_str(o, "name"));
    KB_CHECK(s != NULL);
    if (!s) continue;
    KB_CHECK(s->rv == strtoull(kb_k8s_meta_str(o, "resourceVersion"), NULL, 10));
    KB_CHECK(s->deleted == 0);
    KB_CHECK_STR(s->phase, "Succeeded");
    KB_CHECK(s->node[0] != 0);
    KB_CHECK_STR(s->completed, "true");
  }
  return n;
}

static void test_backlog_written_once(void) {
  env e;
  env_init(&e);
  kb_sim_error err;
  KB_CHECK(kb_sim_run_create(e.sim, e.pipeline, NULL, &err) >= 0);
  KB_CHECK(kb_sim_run_until_idle(e.sim, 1e6) > 0);
  /* the model's pods went Pending, bound, Running, Succeeded */
  KB_CHECK(kb_sim_pod_count(e.sim) >= 10);
  kb_sim_pod_info pi;
  KB_CHECK(kb_sim_pod_get(e.sim, 0, &pi) == 0 && pi.phase == KB_SIM_POD_SUCCEEDED && pi.node);
  uint64_t rv0 = kb_k8s_store_rv(e.st);
  KB_CHECK(e.r.n == 0); /* nothing written before the flush */
  kb_glue_flush_all(e.g);
  size_t n = check_list_matches(&e);
  KB_CHECK(n == kb_sim_pod_count(e.sim));
  KB_CHECK(e.r.n == n);
  for (size_t i = 0; i < e.r.n; i++) {
    KB_CHECK(e.r.v[i].added == 1);
    KB_CHECK(e.r.v[i].modified == 0); /* one write each */
  }
  KB_CHECK(!e.r.rv_fell);
  /* the store's writes: the pods (once each), their Events (one write
   * each), the namespace and the nodes' status; nothing per step of a pod
   * (live, each pod's create, bind, status and label writes were 4+) */
  const k8s_bucket *evb = kb_k8s_bucket_of(e.st, kb_k8s_store_lookup(e.st, "", "v1", "events"));
  size_t n_events = evb ? evb->n : 0;
  KB_CHECK(n_events >= n); /* Scheduled, Pulled, Created, Started, ... */
  KB_CHECK(kb_k8s_store_rv(e.st) - rv0 <= n + n_events + 8);
  env_free(&e);
}

static void test_live_pod_one_write_per_flush(void) {
  env e;
  env_init(&e);
  kb_sim_error err;
  KB_CHECK(kb_sim_run_create(e.sim, e.pipeline, NULL, &err) >= 0);
  /* the first pod is there and not finished: the mirror writes it */
  double t = 0;
  kb_sim_pod_info pi;
  while (t < 1e5 && (kb_sim_pod_count(e.sim) == 0 || kb_sim_pod_get(e.sim, 0, &pi) ||
                     pi.phase == KB_SIM_POD_SUCCEEDED || pi.phase == KB_SIM_POD_FAILED ||
                     !pi.node)) {
    t += 0.05;
    KB_CHECK(kb_sim_advance_to(e.sim, t) == 0);
  }
  KB_CHECK(kb_sim_pod_count(e.sim) > 0 && pi.phase != KB_SIM_POD_SUCCEEDED);
  kb_glue_flush_all(e.g);
  KB_CHECK(e.r.n >= 1);
  seen first = e.r.v[0];
  KB_CHECK(first.added == 1 && first.modified == 0);
  KB_CHECK(strcmp(first.phase, "Succeeded"));
  /* it runs to its end (its container starts, runs, terminates) unseen */
  KB_CHECK(kb_sim_run_until_idle(e.sim, 1e6) > 0);
  kb_glue_flush_all(e.g);
  seen *s = seen_of(&e.r, first.name);
  KB_CHECK(s && s->added == 1 && s->modified == 1);
  for (size_t i = 0; i < e.r.n; i++) KB_CHECK(e.r.v[i].added == 1 && e.r.v[i].modified <= 1);
  KB_CHECK(check_list_matches(&e) == kb_sim_pod_count(e.sim));
  KB_CHECK(!e.r.rv_fell);
  /* nothing changed since: a flush writes nothing */
  uint64_t rv = kb_k8s_store_rv(e.st);
  kb_glue_flush_all(e.g);
  KB_CHECK(kb_k8s_store_rv(e.st) == rv);
  env_free(&e);
}

/* With the terminated-pod GC at 5, a backlog of 11 finished pods ends as
 * the GC would leave it (the 5 newest), and the 6 it would have deleted at
 * once are not written: the watcher sees 5 ADDED, no DELETED. */
static void test_backlog_gc_not_written(void) {
  env e;
  env_init(&e);
  kb_glue_set_pod_gc(e.g, 5);
  kb_sim_error err;
  KB_CHECK(kb_sim_run_create(e.sim, e.pipeline, NULL, &err) >= 0);
  KB_CHECK(kb_sim_run_until_idle(e.sim, 1e6) > 0);
  KB_CHECK(kb_sim_pod_count(e.sim) == 11);
  kb_glue_flush_all(e.g);
  KB_CHECK(check_list_matches(&e) == 5);
  KB_CHECK(e.r.n == 5);
  for (size_t i = 0; i < e.r.n; i++) KB_CHECK(e.r.v[i].added == 1 && e.r.v[i].deleted == 0);
  KB_CHECK(!e.r.rv_fell);
  env_free(&e);
}

/* A view far behind the model (kb_glue_set_request_flush: past 10 changes,
 * here, and no CPU for a request's flush) answers a request as it stands:
 * the flush leaves the backlog to the idle turns, which then write every
 * pod once, each in its final state, the watch consistent with the list. */
static void test_request_behind_answers_as_it_stands(void) {
  env e;
  env_init(&e);
  kb_glue_set_request_flush(e.g, 10, 0);
  kb_sim_error err;
  for (int i = 0; i < 3; i++) KB_CHECK(kb_sim_run_create(e.sim, e.pipeline, NULL, &err) >= 0);
  KB_CHECK(kb_sim_run_until_idle(e.sim, 1e6) > 0);
  size_t pods = kb_sim_pod_count(e.sim);
  KB_CHECK(pods == 33);
  kb_glue_flush_all(e.g);
  size_t behind = kb_glue_backlog(e.g);
  KB_CHECK(behind > 10);
  KB_CHECK(check_list_matches(&e) < pods);
  for (int turn = 0; turn < 10000 && kb_glue_backlog(e.g) > 0; turn++) uv_run(&e.loop, UV_RUN_NOWAIT);
  KB_CHECK(kb_glue_backlog(e.g) == 0);
  KB_CHECK(check_list_matches(&e) == pods);
  KB_CHECK(e.r.n == pods);
  for (size_t i = 0; i < e.r.n; i++) KB_CHECK(e.r.v[i].added == 1 && e.r.v[i].deleted == 0);
  KB_CHECK(!e.r.rv_fell);
  env_free(&e);
}

int main(void) {
  KB_RUN(test_backlog_written_once);
  KB_RUN(test_live_pod_one_write_per_flush);
  KB_RUN(test_backlog_gc_not_written);
  KB_RUN(test_request_behind_answers_as_it_stands);
  return kb_test_report();
}
