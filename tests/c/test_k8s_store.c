/* The simulator's Kubernetes object store and patches (src/sim/k8s_*.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <uv.h>

#include "kb/http_server.h"
#include "kb/k8s_api.h"
#include "kb/vclock.h"
#include "kb/k8s_store.h"
#include "kbtest.h"

static double fixed_now(void *ud) {
  (void)ud;
  return 1700000000.0;
}

static kb_k8s_store *new_store(size_t history) {
  kb_k8s_store_config cfg = {history, fixed_now, NULL, 7, NULL};
  kb_k8s_store *st = kb_k8s_store_new(&cfg);
  KB_CHECK(st && kb_k8s_store_add_builtins(st) == 0);
  return st;
}

static cJSON *J(const char *text) {
  cJSON *o = cJSON_Parse(text);
  if (!o) fprintf(stderr, "bad test JSON: %s\n", text);
  return o;
}

static const char *str_at(const cJSON *o, const char *a, const char *b) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
  return cJSON_GetStringValue(b ? cJSON_GetObjectItemCaseSensitive(x, b) : x);
}

static int create_pod(kb_k8s_store *st, const char *ns, const char *name, const char *labels) {
  char buf[512];
  snprintf(buf, sizeof buf,
           "{\"metadata\":{\"name\":\"%s\",\"labels\":%s},"
           "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"busybox\"}]}}",
           name, labels ? labels : "{}");
  cJSON *p = J(buf);
  int rc = kb_k8s_create(st, kb_k8s_store_find(st, "", "pods"), ns, p, 0, NULL, NULL);
  cJSON_Delete(p);
  return rc;
}

static void test_create_get_metadata(void) {
  kb_k8s_store *st = new_store(0);
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "po");
  KB_CHECK(pods && !strcmp(pods->resource, "pods"));
  KB_CHECK(kb_k8s_store_find(st, NULL, "wf") == kb_k8s_store_lookup(st, "argoproj.io", "v1alpha1", "workflows"));
  cJSON *in = J("{\"metadata\":{\"generateName\":\"job-\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}");
  cJSON *out = NULL;
  kb_k8s_error e;
  uint64_t before = kb_k8s_store_rv(st);
  KB_CHECK(kb_k8s_create(st, pods, "default", in, 0, &out, &e) == 0);
  const char *name = str_at(out, "metadata", "name");
  KB_CHECK(name && strlen(name) == 9 && !strncmp(name, "job-", 4));
  KB_CHECK_STR(str_at(out, "kind", NULL), "Pod");
  KB_CHECK_STR(str_at(out, "apiVersion", NULL), "v1");
  KB_CHECK_STR(str_at(out, "metadata", "namespace"), "default");
  KB_CHECK_STR(str_at(out, "metadata", "creationTimestamp"), "2023-11-14T22:13:20Z");
  KB_CHECK(strlen(str_at(out, "metadata", "uid")) == 36);
  KB_CHECK(kb_k8s_store_rv(st) == before + 1);
  KB_CHECK(atoll(str_at(out, "metadata", "resourceVersion")) == (long long)before + 1);
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(out, "status"), "phase")), "Pending");
  cJSON *got = kb_k8s_get(st, pods, "default", name, &e);
  KB_CHECK(got && cJSON_Compare(got, out, 1));
  cJSON_Delete(got);
  /* duplicate name */
  cJSON *dup = J("{\"metadata\":{\"name\":\"x\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}");
  KB_CHECK(kb_k8s_create(st, pods, "default", dup, 0, NULL, &e) == 0);
  KB_CHECK(kb_k8s_create(st, pods, "default", dup, 0, NULL, &e) == -409);
  KB_CHECK_STR(e.reason, "AlreadyExists");
  KB_CHECK_STR(e.message, "pods \"x\" already exists");
  /* missing namespace, bad names, NotFound, Invalid job */
  KB_CHECK(kb_k8s_create(st, pods, "nope", dup, 0, NULL, &e) == -404);
  KB_CHECK_STR(e.message, "namespaces \"nope\" not found");
  KB_CHECK(kb_k8s_get(st, pods, "default", "missing", &e) == NULL && e.code == 404);
  KB_CHECK_STR(e.message, "pods \"missing\" not found");
  cJSON *bad = J("{\"metadata\":{\"name\":\"Bad_Name\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}");
  KB_CHECK(kb_k8s_create(st, pods, "default", bad, 0, NULL, &e) == -422);
  KB_CHECK(strstr(e.message, "Pod \"Bad_Name\" is invalid: metadata.name: Invalid value") != NULL);
  const kb_k8s_res *jobs = kb_k8s_store_lookup(st, "batch", "v1", "jobs");
  cJSON *job = J("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}}}");
  KB_CHECK(kb_k8s_create(st, jobs, "default", job, 0, NULL, &e) == -422);
  KB_CHECK_STR(e.message, "Job.batch \"j\" is invalid: spec.template.spec.restartPolicy: Required "
                          "value: valid values: \"OnFailure\", \"Never\"");
  cJSON *kind = J("{\"kind\":\"Service\",\"metadata\":{\"name\":\"k\"}}");
  KB_CHECK(kb_k8s_create(st, pods, "default", kind, 0, NULL, &e) == -400);
  /* dry run stores nothing */
  cJSON *dry = J("{\"metadata\":{\"name\":\"dry\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}");
  uint64_t rv = kb_k8s_store_rv(st);
  KB_CHECK(kb_k8s_create(st, pods, "default", dry, KB_K8S_DRY_RUN, NULL, &e) == 0);
  KB_CHECK(kb_k8s_store_rv(st) == rv && !kb_k8s_peek(st, pods, "default", "dry"));
  cJSON *status = kb_k8s_status_json(&e, pods);
  KB_CHECK_STR(str_at(status, "kind", NULL), "Status");
  cJSON_Delete(status);
  cJSON_Delete(in); cJSON_Delete(out); cJSON_Delete(dup); cJSON_Delete(bad); cJSON_Delete(job);
  cJSON_Delete(kind); cJSON_Delete(dry);
  kb_k8s_store_free(st);
}

static void test_update_conflict_status(void) {
  kb_k8s_store *st = new_store(0);
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
  KB_CHECK(create_pod(st, "default", "p", NULL) == 0);
  cJSON *cur = kb_k8s_get(st, pods, "default", "p", NULL);
  cJSON *stale = cJSON_Duplicate(cur, 1);
  /* a spec change bumps generation; status is kept by main-resource PUTs */
  cJSON_AddStringToObject(cJSON_GetObjectItem(cur, "spec"), "nodeName", "n1");
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur, "status"), "phase", cJSON_CreateString("Running"));
  cJSON *out = NULL;
  kb_k8s_error e;
  KB_CHECK(kb_k8s_update(st, pods, "default", "p", cur, 0, &out, &e) == 0);
  KB_CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(out, "metadata"), "generation")->valueint == 2);
  KB_CHECK_STR(str_at(out, "status", "phase"), "Pending");
  cJSON_Delete(out);
  /* the stale copy conflicts */
  KB_CHECK(kb_k8s_update(st, pods, "default", "p", stale, 0, NULL, &e) == -409);
  KB_CHECK_STR(e.reason, "Conflict");
  KB_CHECK_STR(e.message, "Operation cannot be fulfilled on pods \"p\": the object has been "
                          "modified; please apply your changes to the latest version and try again");
  /* status subresource */
  cJSON *s = J("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"nodeName\":\"ignored\"},\"status\":{\"phase\":\"Running\"}}");
  KB_CHECK(kb_k8s_update(st, pods, "default", "p", s, KB_K8S_STATUS, &out, &e) == 0);
  KB_CHECK_STR(str_at(out, "status", "phase"), "Running");
  KB_CHECK_STR(str_at(out, "spec", "nodeName"), "n1");
  /* a no-op update writes nothing */
  uint64_t rv = kb_k8s_store_rv(st);
  cJSON *again = NULL;
  KB_CHECK(kb_k8s_update(st, pods, "default", "p", out, 0, &again, &e) == 0);
  KB_CHECK(kb_k8s_store_rv(st) == rv);
  KB_CHECK(kb_k8s_update(st, pods, "default", "other", out, 0, NULL, &e) == -400);
  KB_CHECK(strstr(e.message, "does not match the name on the URL") != NULL);
  cJSON_Delete(again); cJSON_Delete(out); cJSON_Delete(s); cJSON_Delete(cur); cJSON_Delete(stale);
  kb_k8s_store_free(st);
}

static void check_labels(kb_k8s_store *st, const char *sel, const char *want) {
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
  kb_k8s_list_opts o = {"default", sel, NULL, 0, NULL};
  cJSON *list = NULL;
  kb_k8s_error e;
  KB_CHECK(kb_k8s_list(st, pods, &o, &list, &e) == 0);
  char got[256] = "";
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(list, "items")) {
    strcat(got, got[0] ? "," : "");
    strcat(got, str_at(it, "metadata", "name"));
  }
  if (strcmp(got, want)) fprintf(stderr, "selector %s\n", sel);
  KB_CHECK_STR(got, want);
  cJSON_Delete(list);
}

static void test_selectors(void) {
  kb_k8s_store *st = new_store(0);
  create_pod(st, "default", "a", "{\"app\":\"web\",\"tier\":\"fe\"}");
  create_pod(st, "default", "b", "{\"app\":\"db\"}");
  create_pod(st, "default", "c", "{\"app\":\"web\",\"tier\":\"be\",\"n\":\"5\"}");
  create_pod(st, "kube-system", "d", "{\"app\":\"web\"}");
  check_labels(st, "app=web", "a,c");
  check_labels(st, "app==web,tier=fe", "a");
  check_labels(st, "app!=web", "b");
  check_labels(st, "tier!=fe", "b,c");
  check_labels(st, "app in (db, web),tier notin (fe)", "b,c");
  check_labels(st, "tier", "a,c");
  check_labels(st, "!tier", "b");
  check_labels(st, "n>4", "c");
  check_labels(st, "", "a,b,c");
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
  kb_k8s_error e;
  kb_k8s_selector *sel = kb_k8s_selector_parse("app=web", "metadata.namespace!=default", pods, &e);
  KB_CHECK(sel && kb_k8s_selector_match(sel, kb_k8s_peek(st, pods, "kube-system", "d")));
  KB_CHECK(!kb_k8s_selector_match(sel, kb_k8s_peek(st, pods, "default", "a")));
  kb_k8s_selector_free(sel);
  sel = kb_k8s_selector_parse(NULL, "status.phase=Pending,metadata.name=b", pods, &e);
  KB_CHECK(sel && kb_k8s_selector_match(sel, kb_k8s_peek(st, pods, "default", "b")));
  KB_CHECK(!kb_k8s_selector_match(sel, kb_k8s_peek(st, pods, "default", "a")));
  kb_k8s_selector_free(sel);
  KB_CHECK(kb_k8s_selector_parse(NULL, "spec.bogus=1", pods, &e) == NULL);
  KB_CHECK_STR(e.message, "field label not supported: spec.bogus");
  KB_CHECK(kb_k8s_selector_parse("app in web", NULL, pods, &e) == NULL && e.code == 400);
  KB_CHECK(kb_k8s_selector_parse("bad key=1", NULL, pods, &e) == NULL);
  KB_CHECK(strstr(e.message, "unable to parse requirement") != NULL);
  /* label values as the apiserver validates them: 400, not an empty list */
  KB_CHECK(kb_k8s_selector_parse("a===b", NULL, pods, &e) == NULL && e.code == 400);
  KB_CHECK(strstr(e.message, "values[0][a]: Invalid value: \"=b\": a valid label must be") != NULL);
  KB_CHECK(kb_k8s_selector_parse("tier in (web,bad value)", NULL, pods, &e) == NULL && e.code == 400);
  kb_k8s_selector *ok_sel = kb_k8s_selector_parse("a=,b in (x.y_z-1),c!=v", NULL, pods, &e);
  KB_CHECK(ok_sel != NULL);
  kb_k8s_selector_free(ok_sel);
  /* events: involvedObject field selectors (kubectl describe) */
  const kb_k8s_res *events = kb_k8s_store_find(st, "", "events");
  cJSON *ev = J("{\"metadata\":{\"name\":\"e1\"},\"involvedObject\":{\"kind\":\"Pod\",\"name\":\"a\",\"namespace\":\"default\"},\"reason\":\"Scheduled\"}");
  KB_CHECK(kb_k8s_create(st, events, "default", ev, 0, NULL, &e) == 0);
  kb_k8s_list_opts o = {"default", NULL, "involvedObject.name=a,involvedObject.kind=Pod", 0, NULL};
  cJSON *list;
  KB_CHECK(kb_k8s_list(st, events, &o, &list, &e) == 0);
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(list, "items")) == 1);
  cJSON_Delete(list);
  /* all namespaces */
  kb_k8s_list_opts all = {NULL, "app=web", NULL, 0, NULL};
  KB_CHECK(kb_k8s_list(st, pods, &all, &list, &e) == 0);
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(list, "items")) == 3);
  KB_CHECK_STR(str_at(list, "kind", NULL), "PodList");
  cJSON_Delete(list);
  cJSON_Delete(ev);
  kb_k8s_store_free(st);
}

static void test_paging(void) {
  kb_k8s_store *st = new_store(0);
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
  char name[16];
  for (int i = 0; i < 7; i++) {
    snprintf(name, sizeof name, "p%d", i);
    create_pod(st, "default", name, NULL);
  }
  kb_k8s_list_opts o = {"default", NULL, NULL, 3, NULL};
  char tok[512] = "";
  int seen = 0, pages = 0;
  for (; pages < 10; pages++) {
    cJSON *list;
    o.continue_token = tok[0] ? tok : NULL;
    KB_CHECK(kb_k8s_list(st, pods, &o, &list, NULL) == 0);
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(list, "items")) {
      snprintf(name, sizeof name, "p%d", seen++);
      KB_CHECK_STR(str_at(it, "metadata", "name"), name);
    }
    const char *c = str_at(list, "metadata", "continue");
    if (pages == 0) {
      KB_CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(list, "metadata"), "remainingItemCount")->valueint == 4);
    }
    snprintf(tok, sizeof tok, "%s", c ? c : "");
    cJSON_Delete(list);
    if (!c) break;
  }
  KB_CHECK(seen == 7 && pages == 2);
  kb_k8s_error e;
  cJSON *list;
  o.continue_token = "not-a-token!";
  KB_CHECK(kb_k8s_list(st, pods, &o, &list, &e) == -400);
  KB_CHECK(strstr(e.message, "continue key is not valid") != NULL);
  kb_k8s_store_free(st);
}

typedef struct rec {
  char log[2048];
  int n;
  kb_k8s_store *st;
  const kb_k8s_res *pods;
  kb_k8s_watch *self;
  int cancel_at;
} rec;

static void on_ev(void *ud, kb_k8s_event_type t, const cJSON *obj) {
  rec *r = ud;
  const char *name = str_at(obj, "metadata", "name");
  snprintf(r->log + strlen(r->log), sizeof r->log - strlen(r->log), "%s%s:%s",
           r->log[0] ? " " : "", kb_k8s_event_name(t),
           t == KB_K8S_ERROR ? str_at(obj, "reason", NULL) : name ? name : "-");
  r->n++;
  if (r->cancel_at && r->n == r->cancel_at) kb_k8s_watch_cancel(r->self);
}

static void test_watch(void) {
  kb_k8s_store *st = new_store(8);
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
  create_pod(st, "default", "a", "{\"app\":\"web\"}");
  char rv0[24];
  snprintf(rv0, sizeof rv0, "%llu", (unsigned long long)kb_k8s_store_rv(st));
  /* initial state, then live changes with selector translation */
  rec r1 = {0};
  kb_k8s_watch_opts o = {"default", "app=web", NULL, NULL, 0, 0};
  kb_k8s_watch *w1 = kb_k8s_watch_start(st, pods, &o, on_ev, &r1, NULL);
  KB_CHECK_STR(r1.log, "ADDED:a");
  create_pod(st, "default", "b", "{\"app\":\"db\"}");
  create_pod(st, "kube-system", "c", "{\"app\":\"web\"}");
  KB_CHECK(kb_k8s_patch(st, pods, "default", "b", KB_K8S_PATCH_MERGE,
                        "{\"metadata\":{\"labels\":{\"app\":\"web\"}}}", 40, 0, NULL, NULL) == 0);
  KB_CHECK(kb_k8s_patch(st, pods, "default", "a", KB_K8S_PATCH_MERGE,
                        "{\"metadata\":{\"labels\":{\"app\":\"x\"}}}", 38, 0, NULL, NULL) == 0);
  KB_CHECK(kb_k8s_delete(st, pods, "default", "b", NULL, NULL, NULL) == 0);
  KB_CHECK_STR(r1.log, "ADDED:a ADDED:b DELETED:a DELETED:b");
  /* resume from rv0: the history replays changes after it */
  rec r2 = {0};
  kb_k8s_watch_opts o2 = {NULL, NULL, NULL, rv0, 0, 0};
  kb_k8s_watch *w2 = kb_k8s_watch_start(st, pods, &o2, on_ev, &r2, NULL);
  KB_CHECK_STR(r2.log, "ADDED:b ADDED:c MODIFIED:b MODIFIED:a DELETED:b");
  /* a bounded history: old versions are Gone */
  char name[8];
  for (int i = 0; i < 10; i++) {
    snprintf(name, sizeof name, "x%d", i);
    create_pod(st, "default", name, NULL);
  }
  rec r3 = {0};
  kb_k8s_watch *w3 = kb_k8s_watch_start(st, pods, &o2, on_ev, &r3, NULL);
  KB_CHECK_STR(r3.log, "ERROR:Expired");
  KB_CHECK(w3 && kb_k8s_watch_done(w3));
  kb_k8s_watch_cancel(w3);
  /* controller hook writing from inside its callback; self-cancel */
  rec r4 = {0};
  r4.cancel_at = 2;
  r4.self = kb_k8s_store_on(st, pods, on_ev, &r4);
  create_pod(st, "default", "y1", NULL);
  create_pod(st, "default", "y2", NULL);
  create_pod(st, "default", "y3", NULL);
  KB_CHECK_STR(r4.log, "ADDED:y1 ADDED:y2");
  /* send_initial ends with a bookmark */
  rec r5 = {0};
  kb_k8s_watch_opts o5 = {"kube-system", NULL, NULL, "1", 1, 0};
  kb_k8s_watch *w5 = kb_k8s_watch_start(st, pods, &o5, on_ev, &r5, NULL);
  KB_CHECK_STR(r5.log, "ADDED:c BOOKMARK:-");
  kb_k8s_watch_cancel(w1);
  kb_k8s_watch_cancel(w2);
  kb_k8s_watch_cancel(w5);
  kb_k8s_store_free(st);
}

static int count(kb_k8s_store *st, const char *res) {
  return (int)kb_k8s_store_count(st, kb_k8s_store_find(st, NULL, res), NULL);
}

static void add_owned_pod(kb_k8s_store *st, const char *name, const char *owner_uid) {
  char buf[512];
  snprintf(buf, sizeof buf,
           "{\"metadata\":{\"name\":\"%s\",\"ownerReferences\":[{\"apiVersion\":\"batch/v1\","
           "\"kind\":\"Job\",\"name\":\"j\",\"uid\":\"%s\",\"controller\":true}]},"
           "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}", name, owner_uid);
  cJSON *p = J(buf);
  KB_CHECK(kb_k8s_create(st, kb_k8s_store_find(st, "", "pods"), "default", p, 0, NULL, NULL) == 0);
  cJSON_Delete(p);
}

static void test_delete_gc_finalizers(void) {
  kb_k8s_store *st = new_store(0);
  const kb_k8s_res *jobs = kb_k8s_store_find(st, "batch", "jobs");
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
  cJSON *job = J("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"template\":{\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}}}");
  cJSON *out;
  kb_k8s_propagation how[] = {KB_K8S_PROPAGATE_BACKGROUND, KB_K8S_PROPAGATE_FOREGROUND,
                              KB_K8S_PROPAGATE_ORPHAN};
  for (int i = 0; i < 3; i++) {
    KB_CHECK(kb_k8s_create(st, jobs, "default", job, 0, &out, NULL) == 0);
    /* defaults the job controller relies on */
    KB_CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(out, "spec"), "backoffLimit")->valueint == 6);
    const char *uid = str_at(out, "metadata", "uid");
    add_owned_pod(st, "j-1", uid);
    add_owned_pod(st, "j-2", uid);
    create_pod(st, "default", "other", NULL);
    kb_k8s_delete_opts o = {how[i], NULL, NULL, 0};
    KB_CHECK(kb_k8s_delete(st, jobs, "default", "j", &o, NULL, NULL) == 0);
    KB_CHECK(count(st, "jobs") == 0);
    KB_CHECK(count(st, "pods") == (how[i] == KB_K8S_PROPAGATE_ORPHAN ? 3 : 1));
    if (how[i] == KB_K8S_PROPAGATE_ORPHAN)
      KB_CHECK(!cJSON_GetObjectItem(cJSON_GetObjectItem(kb_k8s_peek(st, pods, "default", "j-1"), "metadata"), "ownerReferences"));
    kb_k8s_delete(st, pods, "default", "j-1", NULL, NULL, NULL);
    kb_k8s_delete(st, pods, "default", "j-2", NULL, NULL, NULL);
    kb_k8s_delete(st, pods, "default", "other", NULL, NULL, NULL);
    cJSON_Delete(out);
  }
  /* finalizers hold the object until removed */
  cJSON *f = J("{\"metadata\":{\"name\":\"f\",\"finalizers\":[\"x/y\"]},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}");
  KB_CHECK(kb_k8s_create(st, pods, "default", f, 0, NULL, NULL) == 0);
  KB_CHECK(kb_k8s_delete(st, pods, "default", "f", NULL, &out, NULL) == 1);
  KB_CHECK(str_at(out, "metadata", "deletionTimestamp") != NULL);
  cJSON_Delete(out);
  KB_CHECK(kb_k8s_peek(st, pods, "default", "f") != NULL);
  KB_CHECK(kb_k8s_patch(st, pods, "default", "f", KB_K8S_PATCH_JSON,
                        "[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]", 50, 0, NULL,
                        NULL) == 0);
  KB_CHECK(kb_k8s_peek(st, pods, "default", "f") == NULL);
  /* preconditions and namespaces */
  create_pod(st, "kubeflow", "k", NULL);
  kb_k8s_delete_opts pre = {0, "wrong-uid", NULL, 0};
  kb_k8s_error e;
  KB_CHECK(kb_k8s_delete(st, pods, "kubeflow", "k", &pre, NULL, &e) == -409);
  KB_CHECK(strstr(e.message, "Precondition failed: UID in precondition: wrong-uid") != NULL);
  KB_CHECK(kb_k8s_delete(st, kb_k8s_store_find(st, "", "ns"), NULL, "kubeflow", NULL, NULL, NULL) == 0);
  KB_CHECK(kb_k8s_peek(st, pods, "kubeflow", "k") == NULL);
  KB_CHECK(kb_k8s_delete(st, pods, "default", "gone", NULL, NULL, &e) == -404);
  cJSON_Delete(job);
  cJSON_Delete(f);
  kb_k8s_store_free(st);
}

/* Applies a strategic patch to a document, compares with want. */
static void check_smp(const char *doc, const char *patch, const char *want) {
  cJSON *d = J(doc), *p = J(patch), *w = J(want);
  kb_k8s_error e;
  KB_CHECK(kb_k8s_strategic_patch(&d, p, &e) == 0);
  if (!cJSON_Compare(d, w, 1)) {
    char *got = cJSON_PrintUnformatted(d);
    fprintf(stderr, "smp: got %s\n     want %s\n", got, want);
    free(got);
    KB_CHECK(0);
  }
  cJSON_Delete(d); cJSON_Delete(p); cJSON_Delete(w);
}

/* Garbage collection finds dependents through the owners index: it follows
 * ownerReferences as they are now (a patch that drops one releases the
 * dependent) and tells same-named objects of two namespaces apart. */
static void test_gc_owner_index(void) {
  kb_k8s_store *st = new_store(0);
  const kb_k8s_res *jobs = kb_k8s_store_find(st, "batch", "jobs");
  const kb_k8s_res *pods = kb_k8s_store_find(st, "", "pods");
  cJSON *job = J("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"template\":{\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}}}");
  cJSON *out;
  KB_CHECK(kb_k8s_create(st, jobs, "default", job, 0, &out, NULL) == 0);
  char uid[64];
  snprintf(uid, sizeof uid, "%s", str_at(out, "metadata", "uid"));
  cJSON_Delete(out);
  add_owned_pod(st, "kept", uid);
  add_owned_pod(st, "gone", uid);
  /* a pod of the same name in another namespace, owned by someone else */
  char buf[512];
  snprintf(buf, sizeof buf,
           "{\"metadata\":{\"name\":\"gone\",\"ownerReferences\":[{\"apiVersion\":\"v1\","
           "\"kind\":\"Pod\",\"name\":\"x\",\"uid\":\"other-uid\"}]},"
           "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}");
  cJSON *p = J(buf);
  KB_CHECK(kb_k8s_create(st, pods, "kubeflow", p, 0, NULL, NULL) == 0);
  cJSON_Delete(p);
  KB_CHECK(kb_k8s_patch(st, pods, "default", "kept", KB_K8S_PATCH_JSON,
                        "[{\"op\":\"remove\",\"path\":\"/metadata/ownerReferences\"}]", 55, 0,
                        NULL, NULL) == 0);
  kb_k8s_delete_opts bg = {KB_K8S_PROPAGATE_BACKGROUND, NULL, NULL, 0};
  KB_CHECK(kb_k8s_delete(st, jobs, "default", "j", &bg, NULL, NULL) == 0);
  KB_CHECK(kb_k8s_peek(st, pods, "default", "kept") != NULL);
  KB_CHECK(kb_k8s_peek(st, pods, "default", "gone") == NULL);
  KB_CHECK(kb_k8s_peek(st, pods, "kubeflow", "gone") != NULL);
  KB_CHECK(count(st, "pods") == 2);
  cJSON_Delete(job);
  kb_k8s_store_free(st);
}

static void test_strategic_merge(void) {
  const char *pod = "{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"1\",\"env\":[{\"name\":\"X\",\"value\":\"1\"}]},"
                    "{\"name\":\"b\",\"image\":\"2\"}],\"tolerations\":[{\"key\":\"t\"}]},"
                    "\"metadata\":{\"finalizers\":[\"f1\"],\"labels\":{\"a\":\"1\",\"b\":\"2\"}}}";
  /* merge by key: change one container, add an env var */
  check_smp(pod, "{\"spec\":{\"containers\":[{\"name\":\"b\",\"image\":\"3\",\"env\":[{\"name\":\"Y\",\"value\":\"2\"}]}]}}",
            "{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"1\",\"env\":[{\"name\":\"X\",\"value\":\"1\"}]},"
            "{\"name\":\"b\",\"image\":\"3\",\"env\":[{\"name\":\"Y\",\"value\":\"2\"}]}],\"tolerations\":[{\"key\":\"t\"}]},"
            "\"metadata\":{\"finalizers\":[\"f1\"],\"labels\":{\"a\":\"1\",\"b\":\"2\"}}}");
  /* $patch: delete an element, null deletes a key, lists without key replace,
   * primitive merge lists union, $setElementOrder reorders */
  check_smp(pod, "{\"$setElementOrder/containers\":[{\"name\":\"c\"},{\"name\":\"a\"}],"
                 "\"spec\":{\"containers\":[{\"name\":\"b\",\"$patch\":\"delete\"},{\"name\":\"c\",\"image\":\"9\"}],"
                 "\"tolerations\":[{\"key\":\"u\"}]},\"metadata\":{\"finalizers\":[\"f2\"],\"labels\":{\"a\":null}}}",
            "{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"1\",\"env\":[{\"name\":\"X\",\"value\":\"1\"}]},"
            "{\"name\":\"c\",\"image\":\"9\"}],\"tolerations\":[{\"key\":\"u\"}]},"
            "\"metadata\":{\"finalizers\":[\"f1\",\"f2\"],\"labels\":{\"b\":\"2\"}}}");
  check_smp(pod, "{\"spec\":{\"$setElementOrder/containers\":[{\"name\":\"b\"},{\"name\":\"a\"}]}}",
            "{\"spec\":{\"containers\":[{\"name\":\"b\",\"image\":\"2\"},{\"name\":\"a\",\"image\":\"1\",\"env\":[{\"name\":\"X\",\"value\":\"1\"}]}],"
            "\"tolerations\":[{\"key\":\"t\"}]},\"metadata\":{\"finalizers\":[\"f1\"],\"labels\":{\"a\":\"1\",\"b\":\"2\"}}}");
  /* $patch: replace on a map and on a list; $deleteFromPrimitiveList; $retainKeys */
  check_smp(pod, "{\"metadata\":{\"labels\":{\"$patch\":\"replace\",\"z\":\"9\"},\"$deleteFromPrimitiveList/finalizers\":[\"f1\"]},"
                 "\"spec\":{\"containers\":[{\"$patch\":\"replace\"},{\"name\":\"only\",\"image\":\"o\"}]}}",
            "{\"spec\":{\"containers\":[{\"name\":\"only\",\"image\":\"o\"}],\"tolerations\":[{\"key\":\"t\"}]},"
            "\"metadata\":{\"finalizers\":[],\"labels\":{\"z\":\"9\"}}}");
  check_smp("{\"s\":{\"a\":1,\"b\":2,\"c\":3}}", "{\"s\":{\"$retainKeys\":[\"a\",\"d\"],\"d\":4}}",
            "{\"s\":{\"a\":1,\"d\":4}}");
  check_smp("{\"a\":{\"b\":1}}", "{\"a\":{\"$patch\":\"delete\"}}", "{}");
  /* errors the client sees */
  cJSON *d = J("{\"spec\":{\"containers\":[{\"name\":\"a\"}]}}");
  cJSON *p = J("{\"spec\":{\"containers\":[{\"image\":\"x\"}]}}");
  kb_k8s_error e;
  KB_CHECK(kb_k8s_strategic_patch(&d, p, &e) == -400);
  KB_CHECK_STR(e.message, "strategic merge patch: containers: map has no merge key name");
  cJSON_Delete(p);
  p = J("{\"$patch\":\"bogus\"}");
  KB_CHECK(kb_k8s_strategic_patch(&d, p, &e) == -400);
  KB_CHECK_STR(e.message, "strategic merge patch: unknown patch type: bogus");
  cJSON_Delete(p);
  cJSON_Delete(d);
  KB_CHECK_STR(kb_k8s_smp_merge_key("volumeMounts"), "mountPath");
  KB_CHECK(kb_k8s_smp_merge_key("args") == NULL);
}

static void test_merge_and_json_patch(void) {
  cJSON *d = J("{\"a\":{\"b\":1,\"c\":[1,2]},\"d\":\"x\"}");
  cJSON *p = J("{\"a\":{\"b\":null,\"c\":[3],\"e\":{\"f\":1}},\"d\":null}");
  d = kb_k8s_merge_patch(d, p);
  cJSON *w = J("{\"a\":{\"c\":[3],\"e\":{\"f\":1}}}");
  KB_CHECK(cJSON_Compare(d, w, 1));
  cJSON_Delete(p); cJSON_Delete(w);
  p = J("[{\"op\":\"add\",\"path\":\"/a/c/0\",\"value\":0},{\"op\":\"add\",\"path\":\"/a/c/-\",\"value\":9},"
        "{\"op\":\"replace\",\"path\":\"/a/e/f\",\"value\":2},{\"op\":\"copy\",\"from\":\"/a/e\",\"path\":\"/g\"},"
        "{\"op\":\"move\",\"from\":\"/g/f\",\"path\":\"/h~1i\"},{\"op\":\"test\",\"path\":\"/h~1i\",\"value\":2},"
        "{\"op\":\"remove\",\"path\":\"/g\"}]");
  kb_k8s_error e;
  KB_CHECK(kb_k8s_json_patch(&d, p, &e) == 0);
  w = J("{\"a\":{\"c\":[0,3,9],\"e\":{\"f\":2}},\"h/i\":2}");
  KB_CHECK(cJSON_Compare(d, w, 1));
  cJSON_Delete(p); cJSON_Delete(w);
  /* all or nothing: a failed test leaves the document unchanged */
  p = J("[{\"op\":\"remove\",\"path\":\"/a\"},{\"op\":\"test\",\"path\":\"/h~1i\",\"value\":3}]");
  KB_CHECK(kb_k8s_json_patch(&d, p, &e) == -422);
  KB_CHECK_STR(e.message, "json patch: test failed at /h~1i");
  KB_CHECK(cJSON_GetObjectItem(d, "a") != NULL);
  cJSON_Delete(p);
  p = J("[{\"op\":\"remove\",\"path\":\"/nope\"}]");
  KB_CHECK(kb_k8s_json_patch(&d, p, &e) == -422);
  KB_CHECK_STR(e.message, "json patch: remove operation does not apply: doc is missing path: /nope");
  cJSON_Delete(p);
  p = J("{\"op\":\"add\"}");
  KB_CHECK(kb_k8s_json_patch(&d, p, &e) == -400);
  cJSON_Delete(p);
  cJSON_Delete(d);
  /* through the store: SMP on a custom type is 415 */
  kb_k8s_store *st = new_store(0);
  const kb_k8s_res *wf = kb_k8s_store_find(st, NULL, "workflows");
  cJSON *o = J("{\"metadata\":{\"name\":\"w\"},\"spec\":{\"entrypoint\":\"main\"}}");
  KB_CHECK(kb_k8s_create(st, wf, "default", o, 0, NULL, NULL) == 0);
  KB_CHECK(kb_k8s_patch(st, wf, "default", "w", KB_K8S_PATCH_STRATEGIC, "{}", 2, 0, NULL, &e) == -415);
  KB_CHECK(kb_k8s_patch(st, wf, "default", "w", KB_K8S_PATCH_MERGE,
                        "{\"metadata\":{\"resourceVersion\":\"1\"}}", 38, 0, NULL, &e) == -409);
  KB_CHECK(kb_k8s_patch(st, wf, "default", "w", KB_K8S_PATCH_MERGE, "{bad", 4, 0, NULL, &e) == -400);
  KB_CHECK_STR(e.message, "the patch is not valid JSON");
  cJSON_Delete(o);
  kb_k8s_store_free(st);
}

static void test_logs(void) {
  kb_k8s_store *st = new_store(0);
  create_pod(st, "default", "p", NULL);
  kb_k8s_log_append(st, "default", "p", "main", "one\ntwo\nthr", 11);
  kb_k8s_log_append(st, "default", "p", "main", "ee\n", 3);
  char *text;
  size_t len;
  kb_k8s_error e;
  kb_k8s_log_opts o = {NULL, -1, 0, 0, 0};
  KB_CHECK(kb_k8s_log_read(st, "default", "p", &o, &text, &len, &e) == 0);
  KB_CHECK_STR(text, "one\ntwo\nthree\n");
  free(text);
  o.tail_lines = 2;
  o.timestamps = 1;
  KB_CHECK(kb_k8s_log_read(st, "default", "p", &o, &text, &len, &e) == 0);
  KB_CHECK_STR(text, "2023-11-14T22:13:20Z two\n2023-11-14T22:13:20Z three\n");
  free(text);
  o.container = "side";
  KB_CHECK(kb_k8s_log_read(st, "default", "p", &o, &text, &len, &e) == -400);
  KB_CHECK_STR(e.message, "container side is not valid for pod p");
  KB_CHECK(kb_k8s_log_read(st, "default", "q", NULL, &text, &len, &e) == -404);
  kb_k8s_store_free(st);
}

/* ---- the REST layer over loopback: a client thread, the server on the loop */

typedef struct http_case {
  const char *method, *path, *accept, *body;
  int status;       /* out */
  CURLcode cc;      /* out */
  char out[8192];   /* out: headers + body */
} http_case;

typedef struct client {
  int port;
  http_case *cases;
  size_t n;
  uv_async_t done;
} client;

static size_t collect(char *p, size_t sz, size_t n, void *ud) {
  http_case *c = ud;
  size_t len = strlen(c->out), add = sz * n;
  if (len + add >= sizeof c->out) add = sizeof c->out - len - 1;
  memcpy(c->out + len, p, add);
  c->out[len + add] = '\0';
  return sz * n;
}

static void *client_main(void *ud) {
  client *cl = ud;
  for (size_t i = 0; i < cl->n; i++) {
    http_case *c = &cl->cases[i];
    CURL *h = curl_easy_init();
    char url[512], accept[300];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", cl->port, c->path);
    struct curl_slist *hs = NULL;
    snprintf(accept, sizeof accept, "Accept: %s", c->accept ? c->accept : "application/json");
    hs = curl_slist_append(hs, accept);
    hs = curl_slist_append(hs, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(h, CURLOPT_HEADER, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    if (c->body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    c->cc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    c->status = (int)code;
    curl_slist_free_all(hs);
    curl_easy_cleanup(h);
  }
  uv_async_send(&cl->done);
  return NULL;
}

static void client_done(uv_async_t *a) { uv_stop(a->loop); }

static void fault_hook(void *ud, const kb_k8s_req_info *info, kb_k8s_fault *f) {
  (void)ud;
  if (!strcmp(info->name, "busy")) {
    f->kind = KB_K8S_FAULT_STATUS;
    f->status = 429;
    f->retry_after = 3;
  } else if (!strcmp(info->name, "reset")) {
    f->kind = KB_K8S_FAULT_RESET;
  }
}

static double latency_hook(void *ud, const kb_k8s_req_info *info) {
  int *calls = ud;
  (*calls)++;
  return !strcmp(info->verb, "get") ? 0.02 : 0;
}

static void test_rest(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kb_k8s_store *st = new_store(4);
  kb_k8s_api *api = kb_k8s_api_new(&loop, st);
  int calls = 0;
  kb_k8s_api_set_fault(api, fault_hook, NULL);
  kb_vclock *clk = kb_vclock_new(&loop, KB_VCLOCK_LINEAR, 1.0);
  kb_k8s_api_set_latency(api, clk, latency_hook, &calls);
  kb_httpd *srv = kb_httpd_new(&loop, NULL, kb_k8s_api_handler, api);
  KB_CHECK(kb_httpd_listen(srv, "127.0.0.1", 0) == 0);
  create_pod(st, "default", "p1", "{\"app\":\"web\"}");
  for (int i = 0; i < 6; i++) create_pod(st, "kube-system", i % 2 ? "q1" : "q2", NULL);
  http_case cases[] = {
      {"GET", "/version", NULL, NULL, 0, 0, ""},
      {"GET", "/api/v1/namespaces/default/pods", "application/json;as=Table;v=v1;g=meta.k8s.io", NULL, 0, 0, ""},
      {"GET", "/api/v1/namespaces/default/pods/p1", NULL, NULL, 0, 0, ""},
      {"GET", "/api/v1/namespaces/default/pods/busy", NULL, NULL, 0, 0, ""},
      {"GET", "/api/v1/namespaces/default/pods/reset", NULL, NULL, 0, 0, ""},
      {"POST", "/apis/batch/v1/namespaces/default/jobs?fieldValidation=Strict", NULL,
       "{\"metadata\":{\"name\":\"j\"},\"extra\":1,\"spec\":{}}", 0, 0, ""},
      {"PATCH", "/api/v1/namespaces/default/pods/p1", NULL, "{}", 0, 0, ""},
      {"GET", "/api/v1/pods?watch=true&timeoutSeconds=1&labelSelector=app%3Dweb", NULL, NULL, 0, 0, ""},
      {"GET", "/api/v1/pods?watch=1&resourceVersion=2", NULL, NULL, 0, 0, ""},
      {"GET", "/api/v1/nodes?fieldSelector=spec.bogus%3D1", NULL, NULL, 0, 0, ""},
      {"DELETE", "/api/v1/namespaces/default/pods/p1", NULL, "{\"propagationPolicy\":\"Sideways\"}", 0, 0, ""},
      {"GET", "/apis/batch/v1", NULL, NULL, 0, 0, ""},
      {"GET", "/api/v1/pods?resourceVersion=abc", NULL, NULL, 0, 0, ""},
      {"GET", "/api/v1/pods?resourceVersion=99999", NULL, NULL, 0, 0, ""},
  };
  client cl = {kb_httpd_port(srv), cases, sizeof cases / sizeof cases[0], {0}};
  uv_async_init(&loop, &cl.done, client_done);
  pthread_t th;
  pthread_create(&th, NULL, client_main, &cl);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  KB_CHECK(cases[0].status == 200 && strstr(cases[0].out, "\"minor\":\"32\""));
  KB_CHECK(cases[1].status == 200 && strstr(cases[1].out, "\"kind\":\"Table\""));
  KB_CHECK(strstr(cases[1].out, "{\"name\":\"Ready\"") && strstr(cases[1].out, "\"cells\":[\"p1\",\"0/1\",\"Pending\",0,"));
  KB_CHECK(cases[2].status == 200 && strstr(cases[2].out, "\"name\":\"p1\""));
  KB_CHECK(cases[3].status == 429 && strstr(cases[3].out, "Retry-After: 3"));
  KB_CHECK(strstr(cases[3].out, "\"reason\":\"TooManyRequests\"") && strstr(cases[3].out, "\"retryAfterSeconds\":3"));
  KB_CHECK(cases[4].cc != CURLE_OK);
  KB_CHECK(cases[5].status == 400 && strstr(cases[5].out, "strict decoding error: unknown field \\\"extra\\\""));
  KB_CHECK(cases[6].status == 415 && strstr(cases[6].out, "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"));
  KB_CHECK(cases[7].status == 200 && strstr(cases[7].out, "{\"type\":\"ADDED\",\"object\":{") && !strstr(cases[7].out, "q1"));
  KB_CHECK(cases[8].status == 200 && strstr(cases[8].out, "\"type\":\"ERROR\"") && strstr(cases[8].out, "too old resource version: 2"));
  KB_CHECK(cases[9].status == 400 && strstr(cases[9].out, "field label not supported: spec.bogus"));
  KB_CHECK(cases[10].status == 400 && strstr(cases[10].out, "propagationPolicy: Unsupported value: \\\"Sideways\\\""));
  KB_CHECK(cases[11].status == 200 && strstr(cases[11].out, "\"name\":\"jobs/status\""));
  KB_CHECK(cases[12].status == 400 && strstr(cases[12].out, "invalid resource version \\\"abc\\\""));
  /* beyond the store's resourceVersion: the watch cache's 3 s wait, then 504 */
  KB_CHECK(cases[13].status == 504 && strstr(cases[13].out, "Too large resource version: 99999, current: "));
  KB_CHECK(strstr(cases[13].out, "\"reason\":\"ResourceVersionTooLarge\"") != NULL);
  KB_CHECK(strstr(cases[13].out, "\"reason\":\"Timeout\"") != NULL);
  KB_CHECK(calls == 12); /* not for the faulted requests */
  KB_CHECK(kb_k8s_api_streams(api) == 0);
  kb_k8s_api_free(api);
  kb_vclock_free(clk);
  kb_httpd_close(srv, NULL, NULL);
  uv_close((uv_handle_t *)&cl.done, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  KB_CHECK(uv_loop_close(&loop) == 0);
  kb_k8s_store_free(st);
}

/* A Secret's stringData is stored as base64 data (write-only, as the
 * apiserver has it), on create and on update; stringData wins a clash. */
static void test_secret_string_data(void) {
  kb_k8s_store *st = new_store(4);
  const kb_k8s_res *secrets = kb_k8s_store_find(st, "", "secrets");
  kb_k8s_error e;
  cJSON *in = J("{\"metadata\":{\"name\":\"s\"},\"data\":{\"x\":\"eA==\",\"k\":\"b2xk\"},"
                "\"stringData\":{\"k\":\"v1\",\"user\":\"admin\"}}");
  cJSON *out = NULL;
  KB_CHECK(kb_k8s_create(st, secrets, "default", in, 0, &out, &e) == 0);
  KB_CHECK(out && !cJSON_GetObjectItemCaseSensitive(out, "stringData"));
  KB_CHECK_STR(str_at(out, "data", "x"), "eA==");
  KB_CHECK_STR(str_at(out, "data", "k"), "djE=");      /* "v1" */
  KB_CHECK_STR(str_at(out, "data", "user"), "YWRtaW4="); /* "admin" */
  cJSON_Delete(out);
  cJSON_Delete(in);
  in = J("{\"metadata\":{\"name\":\"s\"},\"stringData\":{\"k\":\"v2\"}}");
  out = NULL;
  KB_CHECK(kb_k8s_update(st, secrets, "default", "s", in, 0, &out, &e) == 0);
  KB_CHECK(out && !cJSON_GetObjectItemCaseSensitive(out, "stringData"));
  KB_CHECK_STR(str_at(out, "data", "k"), "djI=");
  cJSON_Delete(out);
  cJSON_Delete(in);
  kb_k8s_store_free(st);
}

/* A 422 carries its cause (kubectl prints "* field: detail" from it). */
static void test_invalid_causes(void) {
  kb_k8s_store *st = new_store(4);
  const kb_k8s_res *cms = kb_k8s_store_find(st, "", "configmaps");
  kb_k8s_error e;
  cJSON *in = J("{\"metadata\":{\"name\":\"Bad_Name\"}}");
  KB_CHECK(kb_k8s_create(st, cms, "default", in, 0, NULL, &e) == -422);
  cJSON *s = kb_k8s_status_json(&e, cms);
  const cJSON *causes = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "details"), "causes");
  KB_CHECK(cJSON_GetArraySize(causes) == 1);
  const cJSON *c = cJSON_GetArrayItem(causes, 0);
  KB_CHECK_STR(str_at(c, "field", NULL), "metadata.name");
  KB_CHECK_STR(str_at(c, "reason", NULL), "FieldValueInvalid");
  KB_CHECK(!strncmp(str_at(c, "message", NULL), "Invalid value: \"Bad_Name\": a lowercase RFC 1123", 47));
  cJSON_Delete(s);
  cJSON_Delete(in);
  in = J("{\"metadata\":{}}");
  KB_CHECK(kb_k8s_create(st, cms, "default", in, 0, NULL, &e) == -422);
  s = kb_k8s_status_json(&e, cms);
  causes = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "details"), "causes");
  KB_CHECK_STR(str_at(cJSON_GetArrayItem(causes, 0), "reason", NULL), "FieldValueRequired");
  cJSON_Delete(s);
  cJSON_Delete(in);
  kb_k8s_store_free(st);
}

/* A Job's template is immutable (422 with its cause); suspend is not. */
static void test_job_immutable(void) {
  kb_k8s_store *st = new_store(4);
  const kb_k8s_res *jobs = kb_k8s_store_find(st, "batch", "jobs");
  kb_k8s_error e;
  cJSON *in = J("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"template\":{\"spec\":{\"restartPolicy\":"
                "\"Never\",\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}}}");
  KB_CHECK(kb_k8s_create(st, jobs, "default", in, 0, NULL, &e) == 0);
  cJSON_Delete(in);
  const char *p = "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"alpine\"}]}}}}";
  KB_CHECK(kb_k8s_patch(st, jobs, "default", "j", KB_K8S_PATCH_MERGE, p, strlen(p), 0, NULL, &e) == -422);
  KB_CHECK(strstr(e.message, "spec.template: Invalid value") && strstr(e.message, "field is immutable"));
  p = "{\"spec\":{\"suspend\":true}}";
  KB_CHECK(kb_k8s_patch(st, jobs, "default", "j", KB_K8S_PATCH_MERGE, p, strlen(p), 0, NULL, &e) == 0);
  kb_k8s_store_free(st);
}

int main(void) {
  KB_RUN(test_job_immutable);
  KB_RUN(test_invalid_causes);
  KB_RUN(test_secret_string_data);
  KB_RUN(test_create_get_metadata);
  KB_RUN(test_update_conflict_status);
  KB_RUN(test_selectors);
  KB_RUN(test_paging);
  KB_RUN(test_watch);
  KB_RUN(test_delete_gc_finalizers);
  KB_RUN(test_gc_owner_index);
  KB_RUN(test_strategic_merge);
  KB_RUN(test_merge_and_json_patch);
  KB_RUN(test_logs);
  KB_RUN(test_rest);
  return kb_test_report();
}
