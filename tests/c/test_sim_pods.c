/* Pods and nodes through the simulator's Kubernetes API (kb_sim_server,
 * fast profile, a 3-node cluster of 4 cpu each), over loopback with
 * blocking libcurl, checked against the model's own figures (/sim/v1/status)
 * and capacity / requests as ground truth:
 *   - bare pods run: 300 pods of 1 cpu -> exactly 12 Running and Ready (the
 *     client's object kept: uid, labels; nodeName, IPs, conditions,
 *     container statuses and events written), 288 Pending with
 *     FailedScheduling; deleting one frees its cpu for a waiting one;
 *     durations and restart policies end pods Succeeded or Failed;
 *   - Node writes persist and reach the scheduler (cordon, labels, taints);
 *   - pods/eviction against PodDisruptionBudgets (201, 429, 404) and the
 *     budgets' status;
 *   - a Job's pod deleted through the API is replaced. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kb/buf.h"
#include "kb/sim_server.h"
#include "kbtest.h"

#define POLLS 2000 /* x 10 ms: bounded waits */
#define NS "/api/v1/namespaces/default"

static kb_sim_server *srv;

typedef struct resp {
  long status;
  char *body;
  cJSON *json;
} resp;

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
  kb_buf_append(ud, p, sz * n);
  return sz * n;
}

static resp req_ct(const char *method, const char *path, const char *body, const char *ctype) {
  resp r = {0};
  char url[2048], ct[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", kb_sim_server_port(srv), path);
  snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
  CURL *c = curl_easy_init();
  kb_buf b = KB_BUF_INIT;
  struct curl_slist *h = curl_slist_append(NULL, ct);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
  if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  kb_buf_append(&b, "", 1);
  r.body = b.data;
  r.json = cJSON_Parse(r.body);
  return r;
}

static resp req(const char *method, const char *path, const char *body) {
  return req_ct(method, path, body, "application/json");
}

static void resp_free(resp *r) {
  free(r->body);
  cJSON_Delete(r->json);
  memset(r, 0, sizeof *r);
}

static long status_of(const char *method, const char *path, const char *body) {
  resp r = req(method, path, body);
  long s = r.status;
  if (s >= 300) fprintf(stderr, "%s %s: %ld %s\n", method, path, s, r.body);
  resp_free(&r);
  return s;
}

static const cJSON *jpath(const cJSON *j, const char *path) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *save, *t = strtok_r(buf, ".", &save); t && j; t = strtok_r(NULL, ".", &save)) {
    char *end;
    long i = strtol(t, &end, 10);
    j = *end == 0 && cJSON_IsArray(j) ? cJSON_GetArrayItem(j, (int)i) : cJSON_GetObjectItemCaseSensitive(j, t);
  }
  return j;
}

static const char *jstr(const cJSON *j, const char *path) { return cJSON_GetStringValue(jpath(j, path)); }

static double jnum(const cJSON *j, const char *path) {
  const cJSON *v = jpath(j, path);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static int str_is(const char *a, const char *b) { return a && b && !strcmp(a, b); }

static void nap(void) {
  struct timespec ts = {0, 10 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* The pod condition of that type, or NULL. */
static const cJSON *cond(const cJSON *pod, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, jpath(pod, "status.conditions")) if (str_is(jstr(c, "type"), type)) return c;
  return NULL;
}

static int cond_true(const cJSON *pod, const char *type) {
  const cJSON *c = cond(pod, type);
  return c && str_is(jstr(c, "status"), "True");
}

/* A bare pod: cpu request, labels JSON ("{...}"), annotations JSON, restart policy. */
static long make_pod(const char *name, const char *cpu, const char *labels, const char *ann,
                     const char *restart, const char *spec_extra) {
  char body[2048], rp[64] = "";
  if (restart) snprintf(rp, sizeof rp, "\"restartPolicy\":\"%s\",", restart);
  snprintf(body, sizeof body,
           "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"labels\":%s,"
           "\"annotations\":%s},\"spec\":{%s\"containers\":[{\"name\":\"c\",\"image\":\"busybox\","
           "\"resources\":{\"requests\":{\"cpu\":\"%s\"}}}]%s%s}}",
           name, labels ? labels : "{}", ann ? ann : "{}", rp, cpu, spec_extra ? "," : "",
           spec_extra ? spec_extra : "");
  return status_of("POST", NS "/pods", body);
}

typedef struct counts {
  int running, ready, pending, unsched, succeeded, failed, total;
  char msg[300]; /* one Pending pod's PodScheduled message */
} counts;

static counts count_pods(const char *selector) {
  char path[512];
  snprintf(path, sizeof path, NS "/pods?labelSelector=%s", selector);
  resp r = req("GET", path, NULL);
  counts c = {0};
  const cJSON *p;
  cJSON_ArrayForEach(p, jpath(r.json, "items")) {
    const char *ph = jstr(p, "status.phase");
    c.total++;
    if (str_is(ph, "Running")) c.running++;
    if (str_is(ph, "Succeeded")) c.succeeded++;
    if (str_is(ph, "Failed")) c.failed++;
    if (cond_true(p, "Ready")) c.ready++;
    if (str_is(ph, "Pending")) c.pending++;
    const cJSON *s = cond(p, "PodScheduled");
    if (s && str_is(jstr(s, "status"), "False") && str_is(jstr(s, "reason"), "Unschedulable")) {
      c.unsched++;
      snprintf(c.msg, sizeof c.msg, "%s", jstr(s, "message") ? jstr(s, "message") : "");
    }
  }
  resp_free(&r);
  return c;
}

/* Polls until running == want_running and unsched == want_unsched. */
static counts wait_counts(const char *selector, int want_running, int want_unsched) {
  counts c = {0};
  for (int i = 0; i < POLLS; i++) {
    c = count_pods(selector);
    if (c.running == want_running && c.ready == want_running && c.unsched == want_unsched) return c;
    nap();
  }
  fprintf(stderr, "%s: %d running, %d ready, %d unschedulable (wanted %d, %d)\n", selector,
          c.running, c.ready, c.unsched, want_running, want_unsched);
  return c;
}

static double sim_status(const char *field) {
  resp r = req("GET", "/sim/v1/status", NULL);
  double v = jnum(r.json, field);
  resp_free(&r);
  return v;
}

static void delete_all(const char *selector) {
  char path[512];
  snprintf(path, sizeof path, NS "/pods?labelSelector=%s", selector);
  KB_CHECK(status_of("DELETE", path, NULL) == 200);
}

/* ---- tests ---- */

static void test_bare_pods_fill_cluster(void) {
  enum { N = 300, FIT = 3 * 4 }; /* 3 nodes x 4 cpu / 1 cpu */
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "fill-%03d", i);
    KB_CHECK(make_pod(name, "1", "{\"t\":\"fill\"}", NULL, NULL, NULL) == 201);
  }
  counts c = wait_counts("t%3Dfill", FIT, N - FIT);
  KB_CHECK(c.total == N);
  KB_CHECK(c.running == FIT && c.ready == FIT);
  KB_CHECK(c.pending == N - FIT && c.unsched == N - FIT);
  KB_CHECK_STR(c.msg, "0/3 nodes are available: 3 Insufficient cpu.");
  /* The model agrees: 12 cpu requested, 12 running, 288 waiting. */
  KB_CHECK(sim_status("cluster.cpu_requested_m") == FIT * 1000);
  KB_CHECK(sim_status("cluster.pods_running") == FIT);
  KB_CHECK(sim_status("cluster.pods_unschedulable") == N - FIT);
  /* Every Pending pod has its FailedScheduling event, by its own name. */
  resp ev = req("GET", NS "/events?fieldSelector=reason%3DFailedScheduling", NULL);
  int fs = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, jpath(ev.json, "items")) {
    const char *n = jstr(e, "involvedObject.name");
    if (n && !strncmp(n, "fill-", 5) && str_is(jstr(e, "source.component"), "default-scheduler")) fs++;
  }
  KB_CHECK(fs == N - FIT);
  resp_free(&ev);
  /* A running pod: the client's object with the kubelet's status. */
  resp r = req("GET", NS "/pods?labelSelector=t%3Dfill&fieldSelector=status.phase%3DRunning", NULL);
  const cJSON *pod = jpath(r.json, "items.0");
  const char *name = jstr(pod, "metadata.name");
  KB_CHECK(name && !strncmp(name, "fill-", 5));
  KB_CHECK_STR(jstr(pod, "metadata.labels.t"), "fill");
  KB_CHECK(jstr(pod, "spec.nodeName") && !strncmp(jstr(pod, "spec.nodeName"), "n-a-", 4));
  KB_CHECK(jstr(pod, "status.podIP") && jstr(pod, "status.hostIP") && jstr(pod, "status.startTime"));
  KB_CHECK(cond_true(pod, "PodScheduled") && cond_true(pod, "Initialized") &&
           cond_true(pod, "ContainersReady"));
  KB_CHECK_STR(jstr(pod, "status.containerStatuses.0.name"), "c");
  KB_CHECK(cJSON_IsTrue(jpath(pod, "status.containerStatuses.0.ready")));
  KB_CHECK(jstr(pod, "status.containerStatuses.0.state.running.startedAt") != NULL);
  char uid[64], victim[64], node[64];
  snprintf(uid, sizeof uid, "%s", jstr(pod, "metadata.uid"));
  snprintf(victim, sizeof victim, "%s", name);
  snprintf(node, sizeof node, "%s", jstr(pod, "spec.nodeName"));
  resp_free(&r);
  char path[256];
  snprintf(path, sizeof path, NS "/pods/%s", victim);
  resp g = req("GET", path, NULL);
  KB_CHECK_STR(jstr(g.json, "metadata.uid"), uid);
  resp_free(&g);
  /* Its events, in order: Scheduled (to its node), Pulled, Created, Started. */
  snprintf(path, sizeof path, NS "/events?fieldSelector=involvedObject.name%%3D%s", victim);
  ev = req("GET", path, NULL);
  const char *want[] = {"Scheduled", "Pulled", "Created", "Started"};
  int at = 0;
  cJSON_ArrayForEach(e, jpath(ev.json, "items")) {
    if (at < 4 && str_is(jstr(e, "reason"), want[at])) at++;
    if (str_is(jstr(e, "reason"), "Scheduled")) {
      char m[200];
      snprintf(m, sizeof m, "Successfully assigned default/%s to %s", victim, node);
      KB_CHECK_STR(jstr(e, "message"), m);
    }
    if (str_is(jstr(e, "reason"), "Started")) KB_CHECK_STR(jstr(e, "message"), "Started container c");
  }
  KB_CHECK(at == 4);
  resp_free(&ev);
  /* Deleting it frees its cpu: a waiting pod takes it; the model agrees. */
  snprintf(path, sizeof path, NS "/pods/%s", victim);
  KB_CHECK(status_of("DELETE", path, NULL) == 200);
  c = wait_counts("t%3Dfill", FIT, N - FIT - 1);
  KB_CHECK(c.total == N - 1 && c.running == FIT && c.unsched == N - FIT - 1);
  KB_CHECK(sim_status("cluster.cpu_requested_m") == FIT * 1000);
  delete_all("t%3Dfill");
  for (int i = 0; i < POLLS && sim_status("cluster.pods_running") != 0; i++) nap();
  KB_CHECK(sim_status("cluster.cpu_requested_m") == 0);
  KB_CHECK(sim_status("cluster.pods_unschedulable") == 0);
  KB_CHECK(count_pods("t%3Dfill").total == 0);
}

static void test_durations_and_policies(void) {
  KB_CHECK(make_pod("d-ok", "100m", "{\"t\":\"dur\"}", "{\"sim.kbrun.io/duration\":\"5\"}", NULL, NULL) == 201);
  KB_CHECK(make_pod("d-fail", "100m", "{\"t\":\"dur\"}",
                    "{\"sim.kbrun.io/duration\":\"5\",\"sim.kbrun.io/fail\":\"true\"}", "Never", NULL) == 201);
  KB_CHECK(make_pod("d-never", "100m", "{\"t\":\"dur\"}", NULL, "Never", NULL) == 201); /* steps.default */
  KB_CHECK(make_pod("d-always", "100m", "{\"t\":\"dur\"}", NULL, NULL, NULL) == 201);  /* forever */
  counts c = {0};
  for (int i = 0; i < POLLS; i++) {
    c = count_pods("t%3Ddur");
    if (c.succeeded == 2 && c.failed == 1) break;
    nap();
  }
  KB_CHECK(c.succeeded == 2 && c.failed == 1 && c.running == 1 && c.ready == 1);
  resp f = req("GET", NS "/pods/d-fail", NULL);
  KB_CHECK(jnum(f.json, "status.containerStatuses.0.state.terminated.exitCode") == 1);
  KB_CHECK_STR(jstr(f.json, "status.containerStatuses.0.state.terminated.reason"), "Error");
  resp_free(&f);
  resp a = req("GET", NS "/pods/d-always", NULL);
  KB_CHECK_STR(jstr(a.json, "status.phase"), "Running");
  resp_free(&a);
  delete_all("t%3Ddur");
}

static const char *node_name(int i) {
  static char buf[3][16];
  snprintf(buf[i], sizeof buf[i], "n-a-%d", i);
  return buf[i];
}

static resp get_node(int i) {
  char path[128];
  snprintf(path, sizeof path, "/api/v1/nodes/%s", node_name(i));
  return req("GET", path, NULL);
}

static long patch_node(int i, const char *patch) {
  char path[128];
  snprintf(path, sizeof path, "/api/v1/nodes/%s", node_name(i));
  resp r = req_ct("PATCH", path, patch, "application/merge-patch+json");
  long s = r.status;
  resp_free(&r);
  return s;
}

static int has_taint(const cJSON *node, const char *key) {
  const cJSON *t;
  cJSON_ArrayForEach(t, jpath(node, "spec.taints")) if (str_is(jstr(t, "key"), key)) return 1;
  return 0;
}

static void test_node_writes(void) {
  /* Cordon + a label on node 0, a taint on node 1. */
  KB_CHECK(patch_node(0, "{\"metadata\":{\"labels\":{\"team\":\"x\"}},\"spec\":{\"unschedulable\":true}}") == 200);
  KB_CHECK(patch_node(1, "{\"metadata\":{\"labels\":{\"team\":\"x\"}},\"spec\":{\"taints\":"
                         "[{\"key\":\"dedicated\",\"value\":\"gpu\",\"effect\":\"NoSchedule\"}]}}") == 200);
  /* Pods for team=x: none fits. The mirror has written the nodes since
   * (status, the cordon's taint) and kept what the client set. */
  KB_CHECK(make_pod("nw-1", "100m", "{\"t\":\"nw\"}", NULL, NULL, "\"nodeSelector\":{\"team\":\"x\"}") == 201);
  counts c = wait_counts("t%3Dnw", 0, 1);
  KB_CHECK(c.unsched == 1);
  KB_CHECK_STR(c.msg, "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                      "1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable.");
  resp n0 = get_node(0), n1 = get_node(1);
  KB_CHECK(cJSON_IsTrue(jpath(n0.json, "spec.unschedulable")));
  KB_CHECK_STR(jstr(n0.json, "metadata.labels.team"), "x");
  KB_CHECK(has_taint(n0.json, "node.kubernetes.io/unschedulable"));
  KB_CHECK(has_taint(n1.json, "dedicated") && !has_taint(n1.json, "node.kubernetes.io/unschedulable"));
  KB_CHECK(jstr(n0.json, "status.allocatable.cpu") != NULL);
  resp_free(&n0);
  resp_free(&n1);
  /* A tolerating pod may use node 1. */
  KB_CHECK(make_pod("nw-2", "100m", "{\"t\":\"nw\"}", NULL, NULL,
                    "\"nodeSelector\":{\"team\":\"x\"},\"tolerations\":[{\"key\":\"dedicated\","
                    "\"operator\":\"Equal\",\"value\":\"gpu\",\"effect\":\"NoSchedule\"}]") == 201);
  c = wait_counts("t%3Dnw", 1, 1);
  resp p2 = req("GET", NS "/pods/nw-2", NULL);
  KB_CHECK_STR(jstr(p2.json, "spec.nodeName"), "n-a-1");
  resp_free(&p2);
  /* Uncordon: the waiting pod lands on node 0, and the cordon's taint goes. */
  KB_CHECK(patch_node(0, "{\"spec\":{\"unschedulable\":null}}") == 200);
  c = wait_counts("t%3Dnw", 2, 0);
  KB_CHECK(c.running == 2);
  resp p1 = req("GET", NS "/pods/nw-1", NULL);
  KB_CHECK_STR(jstr(p1.json, "spec.nodeName"), "n-a-0");
  resp_free(&p1);
  n0 = get_node(0);
  KB_CHECK(!has_taint(n0.json, "node.kubernetes.io/unschedulable"));
  KB_CHECK_STR(jstr(n0.json, "metadata.labels.team"), "x");
  resp_free(&n0);
  KB_CHECK(patch_node(1, "{\"spec\":{\"taints\":null}}") == 200);
  /* A NoExecute taint evicts the pods there that do not tolerate it. */
  KB_CHECK(make_pod("nx-1", "100m", "{\"t\":\"nw\"}", NULL, NULL,
                    "\"nodeSelector\":{\"kubernetes.io/hostname\":\"n-a-2\"}") == 201);
  KB_CHECK(make_pod("nx-2", "100m", "{\"t\":\"nw\"}", NULL, NULL,
                    "\"nodeSelector\":{\"kubernetes.io/hostname\":\"n-a-2\"},\"tolerations\":"
                    "[{\"key\":\"maint\",\"operator\":\"Exists\",\"effect\":\"NoExecute\"}]") == 201);
  KB_CHECK(wait_counts("t%3Dnw", 4, 0).running == 4);
  double cpu = sim_status("cluster.cpu_requested_m");
  KB_CHECK(patch_node(2, "{\"spec\":{\"taints\":[{\"key\":\"maint\",\"effect\":\"NoExecute\"}]}}") == 200);
  resp gone = req("GET", NS "/pods/nx-1", NULL);
  KB_CHECK(gone.status == 404);
  resp_free(&gone);
  resp kept = req("GET", NS "/pods/nx-2", NULL);
  KB_CHECK(kept.status == 200 && str_is(jstr(kept.json, "status.phase"), "Running"));
  resp_free(&kept);
  KB_CHECK(sim_status("cluster.cpu_requested_m") == cpu - 100);
  resp ev = req("GET", NS "/events?fieldSelector=reason%3DTaintManagerEviction", NULL);
  KB_CHECK_STR(jstr(ev.json, "items.0.message"), "Marking for deletion Pod default/nx-1");
  KB_CHECK_STR(jstr(ev.json, "items.0.involvedObject.name"), "nx-1");
  resp_free(&ev);
  KB_CHECK(patch_node(2, "{\"spec\":{\"taints\":null}}") == 200);
  delete_all("t%3Dnw");
}

static const char pdb_json[] =
    "{\"apiVersion\":\"policy/v1\",\"kind\":\"PodDisruptionBudget\",\"metadata\":{\"name\":\"%s\"},"
    "\"spec\":{%s,\"selector\":{\"matchLabels\":{\"app\":\"%s\"}}}}";

static resp wait_pdb(const char *name, int healthy, int allowed) {
  char path[256];
  snprintf(path, sizeof path, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/%s", name);
  for (int i = 0; i < POLLS; i++) {
    resp r = req("GET", path, NULL);
    if (jnum(r.json, "status.currentHealthy") == healthy && jnum(r.json, "status.disruptionsAllowed") == allowed)
      return r;
    resp_free(&r);
    nap();
  }
  return req("GET", path, NULL);
}

static resp evict(const char *pod) {
  char path[256], body[256];
  snprintf(path, sizeof path, NS "/pods/%s/eviction", pod);
  snprintf(body, sizeof body,
           "{\"apiVersion\":\"policy/v1\",\"kind\":\"Eviction\",\"metadata\":{\"name\":\"%s\","
           "\"namespace\":\"default\"}}", pod);
  return req("POST", path, body);
}

static void test_eviction_and_budgets(void) {
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "w-%d", i);
    KB_CHECK(make_pod(name, "100m", "{\"app\":\"w\",\"t\":\"ev\"}", NULL, NULL, NULL) == 201);
  }
  KB_CHECK(wait_counts("t%3Dev", 3, 0).running == 3);
  char body[512];
  snprintf(body, sizeof body, pdb_json, "w", "\"minAvailable\":2", "w");
  KB_CHECK(status_of("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", body) == 201);
  resp b = wait_pdb("w", 3, 1);
  KB_CHECK(jnum(b.json, "status.desiredHealthy") == 2 && jnum(b.json, "status.expectedPods") == 3);
  KB_CHECK(jnum(b.json, "status.observedGeneration") == 1);
  KB_CHECK_STR(jstr(b.json, "status.conditions.0.type"), "DisruptionAllowed");
  KB_CHECK_STR(jstr(b.json, "status.conditions.0.reason"), "SufficientPods");
  resp_free(&b);
  double running = sim_status("cluster.pods_running");
  /* One disruption allowed: the first eviction goes through. */
  resp e = evict("w-0");
  KB_CHECK(e.status == 201);
  KB_CHECK_STR(jstr(e.json, "kind"), "Status");
  KB_CHECK_STR(jstr(e.json, "status"), "Success");
  resp_free(&e);
  resp gone = req("GET", NS "/pods/w-0", NULL);
  KB_CHECK(gone.status == 404);
  resp_free(&gone);
  for (int i = 0; i < POLLS && sim_status("cluster.pods_running") != running - 1; i++) nap();
  KB_CHECK(sim_status("cluster.pods_running") == running - 1);
  b = wait_pdb("w", 2, 0);
  KB_CHECK(jnum(b.json, "status.currentHealthy") == 2 && jnum(b.json, "status.disruptionsAllowed") == 0);
  KB_CHECK_STR(jstr(b.json, "status.conditions.0.reason"), "InsufficientPods");
  resp_free(&b);
  /* The next would break the budget: 429 with the budget's cause; the pod stays. */
  e = evict("w-1");
  KB_CHECK(e.status == 429);
  KB_CHECK_STR(jstr(e.json, "reason"), "TooManyRequests");
  KB_CHECK_STR(jstr(e.json, "message"), "Cannot evict pod as it would violate the pod's disruption budget.");
  KB_CHECK_STR(jstr(e.json, "details.causes.0.reason"), "DisruptionBudget");
  KB_CHECK_STR(jstr(e.json, "details.causes.0.message"), "The disruption budget w needs 2 healthy pods and has 2 currently");
  resp_free(&e);
  resp still = req("GET", NS "/pods/w-1", NULL);
  KB_CHECK(still.status == 200 && str_is(jstr(still.json, "status.phase"), "Running"));
  resp_free(&still);
  e = evict("nope");
  KB_CHECK(e.status == 404);
  KB_CHECK_STR(jstr(e.json, "message"), "pods \"nope\" not found");
  resp_free(&e);
  /* maxUnavailable over pods without a controller: the budget fails safe. */
  snprintf(body, sizeof body, pdb_json, "w2", "\"maxUnavailable\":1", "solo");
  KB_CHECK(make_pod("solo", "100m", "{\"app\":\"solo\",\"t\":\"ev\"}", NULL, NULL, NULL) == 201);
  KB_CHECK(wait_counts("app%3Dsolo", 1, 0).running == 1);
  KB_CHECK(status_of("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", body) == 201);
  resp s = wait_pdb("w2", 0, 0);
  for (int i = 0; i < POLLS && !str_is(jstr(s.json, "status.conditions.0.reason"), "SyncFailed"); i++) {
    resp_free(&s);
    nap();
    s = req("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/w2", NULL);
  }
  KB_CHECK_STR(jstr(s.json, "status.conditions.0.reason"), "SyncFailed");
  KB_CHECK_STR(jstr(s.json, "status.conditions.0.message"), "found no controllers for pod \"solo\"");
  resp_free(&s);
  e = evict("solo");
  KB_CHECK(e.status == 429);
  resp_free(&e);
  /* A Pending pod goes whatever its budget says. */
  KB_CHECK(make_pod("w-big", "64", "{\"app\":\"w\",\"t\":\"ev\"}", NULL, NULL, NULL) == 201);
  for (int i = 0; i < POLLS && count_pods("t%3Dev").unsched != 1; i++) nap();
  e = evict("w-big");
  KB_CHECK(e.status == 201);
  resp_free(&e);
  KB_CHECK(status_of("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/w", NULL) == 200);
  KB_CHECK(status_of("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/w2", NULL) == 200);
  /* Without a budget an eviction is a delete. */
  e = evict("w-1");
  KB_CHECK(e.status == 201);
  resp_free(&e);
  delete_all("t%3Dev");
}

static void test_job_pod_replaced(void) {
  const char *job =
      "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"long\"},\"spec\":"
      "{\"backoffLimit\":3,\"template\":{\"metadata\":{\"annotations\":{\"sim.kbrun.io/duration\":"
      "\"100000\"}},\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"c\","
      "\"image\":\"busybox\"}]}}}}";
  KB_CHECK(status_of("POST", "/apis/batch/v1/namespaces/default/jobs", job) == 201);
  counts c = wait_counts("job-name%3Dlong", 1, 0);
  KB_CHECK(c.running == 1);
  resp l = req("GET", NS "/pods?labelSelector=job-name%3Dlong", NULL);
  char first[64], path[160];
  snprintf(first, sizeof first, "%s", jstr(l.json, "items.0.metadata.name"));
  resp_free(&l);
  resp e = evict(first);
  KB_CHECK(e.status == 201);
  resp_free(&e);
  /* The Job counts it failed and runs a new pod. */
  resp j = {0};
  for (int i = 0; i < POLLS; i++) {
    resp_free(&j);
    j = req("GET", "/apis/batch/v1/namespaces/default/jobs/long", NULL);
    if (jnum(j.json, "status.failed") == 1 && jnum(j.json, "status.ready") == 1) break;
    nap();
  }
  KB_CHECK(jnum(j.json, "status.failed") == 1 && jnum(j.json, "status.active") == 1);
  resp_free(&j);
  l = req("GET", NS "/pods?labelSelector=job-name%3Dlong", NULL);
  KB_CHECK(cJSON_GetArraySize(jpath(l.json, "items")) == 1);
  KB_CHECK(jstr(l.json, "items.0.metadata.name") && strcmp(jstr(l.json, "items.0.metadata.name"), first));
  resp_free(&l);
  snprintf(path, sizeof path, "/apis/batch/v1/namespaces/default/jobs/long?propagationPolicy=Background");
  KB_CHECK(status_of("DELETE", path, NULL) == 200);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  kb_sim_server_opts o = {
      .profile = "fast", .speed = 600, .seed = 1,
      .config_yaml = "cluster:\n  node_name_prefix: n-\n  pools:\n"
                     "  - {name: a, nodes: 3, cpu: 4, memory: 16Gi}\n"};
  kb_sim_error err = {0};
  srv = kb_sim_server_start(&o, &err);
  if (!srv) {
    fprintf(stderr, "kb_sim_server_start: %s\n", err.message);
    return 1;
  }
  KB_RUN(test_bare_pods_fill_cluster);
  KB_RUN(test_durations_and_policies);
  KB_RUN(test_node_writes);
  KB_RUN(test_eviction_and_budgets);
  KB_RUN(test_job_pod_replaced);
  kb_sim_server_stop(srv);
  curl_global_cleanup();
  return kb_test_report();
}
