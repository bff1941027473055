/* The store-level controllers (src/sim/controllers/k8s_ctl.h) on a bare store, no
 * model: Deployment -> ReplicaSet -> Pods through scale up and down, the
 * pod-template-hash, a rolling update that never leaves maxSurge /
 * maxUnavailable (pods counted from the store after every step),
 * Endpoints and EndpointSlices from the Ready pods a selector matches, and
 * CronJobs spawning Jobs on an events clock (exact counts over N virtual
 * minutes; Forbid, Replace, suspend, history limits), and node Leases
 * renewed in the store only while watched, else once before a read.
 *
 * Nothing runs the pods here: `kubelet_ready` plays the kubelet, writing
 * a pod's status (Running, a pod IP, Ready) through the status
 * subresource, as the model's scheduler does in the full simulator. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "../../src/sim/controllers/k8s_ctl.h"
#include "kb/k8s_store.h"
#include "kb/vclock.h"
#include "kbtest.h"

#define EPOCH 1700000040.0 /* a whole minute: 28333334 * 60 */

static kb_vclock *g_clock;

static double store_now(void *ud) {
  (void)ud;
  return EPOCH + (g_clock ? kb_vclock_now(g_clock) : 0);
}

typedef struct env {
  kb_k8s_store *st;
  k8s_ctls *ctls;
  const kb_k8s_res *pods, *deploy, *rs, *svc, *ep, *eps, *cj, *jobs;
} env;

static void env_init(env *e) {
  kb_k8s_store_config cfg = {.now = store_now, .seed = 3};
  e->st = kb_k8s_store_new(&cfg);
  KB_CHECK(e->st && kb_k8s_store_add_builtins(e->st) == 0);
  e->ctls = kb_k8s_ctls_start(e->st);
  KB_CHECK(e->ctls != NULL);
  e->pods = kb_k8s_store_lookup(e->st, "", "v1", "pods");
  e->deploy = kb_k8s_store_lookup(e->st, "apps", "v1", "deployments");
  e->rs = kb_k8s_store_lookup(e->st, "apps", "v1", "replicasets");
  e->svc = kb_k8s_store_lookup(e->st, "", "v1", "services");
  e->ep = kb_k8s_store_lookup(e->st, "", "v1", "endpoints");
  e->eps = kb_k8s_store_lookup(e->st, "discovery.k8s.io", "v1", "endpointslices");
  e->cj = kb_k8s_store_lookup(e->st, "batch", "v1", "cronjobs");
  e->jobs = kb_k8s_store_lookup(e->st, "batch", "v1", "jobs");
}

static void env_free(env *e) {
  kb_k8s_ctls_free(e->ctls);
  kb_k8s_store_free(e->st);
}

static int create_yaml_json(env *e, const kb_k8s_res *res, const char *json) {
  cJSON *o = cJSON_Parse(json);
  kb_k8s_error err;
  int rc = o ? kb_k8s_create(e->st, res, "default", o, 0, NULL, &err) : -1;
  if (rc) fprintf(stderr, "create: %s\n", o ? err.message : "bad json");
  cJSON_Delete(o);
  return rc;
}

static int patch(env *e, const kb_k8s_res *res, const char *name, const char *json) {
  kb_k8s_error err;
  int rc = kb_k8s_patch(e->st, res, "default", name, KB_K8S_PATCH_MERGE, json, strlen(json), 0,
                        NULL, &err);
  if (rc) fprintf(stderr, "patch %s: %s\n", name, err.message);
  return rc;
}

static cJSON *list(env *e, const kb_k8s_res *res, const char *labels) {
  kb_k8s_list_opts o = {.ns = "default", .label_selector = labels};
  cJSON *l = NULL;
  KB_CHECK(kb_k8s_list(e->st, res, &o, &l, NULL) == 0);
  return l;
}

static const cJSON *items(const cJSON *l) { return cJSON_GetObjectItemCaseSensitive(l, "items"); }

static double num(const cJSON *o, const char *a, const char *b) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *name_of(const cJSON *o) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "name"));
}

static int n_pods(env *e, const char *labels) {
  cJSON *l = list(e, e->pods, labels);
  int n = cJSON_GetArraySize(items(l));
  cJSON_Delete(l);
  return n;
}

static int pod_ready(const cJSON *p) { return kb_ctl_pod_ready(p); }

static int n_ready(env *e, const char *labels) {
  cJSON *l = list(e, e->pods, labels);
  int n = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, items(l)) n += pod_ready(p);
  cJSON_Delete(l);
  return n;
}

/* The test's kubelet: the pod runs and is Ready, with an IP. */
static int ip_serial;
static void kubelet_ready(env *e, const char *pod, int ready) {
  char body[600];
  snprintf(body, sizeof body,
           "{\"metadata\":{\"name\":\"%s\"},\"status\":{\"phase\":\"Running\",\"podIP\":"
           "\"10.244.0.%d\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"%s\","
           "\"lastTransitionTime\":\"2023-11-14T22:14:00Z\"}]}}",
           pod, ++ip_serial, ready ? "True" : "False");
  cJSON *o = cJSON_Parse(body);
  KB_CHECK(kb_k8s_update(e->st, e->pods, "default", pod, o, KB_K8S_STATUS, NULL, NULL) == 0);
  cJSON_Delete(o);
}

static const char *DEPLOY =
    "{\"metadata\":{\"name\":\"web\"},\"spec\":{\"replicas\":%d,\"selector\":{\"matchLabels\":"
    "{\"app\":\"web\"}},\"template\":{\"metadata\":{\"labels\":{\"app\":\"web\"}},\"spec\":"
    "{\"containers\":[{\"name\":\"nginx\",\"image\":\"nginx:1.27\",\"ports\":[{\"name\":\"http\","
    "\"containerPort\":8080}]}]}}}}";

static void create_deploy(env *e, int replicas) {
  char body[1024];
  snprintf(body, sizeof body, DEPLOY, replicas);
  KB_CHECK(create_yaml_json(e, e->deploy, body) == 0);
}

static cJSON *get(env *e, const kb_k8s_res *res, const char *name) {
  return kb_k8s_get(e->st, res, "default", name, NULL);
}

static const cJSON *condition(const cJSON *o, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "status"), "conditions")) {
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "type"));
    if (t && !strcmp(t, type)) return c;
  }
  return NULL;
}

static const char *cond_field(const cJSON *o, const char *type, const char *field) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(condition(o, type), field));
}

/* ---- tests ---- */

static void test_template_hash(void) {
  cJSON *a = cJSON_Parse("{\"metadata\":{\"labels\":{\"app\":\"web\",\"tier\":\"fe\"}},\"spec\":"
                         "{\"containers\":[{\"name\":\"c\",\"image\":\"x:1\"}]}}");
  /* as a Go client sends it back (rollout undo): keys in another order,
   * creationTimestamp: null, resources: {} */
  cJSON *b = cJSON_Parse("{\"spec\":{\"containers\":[{\"image\":\"x:1\",\"name\":\"c\","
                         "\"resources\":{}}]},\"metadata\":{\"creationTimestamp\":null,"
                         "\"labels\":{\"tier\":\"fe\",\"app\":\"web\"}}}");
  cJSON *c = cJSON_Parse("{\"metadata\":{\"labels\":{\"app\":\"web\",\"tier\":\"fe\"}},\"spec\":"
                         "{\"containers\":[{\"name\":\"c\",\"image\":\"x:2\"}]}}");
  char ha[16], hb[16], hc[16], again[16];
  kb_k8s_template_hash(a, ha);
  kb_k8s_template_hash(b, hb);
  kb_k8s_template_hash(c, hc);
  kb_k8s_template_hash(a, again);
  KB_CHECK_STR(ha, hb); /* neither order nor null/empty fields matter */
  KB_CHECK_STR(ha, again);
  KB_CHECK(strcmp(ha, hc) != 0);
  KB_CHECK(strspn(ha, "bcdfghjklmnpqrstvwxz2456789") == strlen(ha) && strlen(ha) >= 1);
  cJSON_Delete(a);
  cJSON_Delete(b);
  cJSON_Delete(c);
}

static void test_deploy_scale(void) {
  env e;
  env_init(&e);
  create_deploy(&e, 3);
  cJSON *d = get(&e, e.deploy, "web");
  char hash[16], rsname[64], sel[96];
  kb_k8s_template_hash(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "spec"), "template"), hash);
  snprintf(rsname, sizeof rsname, "web-%s", hash);
  snprintf(sel, sizeof sel, "app=web,pod-template-hash=%s", hash);
  cJSON *rs = get(&e, e.rs, rsname);
  KB_CHECK(rs != NULL);
  KB_CHECK(num(rs, "spec", "replicas") == 3);
  KB_CHECK(n_pods(&e, sel) == 3);
  /* pods: <rs>-xxxxx, controlled by the ReplicaSet */
  cJSON *l = list(&e, e.pods, sel);
  const cJSON *p;
  cJSON_ArrayForEach(p, items(l)) {
    KB_CHECK(!strncmp(name_of(p), rsname, strlen(rsname)) && strlen(name_of(p)) == strlen(rsname) + 6);
    KB_CHECK(kb_ctl_owned_by(p, "ReplicaSet", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                               cJSON_GetObjectItemCaseSensitive(rs, "metadata"), "uid"))));
  }
  cJSON_Delete(l);
  cJSON_Delete(rs);
  cJSON_Delete(d);
  d = get(&e, e.deploy, "web");
  KB_CHECK(num(d, "status", "replicas") == 3 && num(d, "status", "updatedReplicas") == 3);
  KB_CHECK(num(d, "status", "availableReplicas") == 0);
  KB_CHECK_STR(cond_field(d, "Available", "reason"), "MinimumReplicasUnavailable");
  cJSON_Delete(d);
  /* the pods run: available follows their Ready condition */
  l = list(&e, e.pods, sel);
  cJSON_ArrayForEach(p, items(l)) kubelet_ready(&e, name_of(p), 1);
  cJSON_Delete(l);
  d = get(&e, e.deploy, "web");
  KB_CHECK(num(d, "status", "readyReplicas") == 3 && num(d, "status", "availableReplicas") == 3);
  KB_CHECK(num(d, "status", "observedGeneration") == num(d, "metadata", "generation"));
  KB_CHECK_STR(cond_field(d, "Available", "reason"), "MinimumReplicasAvailable");
  KB_CHECK_STR(cond_field(d, "Progressing", "reason"), "NewReplicaSetAvailable");
  char msg[128];
  snprintf(msg, sizeof msg, "ReplicaSet \"%s\" has successfully progressed.", rsname);
  KB_CHECK_STR(cond_field(d, "Progressing", "message"), msg);
  cJSON_Delete(d);
  /* scale up, then down: the surplus goes, not-Ready pods first */
  KB_CHECK(patch(&e, e.deploy, "web", "{\"spec\":{\"replicas\":5}}") == 0);
  KB_CHECK(n_pods(&e, sel) == 5 && n_ready(&e, sel) == 3);
  KB_CHECK(patch(&e, e.deploy, "web", "{\"spec\":{\"replicas\":2}}") == 0);
  KB_CHECK(n_pods(&e, sel) == 2 && n_ready(&e, sel) == 2);
  KB_CHECK(patch(&e, e.rs, rsname, "{\"spec\":{\"replicas\":4}}") == 0);
  /* the Deployment owns the ReplicaSet's size: it is set back */
  KB_CHECK(n_pods(&e, sel) == 2);
  d = get(&e, e.deploy, "web");
  KB_CHECK(num(d, "status", "replicas") == 2 && num(d, "status", "availableReplicas") == 2);
  cJSON_Delete(d);
  /* deleting the Deployment takes its ReplicaSet and pods */
  KB_CHECK(kb_k8s_delete(e.st, e.deploy, "default", "web", NULL, NULL, NULL) >= 0);
  KB_CHECK(n_pods(&e, "app=web") == 0 && kb_k8s_store_count(e.st, e.rs, "default") == 0);
  env_free(&e);
}

static void test_rolling_update(void) {
  env e;
  env_init(&e);
  create_deploy(&e, 4); /* maxSurge 25% -> 1, maxUnavailable 25% -> 1 */
  cJSON *l = list(&e, e.pods, "app=web");
  const cJSON *p;
  cJSON_ArrayForEach(p, items(l)) kubelet_ready(&e, name_of(p), 1);
  cJSON_Delete(l);
  KB_CHECK(n_ready(&e, "app=web") == 4);
  KB_CHECK(patch(&e, e.deploy, "web",
                 "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"nginx\","
                 "\"image\":\"nginx:1.28\"}]}}}}") == 0);
  cJSON *d = get(&e, e.deploy, "web");
  char hash[16], sel[96];
  kb_k8s_template_hash(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "spec"), "template"), hash);
  snprintf(sel, sizeof sel, "pod-template-hash=%s", hash);
  cJSON_Delete(d);
  int steps = 0, max_total = 0, min_ready = 99;
  for (; steps < 40; steps++) {
    int total = n_pods(&e, "app=web"), ready = n_ready(&e, "app=web");
    if (total > max_total) max_total = total;
    if (ready < min_ready) min_ready = ready;
    if (n_ready(&e, sel) == 4 && total == 4) break;
    /* the kubelet makes one new pod Ready per step */
    l = list(&e, e.pods, sel);
    const cJSON *q = NULL;
    cJSON_ArrayForEach(p, items(l)) if (!q && !pod_ready(p)) q = p;
    if (q) kubelet_ready(&e, name_of(q), 1);
    cJSON_Delete(l);
    if (!q) break;
  }
  printf("rolling update: %d steps, at most %d pods, at least %d Ready\n", steps, max_total, min_ready);
  KB_CHECK(max_total <= 5); /* replicas + maxSurge */
  KB_CHECK(min_ready >= 3); /* replicas - maxUnavailable */
  KB_CHECK(n_pods(&e, sel) == 4 && n_pods(&e, "app=web") == 4 && n_ready(&e, sel) == 4);
  KB_CHECK(steps >= 2 && steps < 40);
  d = get(&e, e.deploy, "web");
  KB_CHECK(num(d, "status", "updatedReplicas") == 4 && num(d, "status", "replicas") == 4);
  KB_CHECK_STR(cond_field(d, "Progressing", "reason"), "NewReplicaSetAvailable");
  const cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "metadata"), "annotations");
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ann, "deployment.kubernetes.io/revision")), "2");
  cJSON_Delete(d);
  KB_CHECK(kb_k8s_store_count(e.st, e.rs, "default") == 2); /* the old one kept at 0 */
  l = list(&e, e.rs, "app=web");
  cJSON_ArrayForEach(p, items(l)) {
    int is_new = strstr(name_of(p), hash) != NULL;
    KB_CHECK(num(p, "spec", "replicas") == (is_new ? 4 : 0));
  }
  cJSON_Delete(l);
  env_free(&e);
}

static void test_endpoints(void) {
  env e;
  env_init(&e);
  create_deploy(&e, 3);
  KB_CHECK(create_yaml_json(&e, e.pods, "{\"metadata\":{\"name\":\"other\",\"labels\":{\"app\":"
                                        "\"db\"}},\"spec\":{\"containers\":[{\"name\":\"c\","
                                        "\"image\":\"x\"}]}}") == 0);
  kubelet_ready(&e, "other", 1);
  KB_CHECK(create_yaml_json(&e, e.svc, "{\"metadata\":{\"name\":\"web\"},\"spec\":{\"selector\":"
                                       "{\"app\":\"web\"},\"ports\":[{\"port\":80,\"targetPort\":"
                                       "\"http\"}]}}") == 0);
  cJSON *svc = get(&e, e.svc, "web");
  const char *ip = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(svc, "spec"), "clusterIP"));
  KB_CHECK_STR(ip, "10.96.0.2"); /* 10.96.0.1 is the kubernetes Service's */
  cJSON_Delete(svc);
  cJSON *ep = get(&e, e.ep, "web");
  KB_CHECK(ep && !cJSON_GetObjectItemCaseSensitive(ep, "subsets")); /* no pod has an IP yet */
  cJSON_Delete(ep);
  /* two of the three run and are Ready, the third runs unready */
  cJSON *l = list(&e, e.pods, "app=web");
  char want[3][32];
  int i = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, items(l)) {
    kubelet_ready(&e, name_of(p), i < 2);
    snprintf(want[i], sizeof want[i], "10.244.0.%d", ip_serial);
    i++;
  }
  cJSON_Delete(l);
  ep = get(&e, e.ep, "web");
  const cJSON *sub = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ep, "subsets"), 0);
  const cJSON *addrs = cJSON_GetObjectItemCaseSensitive(sub, "addresses");
  const cJSON *nr = cJSON_GetObjectItemCaseSensitive(sub, "notReadyAddresses");
  KB_CHECK(cJSON_GetArraySize(addrs) == 2 && cJSON_GetArraySize(nr) == 1);
  for (int k = 0; k < 2; k++) {
    int found = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, addrs) found |= !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "ip")), want[k]);
    KB_CHECK(found);
  }
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(nr, 0), "ip")), want[2]);
  const cJSON *port = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(sub, "ports"), 0);
  KB_CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(port, "port")) &&
           cJSON_GetObjectItemCaseSensitive(port, "port")->valueint == 8080); /* targetPort "http" */
  cJSON_Delete(ep);
  /* the slice: all three, with their readiness */
  l = list(&e, e.eps, "kubernetes.io/service-name=web");
  KB_CHECK(cJSON_GetArraySize(items(l)) == 1);
  const cJSON *s = cJSON_GetArrayItem(items(l), 0);
  KB_CHECK(!strncmp(name_of(s), "web-", 4));
  int ready = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(s, "endpoints"))
    ready += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(x, "conditions"), "ready"));
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "endpoints")) == 3 && ready == 2);
  cJSON_Delete(l);
  /* scaled to 0: no address left */
  KB_CHECK(patch(&e, e.deploy, "web", "{\"spec\":{\"replicas\":0}}") == 0);
  ep = get(&e, e.ep, "web");
  KB_CHECK(ep && !cJSON_GetObjectItemCaseSensitive(ep, "subsets"));
  cJSON_Delete(ep);
  /* the kubernetes Endpoints name the apiserver */
  kb_k8s_ctls_set_apiserver(e.ctls, "127.0.0.1", 6443);
  ep = get(&e, e.ep, "kubernetes");
  sub = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ep, "subsets"), 0);
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                   cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(sub, "addresses"), 0), "ip")),
               "127.0.0.1");
  cJSON_Delete(ep);
  /* the Service goes: its Endpoints and slice too */
  KB_CHECK(kb_k8s_delete(e.st, e.svc, "default", "web", NULL, NULL, NULL) >= 0);
  KB_CHECK(!kb_k8s_peek(e.st, e.ep, "default", "web") && kb_k8s_store_count(e.st, e.eps, "default") == 0);
  env_free(&e);
}

/* ---- CronJob on an events clock ---- */

static uv_loop_t loop;
static void stop_loop(kb_vtimer *t) { (void)t; uv_stop(&loop); }

/* Runs the loop until `at` seconds on the clock (a stop timer). */
static void run_until(double at) {
  kb_vtimer stop;
  kb_vtimer_init(g_clock, &stop, stop_loop, NULL);
  kb_vtimer_start_at(&stop, at);
  for (int i = 0; i < 1000000 && kb_vclock_now(g_clock) < at; i++) uv_run(&loop, UV_RUN_ONCE);
  kb_vtimer_stop(&stop);
}

static int owned_jobs(env *e, int *active) {
  cJSON *l = list(e, e->jobs, NULL);
  int n = 0;
  *active = 0;
  const cJSON *j;
  cJSON_ArrayForEach(j, items(l)) {
    n++;
    *active += !condition(j, "Complete");
  }
  cJSON_Delete(l);
  return n;
}

static void complete_all(env *e) {
  cJSON *l = list(e, e->jobs, NULL);
  const cJSON *j;
  cJSON_ArrayForEach(j, items(l)) {
    if (condition(j, "Complete")) continue;
    char body[512];
    snprintf(body, sizeof body, "{\"metadata\":{\"name\":\"%s\"},\"status\":{\"succeeded\":1,"
             "\"completionTime\":\"2023-11-14T23:00:00Z\",\"conditions\":[{\"type\":\"Complete\","
             "\"status\":\"True\"}]}}", name_of(j));
    cJSON *o = cJSON_Parse(body);
    KB_CHECK(kb_k8s_update(e->st, e->jobs, "default", name_of(j), o, KB_K8S_STATUS, NULL, NULL) == 0);
    cJSON_Delete(o);
  }
  cJSON_Delete(l);
}

static const char *CRON =
    "{\"metadata\":{\"name\":\"tick\"},\"spec\":{\"schedule\":\"%s\",\"concurrencyPolicy\":\"%s\","
    "\"jobTemplate\":{\"spec\":{\"template\":{\"spec\":{\"restartPolicy\":\"Never\","
    "\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}}}}}";

static void cron_env(env *e, const char *schedule, const char *policy) {
  uv_loop_init(&loop);
  g_clock = kb_vclock_new(&loop, KB_VCLOCK_EVENTS, 1);
  env_init(e);
  kb_k8s_ctls_set_clock(e->ctls, g_clock);
  char body[600];
  snprintf(body, sizeof body, CRON, schedule, policy);
  KB_CHECK(create_yaml_json(e, e->cj, body) == 0);
}

static void cron_env_free(env *e) {
  env_free(e);
  kb_vclock_free(g_clock);
  g_clock = NULL;
  uv_run(&loop, UV_RUN_DEFAULT);
  KB_CHECK(uv_loop_close(&loop) == 0);
}

static void test_cron_allow(void) {
  env e;
  cron_env(&e, "*/5 * * * *", "Allow");
  double t0 = kb_vclock_now(g_clock);
  run_until(t0 + 60 * 60 + 30); /* 60 minutes and a half */
  int active, n = owned_jobs(&e, &active);
  /* the times t with t % 300 == 0 in (EPOCH + t0, EPOCH + t0 + 3630] */
  long first = (long)floor((EPOCH + t0) / 300) + 1, last = (long)floor((EPOCH + t0 + 3630) / 300);
  KB_CHECK(n == (int)(last - first + 1) && n == 12 && active == 12);
  char name[64];
  snprintf(name, sizeof name, "tick-%ld", last * 5); /* minutes since the epoch */
  cJSON *j = get(&e, e.jobs, name);
  KB_CHECK(j != NULL);
  cJSON_Delete(j);
  cJSON *cj = get(&e, e.cj, "tick");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(cj, "status");
  char ts[32];
  kb_k8s_format_time((double)last * 300, ts);
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "lastScheduleTime")), ts);
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "active")) == 12);
  cJSON_Delete(cj);
  /* all done: the history keeps the newest 3 (successfulJobsHistoryLimit) */
  complete_all(&e);
  n = owned_jobs(&e, &active);
  KB_CHECK(n == 3 && active == 0);
  j = get(&e, e.jobs, name);
  KB_CHECK(j != NULL);
  cJSON_Delete(j);
  /* suspended: no new Job for half an hour */
  KB_CHECK(patch(&e, e.cj, "tick", "{\"spec\":{\"suspend\":true}}") == 0);
  run_until(kb_vclock_now(g_clock) + 1800);
  KB_CHECK(owned_jobs(&e, &active) == 3);
  cron_env_free(&e);
}

static void test_cron_forbid_replace(void) {
  env e;
  cron_env(&e, "* * * * *", "Forbid");
  double t0 = kb_vclock_now(g_clock);
  run_until(t0 + 10 * 60 + 30);
  int active, n = owned_jobs(&e, &active);
  KB_CHECK(n == 1 && active == 1); /* the first never ends: the others are skipped */
  complete_all(&e);                /* it ends: the latest missed minute runs at once */
  n = owned_jobs(&e, &active);
  KB_CHECK(n == 2 && active == 1);
  cron_env_free(&e);

  cron_env(&e, "* * * * *", "Replace");
  t0 = kb_vclock_now(g_clock);
  run_until(t0 + 10 * 60 + 30);
  n = owned_jobs(&e, &active);
  KB_CHECK(n == 1 && active == 1); /* each minute's Job replaced the previous one */
  long minute = (long)floor((EPOCH + t0 + 630) / 60);
  char name[64];
  snprintf(name, sizeof name, "tick-%ld", minute);
  cJSON *j = get(&e, e.jobs, name);
  KB_CHECK(j != NULL);
  cJSON_Delete(j);
  cron_env_free(&e);
}

/* 250 Ready pods: slices of at most 100 endpoints (100, 100, 50), every
 * pod in one of them once; one Endpoints object with all 250. */
static void test_endpoint_slices_split(void) {
  env e;
  env_init(&e);
  create_deploy(&e, 250);
  KB_CHECK(create_yaml_json(&e, e.svc, "{\"metadata\":{\"name\":\"web\"},\"spec\":{\"selector\":"
                                       "{\"app\":\"web\"},\"ports\":[{\"port\":80}]}}") == 0);
  cJSON *l = list(&e, e.pods, "app=web");
  const cJSON *p;
  cJSON_ArrayForEach(p, items(l)) kubelet_ready(&e, name_of(p), 1);
  cJSON_Delete(l);
  l = list(&e, e.eps, "kubernetes.io/service-name=web");
  int slices = 0, total = 0, max = 0;
  const cJSON *s;
  cJSON_ArrayForEach(s, items(l)) {
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "endpoints"));
    slices++, total += n, max = n > max ? n : max;
  }
  cJSON_Delete(l);
  KB_CHECK(slices == 3 && total == 250 && max == 100);
  cJSON *ep = get(&e, e.ep, "web");
  const cJSON *sub = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ep, "subsets"), 0);
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(sub, "addresses")) == 250);
  cJSON_Delete(ep);
  /* down to 30: one slice is left */
  KB_CHECK(patch(&e, e.deploy, "web", "{\"spec\":{\"replicas\":30}}") == 0);
  KB_CHECK(kb_k8s_store_count(e.st, e.eps, "default") == 1);
  env_free(&e);
}

/* ---- node leases: written while watched, else once before a read ---- */

static int lease_events;
static void on_lease(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  (void)ud;
  (void)obj;
  if (type == KB_K8S_MODIFIED) lease_events++;
}

static const cJSON *lease(env *e, const kb_k8s_res *leases) {
  return kb_k8s_peek(e->st, leases, "kube-node-lease", "n1");
}

static const char *lease_str(env *e, const kb_k8s_res *leases, const char *a, const char *b) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(lease(e, leases), a);
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, b));
}

static void test_node_leases_lazy(void) {
  env e;
  uv_loop_init(&loop);
  g_clock = kb_vclock_new(&loop, KB_VCLOCK_EVENTS, 1);
  env_init(&e);
  const kb_k8s_res *nodes = kb_k8s_store_lookup(e.st, "", "v1", "nodes");
  const kb_k8s_res *leases = kb_k8s_store_lookup(e.st, "coordination.k8s.io", "v1", "leases");
  cJSON *n = cJSON_Parse("{\"metadata\":{\"name\":\"n1\"}}");
  KB_CHECK(kb_k8s_create(e.st, nodes, NULL, n, 0, NULL, NULL) == 0);
  cJSON_Delete(n);
  kb_k8s_ctls_set_clock(e.ctls, g_clock);
  KB_CHECK(lease(&e, leases) != NULL); /* made with the node */
  char rv0[32], t0s[40];
  snprintf(rv0, sizeof rv0, "%s", lease_str(&e, leases, "metadata", "resourceVersion"));
  snprintf(t0s, sizeof t0s, "%s", lease_str(&e, leases, "spec", "renewTime"));
  uint64_t store_rv = kb_k8s_store_rv(e.st);
  double t0 = kb_vclock_now(g_clock);
  run_until(t0 + 35); /* three renewals, nobody looking: no writes */
  KB_CHECK(kb_k8s_store_rv(e.st) == store_rv);
  KB_CHECK_STR(lease_str(&e, leases, "metadata", "resourceVersion"), rv0);
  /* a read: renewed first, once, as of now */
  kb_k8s_ctls_leases_read(e.ctls);
  KB_CHECK(kb_k8s_store_rv(e.st) == store_rv + 1);
  KB_CHECK(strcmp(lease_str(&e, leases, "spec", "renewTime"), t0s) > 0);
  kb_k8s_ctls_leases_read(e.ctls); /* no tick since: nothing to write */
  KB_CHECK(kb_k8s_store_rv(e.st) == store_rv + 1);
  /* watched: every renewal is a MODIFIED, as from a cluster */
  kb_k8s_watch *w = kb_k8s_store_on(e.st, leases, on_lease, NULL);
  lease_events = 0;
  run_until(t0 + 65);
  KB_CHECK(lease_events == 3);
  kb_k8s_watch_cancel(w);
  store_rv = kb_k8s_store_rv(e.st);
  run_until(t0 + 95);
  KB_CHECK(kb_k8s_store_rv(e.st) == store_rv);
  cron_env_free(&e);
}

int main(void) {
  KB_RUN(test_template_hash);
  KB_RUN(test_deploy_scale);
  KB_RUN(test_rolling_update);
  KB_RUN(test_endpoints);
  KB_RUN(test_endpoint_slices_split);
  KB_RUN(test_cron_allow);
  KB_RUN(test_cron_forbid_replace);
  KB_RUN(test_node_leases_lazy);
  return kb_test_report();
}
