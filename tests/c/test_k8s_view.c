/* The Kubernetes view at scale, on a bare store: what a mirrored pod costs
 * once the store has packed it (the heap's growth per pod, measured
 * between two pod counts beyond the watch history's size), that the history
 * shares states instead of copying them (a resumed watch still gets every
 * state right after a trim), lists in slices giving exactly kb_k8s_list's
 * text from a snapshot that later writes do not change, and the
 * terminated-pod garbage collection (oldest first, down to the threshold;
 * 0 keeps everything). Pods are a real mirrored Argo pod
 * (tests/data/sim/mirrored_pod*.json, 3.3 KB of JSON with its status). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/sim/controllers/k8s_ctl.h"
#include "../../src/sim/k8s/k8s_internal.h"
#include "kb/buf.h"
#include "kb/k8s_store.h"
#include "kbtest.h"
#include "sim_test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define KB_HEAP_MEASURED 0 /* the sanitizer's allocator is not glibc's */
#else
#define KB_HEAP_MEASURED 1
#endif

static double g_now = 1700000000;
static double store_now(void *ud) {
  (void)ud;
  return g_now;
}

typedef struct env {
  kb_k8s_store *st;
  const kb_k8s_res *pods;
  cJSON *pod, *status;
} env;

static void env_init(env *e) {
  kb_k8s_store_config cfg = {.now = store_now, .seed = 5};
  e->st = kb_k8s_store_new(&cfg);
  KB_CHECK(e->st && kb_k8s_store_add_builtins(e->st) == 0);
  e->pods = kb_k8s_store_lookup(e->st, "", "v1", "pods");
  size_t len;
  char *t = st_read_file("data/sim/mirrored_pod.json", &len);
  e->pod = t ? cJSON_Parse(t) : NULL;
  free(t);
  t = st_read_file("data/sim/mirrored_pod_status.json", &len);
  e->status = t ? cJSON_Parse(t) : NULL;
  free(t);
  KB_CHECK(e->pod && e->status);
  cJSON *ns = cJSON_Parse("{\"metadata\":{\"name\":\"kubeflow\"}}");
  kb_k8s_create(e->st, kb_k8s_store_lookup(e->st, "", "v1", "namespaces"), NULL, ns, 0, NULL,
                NULL); /* unless the built-ins made it */
  cJSON_Delete(ns);
  KB_CHECK(kb_k8s_peek(e->st, kb_k8s_store_lookup(e->st, "", "v1", "namespaces"), NULL, "kubeflow"));
}

static void env_free(env *e) {
  kb_k8s_store_free(e->st);
  cJSON_Delete(e->pod);
  cJSON_Delete(e->status);
}

/* A pod as the mirror writes one: created, then its status three times
 * (Pending, Running, Succeeded), each write one watch event. */
static void mirror_pod(env *e, int i, const char *phase) {
  char name[64];
  snprintf(name, sizeof name, "generated-pipeline-%06d", i);
  cJSON *o = cJSON_Duplicate(e->pod, 1);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(o, "metadata"), "name", cJSON_CreateString(name));
  KB_CHECK(kb_k8s_create(e->st, e->pods, "kubeflow", o, 0, NULL, NULL) == 0);
  cJSON_Delete(o);
  static const char *phases[] = {"Pending", "Running", NULL};
  for (int k = 0; k < 3; k++) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "metadata"), "name", name);
    cJSON *st = cJSON_Duplicate(e->status, 1);
    cJSON_ReplaceItemInObject(st, "phase", cJSON_CreateString(phases[k] ? phases[k] : phase));
    cJSON_AddItemToObject(s, "status", st);
    KB_CHECK(kb_k8s_update(e->st, e->pods, "kubeflow", name, s, KB_K8S_STATUS, NULL, NULL) == 0);
    cJSON_Delete(s);
  }
}

static size_t heap_used(void) {
  malloc_trim(0);
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

static void test_memory_per_pod(void) {
  env e;
  env_init(&e);
  enum { N1 = 3000, N2 = 9000 }; /* both far beyond the 4096 events kept */
  for (int i = 0; i < N1; i++) mirror_pod(&e, i, "Succeeded");
  kb_k8s_store_trim(e.st);
  size_t h1 = heap_used();
  kb_k8s_store_stats s1;
  kb_k8s_store_usage(e.st, &s1);
  for (int i = N1; i < N2; i++) {
    mirror_pod(&e, i, "Succeeded");
    if (i % 256 == 0) kb_k8s_store_trim(e.st); /* as the mirror does between writes */
  }
  kb_k8s_store_trim(e.st);
  size_t h2 = heap_used();
  kb_k8s_store_stats s2;
  kb_k8s_store_usage(e.st, &s2);
  KB_CHECK(s2.objects - s1.objects == N2 - N1);
  KB_CHECK(s2.trees == 0 && s2.hot == 0);
  double text = (double)(s2.text_bytes - s1.text_bytes) / (N2 - N1);
  double stored = (double)(s2.stored_bytes - s1.stored_bytes) / (N2 - N1);
  printf("mirrored pod: %.0f bytes of JSON text, %.0f deflated", text, stored);
  KB_CHECK(text > 3000 && text < 3600); /* the pod's own JSON, nothing else */
  KB_CHECK(stored < 800);                /* against the pods' dictionary: ~0.3 KB */
  if (KB_HEAP_MEASURED) {
    double per_pod = ((double)h2 - (double)h1) / (N2 - N1);
    printf(", %.0f bytes of heap per pod\n", per_pod);
    /* issue 15's target for the whole view is 4 KB a pod (a cJSON tree per
     * pod and two per event was ~30 KB); the store's part is far less */
    KB_CHECK(per_pod <= 1024);
  } else {
    printf(" (heap not measured under the sanitizer)\n");
  }
  env_free(&e);
}

typedef struct seen {
  int n;
  kb_buf text;
} seen;

static void on_event(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  seen *s = ud;
  char *t = cJSON_PrintUnformatted(obj);
  kb_buf_appendf(&s->text, "%s %s\n", kb_k8s_event_name(type), t);
  free(t);
  s->n++;
}

static void test_history_after_trim(void) {
  env e;
  env_init(&e);
  uint64_t rv0 = kb_k8s_store_rv(e.st);
  seen live = {0}, resumed = {0};
  kb_buf_init(&live.text);
  kb_buf_init(&resumed.text);
  kb_k8s_watch_opts wo = {.ns = "kubeflow"};
  char rv[24];
  snprintf(rv, sizeof rv, "%llu", (unsigned long long)rv0);
  wo.resource_version = rv;
  kb_k8s_watch *w = kb_k8s_watch_start(e.st, e.pods, &wo, on_event, &live, NULL);
  KB_CHECK(w != NULL);
  for (int i = 0; i < 20; i++) {
    mirror_pod(&e, i, i % 2 ? "Failed" : "Succeeded");
    if (i % 3 == 0) kb_k8s_store_trim(e.st);
  }
  KB_CHECK(kb_k8s_delete(e.st, e.pods, "kubeflow", "generated-pipeline-000004", NULL, NULL, NULL) == 0);
  kb_k8s_store_trim(e.st);
  kb_k8s_watch_cancel(w);
  /* the same events again from the history, every state parsed back from text */
  w = kb_k8s_watch_start(e.st, e.pods, &wo, on_event, &resumed, NULL);
  KB_CHECK(w != NULL);
  kb_k8s_watch_cancel(w);
  KB_CHECK(live.n == 20 * 4 + 1 && resumed.n == live.n);
  KB_CHECK(live.text.len == resumed.text.len &&
           !memcmp(live.text.data, resumed.text.data, live.text.len));
  const cJSON *p = kb_k8s_peek(e.st, e.pods, "kubeflow", "generated-pipeline-000007");
  KB_CHECK_STR(kb_k8s_path_str(p, "status.phase"), "Failed");
  kb_buf_free(&live.text);
  kb_buf_free(&resumed.text);
  env_free(&e);
}

/* kb_k8s_list's text and the snapshot's, slice by slice. */
static void check_same(env *e, const kb_k8s_list_opts *o, size_t budget, size_t *calls) {
  cJSON *l = NULL;
  KB_CHECK(kb_k8s_list(e->st, e->pods, o, &l, NULL) == 0);
  char *want = cJSON_PrintUnformatted(l);
  cJSON_Delete(l);
  kb_k8s_list_snap *s = kb_k8s_list_snapshot(e->st, e->pods, o, NULL);
  KB_CHECK(s != NULL);
  int rc;
  *calls = 0;
  while ((rc = kb_k8s_list_snap_match(s, budget)) == 0) (*calls)++;
  KB_CHECK(rc == 1);
  kb_buf b = KB_BUF_INIT;
  while ((rc = kb_k8s_list_snap_write(s, &b, budget)) == 0) (*calls)++;
  KB_CHECK(rc == 1);
  (*calls)++;
  KB_CHECK(want && b.data && strlen(want) == b.len && !memcmp(want, b.data, b.len));
  free(want);
  kb_buf_free(&b);
  kb_k8s_list_snap_free(s);
}

static void test_list_slices(void) {
  env e;
  env_init(&e);
  for (int i = 0; i < 1234; i++) mirror_pod(&e, i, i % 10 ? "Succeeded" : "Failed");
  kb_k8s_store_trim(e.st);
  size_t calls;
  kb_k8s_list_opts all = {0};
  check_same(&e, &all, 100, &calls);
  KB_CHECK(calls == 13); /* 1234 items, 100 per call: the text in 13 slices */
  kb_k8s_list_opts ns = {.ns = "kubeflow", .limit = 500};
  check_same(&e, &ns, 100, &calls);
  KB_CHECK(calls == 5);
  kb_k8s_list_opts sel = {.ns = "kubeflow", .field_selector = "status.phase=Failed", .limit = 50};
  check_same(&e, &sel, 100, &calls);
  KB_CHECK(calls == 12 + 1); /* the selector over 1234 in 13 slices (the last one also
                              * cuts), then 50 items in one */
  /* the next page, from the token of this one */
  cJSON *l = NULL;
  KB_CHECK(kb_k8s_list(e.st, e.pods, &sel, &l, NULL) == 0);
  const char *tok = kb_k8s_path_str(l, "metadata.continue");
  KB_CHECK(tok && kb_k8s_path_num(l, "metadata.remainingItemCount", 0) == 124 - 50);
  kb_k8s_list_opts next = sel;
  next.continue_token = tok;
  check_same(&e, &next, 100, &calls);
  cJSON_Delete(l);
  kb_k8s_list_opts bad = {.label_selector = "a in (b"};
  kb_k8s_error err;
  KB_CHECK(kb_k8s_list_snapshot(e.st, e.pods, &bad, &err) == NULL && err.code == 400);

  /* a snapshot is the store as of its taking */
  cJSON *before = NULL;
  KB_CHECK(kb_k8s_list(e.st, e.pods, &all, &before, NULL) == 0);
  char *want = cJSON_PrintUnformatted(before);
  cJSON_Delete(before);
  kb_k8s_list_snap *s = kb_k8s_list_snapshot(e.st, e.pods, &all, NULL);
  for (int i = 0; i < 1234; i += 7) {
    char name[64];
    snprintf(name, sizeof name, "generated-pipeline-%06d", i);
    KB_CHECK(kb_k8s_delete(e.st, e.pods, "kubeflow", name, NULL, NULL, NULL) == 0);
  }
  mirror_pod(&e, 99999, "Succeeded");
  kb_k8s_store_trim(e.st);
  kb_buf b = KB_BUF_INIT;
  KB_CHECK(kb_k8s_list_snap_match(s, 10000) == 1);
  KB_CHECK(kb_k8s_list_snap_write(s, &b, 10000) == 1);
  KB_CHECK(want && strlen(want) == b.len && !memcmp(want, b.data, b.len));
  free(want);
  kb_buf_free(&b);
  kb_k8s_list_snap_free(s);
  env_free(&e);
}

static size_t count_phase(env *e, const char *phase) {
  kb_k8s_list_opts o = {.field_selector = phase};
  cJSON *l = NULL;
  KB_CHECK(kb_k8s_list(e->st, e->pods, &o, &l, NULL) == 0);
  size_t n = (size_t)cJSON_GetArraySize(cJSON_GetObjectItem(l, "items"));
  cJSON_Delete(l);
  return n;
}

static void test_pod_gc(void) {
  env e;
  env_init(&e);
  k8s_ctls *ctls = kb_k8s_ctls_start(e.st);
  KB_CHECK(ctls != NULL);
  kb_k8s_ctls_set_pod_gc(ctls, 5);
  /* created a second apart, in an order their names do not follow */
  for (int i = 0; i < 12; i++) {
    g_now += 1;
    mirror_pod(&e, (i * 7) % 12, "Succeeded");
  }
  g_now += 1;
  mirror_pod(&e, 100, "Running"); /* never collected */
  KB_CHECK(count_phase(&e, "status.phase=Succeeded") == 5);
  KB_CHECK(count_phase(&e, "status.phase=Running") == 1);
  /* the five created last stay: 7*7%12=1, 8*7%12=8, 9*7%12=3, 10*7%12=10, 11*7%12=5 */
  static const int kept[] = {1, 8, 3, 10, 5};
  for (int k = 0; k < 5; k++) {
    char name[64];
    snprintf(name, sizeof name, "generated-pipeline-%06d", kept[k]);
    KB_CHECK(kb_k8s_peek(e.st, e.pods, "kubeflow", name) != NULL);
  }
  /* a pod deleted by a client is no longer counted */
  KB_CHECK(kb_k8s_delete(e.st, e.pods, "kubeflow", "generated-pipeline-000001", NULL, NULL,
                         NULL) == 0);
  g_now += 1;
  mirror_pod(&e, 200, "Failed");
  KB_CHECK(count_phase(&e, "status.phase=Succeeded") == 4);
  KB_CHECK(kb_k8s_peek(e.st, e.pods, "kubeflow", "generated-pipeline-000008") != NULL);
  kb_k8s_ctls_free(ctls);
  env_free(&e);

  env_init(&e); /* 0: off */
  ctls = kb_k8s_ctls_start(e.st);
  kb_k8s_ctls_set_pod_gc(ctls, 0);
  for (int i = 0; i < 30; i++) mirror_pod(&e, i, "Succeeded");
  KB_CHECK(count_phase(&e, "status.phase=Succeeded") == 30);
  kb_k8s_ctls_free(ctls);
  env_free(&e);
}

int main(void) {
  KB_RUN(test_history_after_trim);
  KB_RUN(test_list_slices);
  KB_RUN(test_pod_gc);
  KB_RUN(test_memory_per_pod);
  return kb_test_report();
}
