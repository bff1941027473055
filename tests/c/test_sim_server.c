/* The simulator server as a whole (src/sim/server.c + mirror + controllers):
 * kb_sim_server with the fast profile, driven over loopback with blocking
 * libcurl: nodes and pods mirrored from the model, a Job run to completion,
 * Workflows through argo-server's REST and the CRD path, TFJob / MPIJob
 * replicas, failures, a KFP run's Workflow object, /metrics. Tests run with
 * tests/ as working directory. */
#include <curl/curl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "kb/buf.h"
#include "kb/k8s_store.h"
#include "kb/sim_server.h"
#include "kbtest.h"

#define HELLO "../specs/kfp/pipelines/v2ir_hello_world.yaml"
#define POLLS 1500 /* x 10 ms: bounded waits */

static kb_sim_server *srv;

typedef struct resp {
  long status;
  char *body;
  cJSON *json;
  char timing[128]; /* Server-Timing */
} resp;

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
  kb_buf_append(ud, p, sz * n);
  return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  if (n * sz > 15 && !strncasecmp(p, "Server-Timing: ", 15))
    snprintf(ud, 128, "%.*s", (int)(n * sz - 17), p + 15);
  return sz * n;
}

/* timeout_ms > 0: for streams (the partial body is kept). */
static resp req_full(const char *method, const char *path, const char *body, const char *accept,
                     long timeout_ms) {
  resp r = {0};
  char url[2048];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", kb_sim_server_port(srv), path);
  CURL *c = curl_easy_init();
  kb_buf b = KB_BUF_INIT;
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  if (accept) {
    char a[200];
    snprintf(a, sizeof a, "Accept: %s", accept);
    h = curl_slist_append(h, a);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r.timing);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 20000L);
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
  return req_full(method, path, body, NULL, 0);
}

static void resp_free(resp *r) {
  free(r->body);
  cJSON_Delete(r->json);
  memset(r, 0, sizeof *r);
}

/* A dotted path into JSON ("items.0.metadata.name"), as a string. */
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

static const char *jstr(const cJSON *j, const char *path) {
  return cJSON_GetStringValue(jpath(j, path));
}

static double jnum(const cJSON *j, const char *path) {
  const cJSON *v = jpath(j, path);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void nap(void) {
  struct timespec ts = {0, 10 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* The condition of that type with status True, or NULL. */
static const cJSON *condition(const cJSON *obj, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, jpath(obj, "status.conditions")) {
    if (!strcmp(jstr(c, "type") ? jstr(c, "type") : "", type) && jstr(c, "status") &&
        !strcmp(jstr(c, "status"), "True"))
      return c;
  }
  return NULL;
}

/* GETs path until the object has the condition (or phase when cond is NULL). */
static resp wait_for(const char *path, const char *cond, const char *phase) {
  for (int i = 0; i < POLLS; i++) {
    resp r = req("GET", path, NULL);
    if (cond && condition(r.json, cond)) return r;
    if (phase && jstr(r.json, "status.phase") && !strcmp(jstr(r.json, "status.phase"), phase))
      return r;
    resp_free(&r);
    nap();
  }
  return req("GET", path, NULL);
}

/* ---- tests ---- */

static void test_nodes(void) {
  resp r = req("GET", "/api/v1/nodes", NULL);
  KB_CHECK(r.status == 200);
  KB_CHECK_STR(jstr(r.json, "kind"), "NodeList");
  KB_CHECK(cJSON_GetArraySize(jpath(r.json, "items")) == 6);
  KB_CHECK_STR(jstr(r.json, "items.0.metadata.name"), "gke-kbrun-pool-1-0");
  const cJSON *labels = jpath(r.json, "items.3.metadata.labels");
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "cloud.google.com/gke-nodepool")),
               "pool-2");
  KB_CHECK_STR(jstr(r.json, "items.0.status.nodeInfo.kubeletVersion"), "v1.32.0");
  KB_CHECK_STR(jstr(r.json, "items.0.status.allocatable.cpu"), "8");
  KB_CHECK_STR(jstr(r.json, "items.0.status.capacity.memory"), "30720Mi");
  KB_CHECK(condition(jpath(r.json, "items.0"), "Ready") != NULL);
  resp_free(&r);
  resp v = req("GET", "/version", NULL);
  KB_CHECK_STR(jstr(v.json, "minor"), "32");
  resp_free(&v);
  resp h = req("GET", "/healthz", NULL);
  KB_CHECK(h.status == 200);
  KB_CHECK_STR(h.body, "ok");
  resp_free(&h);
}

static const char job_json[] =
    "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"%s\"%s},"
    "\"spec\":{\"completions\":%d,\"parallelism\":%d,\"backoffLimit\":1,\"template\":{\"metadata\":"
    "{\"annotations\":{\"sim.kbrun.io/duration\":\"20\"}},\"spec\":{\"restartPolicy\":\"Never\","
    "\"containers\":[{\"name\":\"work\",\"image\":\"busybox:1.36\",\"resources\":{\"requests\":"
    "{\"cpu\":\"250m\",\"memory\":\"64Mi\"}}}]}}}}";

static void test_job(void) {
  char body[2048];
  snprintf(body, sizeof body, job_json, "three", "", 3, 2);
  resp c = req("POST", "/apis/batch/v1/namespaces/default/jobs", body);
  KB_CHECK(c.status == 201);
  resp_free(&c);
  resp j = wait_for("/apis/batch/v1/namespaces/default/jobs/three", "Complete", NULL);
  KB_CHECK(condition(j.json, "Complete") != NULL);
  KB_CHECK(condition(j.json, "SuccessCriteriaMet") != NULL);
  KB_CHECK_STR(jstr(condition(j.json, "Complete"), "reason"), "CompletionsReached");
  KB_CHECK(jnum(j.json, "status.succeeded") == 3);
  KB_CHECK(jpath(j.json, "status.active") == NULL);
  KB_CHECK(jstr(j.json, "status.startTime") != NULL);
  KB_CHECK(jstr(j.json, "status.completionTime") != NULL);
  /* parallelism 2, 20 s each: two waves, at least 40 s of sim time */
  double took = kb_k8s_parse_time(jstr(j.json, "status.completionTime")) -
                kb_k8s_parse_time(jstr(j.json, "status.startTime"));
  KB_CHECK(took >= 40);
  resp_free(&j);
  resp p = req("GET", "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dthree", NULL);
  KB_CHECK(cJSON_GetArraySize(jpath(p.json, "items")) == 3);
  const cJSON *pod;
  cJSON_ArrayForEach(pod, jpath(p.json, "items")) {
    const char *name = jstr(pod, "metadata.name");
    KB_CHECK(name && strlen(name) == 11 && !strncmp(name, "three-", 6));
    KB_CHECK_STR(jstr(pod, "status.phase"), "Succeeded");
    KB_CHECK_STR(jstr(pod, "metadata.ownerReferences.0.kind"), "Job");
    KB_CHECK_STR(jstr(pod, "status.containerStatuses.0.state.terminated.reason"), "Completed");
    KB_CHECK_STR(jstr(pod, "spec.containers.0.resources.requests.cpu"), "250m");
    KB_CHECK(jstr(pod, "spec.nodeName") && !strncmp(jstr(pod, "spec.nodeName"), "gke-kbrun-", 10));
  }
  char path[256];
  snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s/log",
           jstr(p.json, "items.0.metadata.name") ? jstr(p.json, "items.0.metadata.name") : "x");
  resp l = req("GET", path, NULL);
  KB_CHECK(l.status == 200);
  KB_CHECK(strstr(l.body, "done in 20.0s") != NULL);
  resp_free(&l);
  resp_free(&p);
  resp e = req("GET", "/api/v1/namespaces/default/events?fieldSelector=reason%3DScheduled", NULL);
  KB_CHECK(cJSON_GetArraySize(jpath(e.json, "items")) == 3);
  KB_CHECK(jstr(e.json, "items.0.message") && strstr(jstr(e.json, "items.0.message"), "default/three-"));
  resp_free(&e);
  resp je = req("GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DJob,"
                "involvedObject.name%3Dthree", NULL);
  int created = 0, completed = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, jpath(je.json, "items")) {
    created += !strcmp(jstr(ev, "reason"), "SuccessfulCreate") &&
               !strncmp(jstr(ev, "message"), "Created pod: three-", 19);
    completed += !strcmp(jstr(ev, "reason"), "Completed");
  }
  KB_CHECK(created == 3);
  KB_CHECK(completed == 1);
  resp_free(&je);
  resp d = req("DELETE", "/apis/batch/v1/namespaces/default/jobs/three",
               "{\"propagationPolicy\":\"Background\"}");
  KB_CHECK(d.status == 200);
  resp_free(&d);
  resp gone = req("GET", "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dthree", NULL);
  KB_CHECK(cJSON_GetArraySize(jpath(gone.json, "items")) == 0);
  resp_free(&gone);
}

static void test_job_fails(void) {
  char body[2048];
  snprintf(body, sizeof body, job_json, "doomed",
           ",\"annotations\":{\"sim.kbrun.io/fail\":\"true\"}", 1, 1);
  resp c = req("POST", "/apis/batch/v1/namespaces/default/jobs", body);
  KB_CHECK(c.status == 201);
  resp_free(&c);
  resp j = wait_for("/apis/batch/v1/namespaces/default/jobs/doomed", "Failed", NULL);
  const cJSON *f = condition(j.json, "Failed");
  KB_CHECK_STR(jstr(f, "reason"), "BackoffLimitExceeded");
  KB_CHECK_STR(jstr(f, "message"), "Job has reached the specified backoff limit");
  KB_CHECK(condition(j.json, "FailureTarget") != NULL);
  KB_CHECK(jnum(j.json, "status.failed") == 2); /* backoffLimit 1: two tries */
  KB_CHECK(jpath(j.json, "status.completionTime") == NULL);
  resp_free(&j);
}

static const char wf_json[] =
    "{\"apiVersion\":\"argoproj.io/v1alpha1\",\"kind\":\"Workflow\",\"metadata\":"
    "{\"generateName\":\"%s\"},\"spec\":{\"entrypoint\":\"main\",\"templates\":["
    "{\"name\":\"main\",\"dag\":{\"tasks\":[{\"name\":\"a\",\"template\":\"echo\"},"
    "{\"name\":\"b\",\"template\":\"echo\",\"dependencies\":[\"a\"]}]}},"
    "{\"name\":\"echo\",\"metadata\":{\"annotations\":{\"sim.kbrun.io/duration\":\"5\"}},"
    "\"container\":{\"image\":\"alpine:3.19\",\"command\":[\"echo\"]}}]}}";

static void check_workflow_done(const cJSON *wf) {
  KB_CHECK_STR(jstr(wf, "status.phase"), "Succeeded");
  KB_CHECK_STR(jstr(wf, "status.progress"), "2/2");
  KB_CHECK(jstr(wf, "status.startedAt") != NULL);
  KB_CHECK(jstr(wf, "status.finishedAt") != NULL);
  KB_CHECK(cJSON_GetArraySize(jpath(wf, "status.nodes")) == 3); /* the DAG + 2 pods */
  const char *name = jstr(wf, "metadata.name");
  const cJSON *root = cJSON_GetObjectItemCaseSensitive(jpath(wf, "status.nodes"), name ? name : "");
  KB_CHECK_STR(jstr(root, "type"), "DAG");
  const cJSON *labels = jpath(wf, "metadata.labels");
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "workflows.argoproj.io/phase")),
               "Succeeded");
}

static void test_workflow_argo_server(void) {
  char wf[2048], body[2400];
  snprintf(wf, sizeof wf, wf_json, "hello-");
  snprintf(body, sizeof body, "{\"namespace\":\"default\",\"workflow\":%s}", wf);
  resp c = req("POST", "/api/v1/workflows/default", body);
  KB_CHECK(c.status == 200);
  const char *name = jstr(c.json, "metadata.name");
  KB_CHECK(name && !strncmp(name, "hello-", 6) && strlen(name) == 11);
  char path[256];
  snprintf(path, sizeof path, "/api/v1/workflows/default/%s", name ? name : "x");
  resp w = wait_for(path, NULL, "Succeeded");
  check_workflow_done(w.json);
  resp_free(&w);
  /* the same object on the CRD path, its pods as Argo names them */
  snprintf(path, sizeof path, "/apis/argoproj.io/v1alpha1/namespaces/default/workflows/%s",
           name ? name : "x");
  resp k = req("GET", path, NULL);
  KB_CHECK_STR(jstr(k.json, "status.phase"), "Succeeded");
  resp_free(&k);
  snprintf(path, sizeof path,
           "/api/v1/namespaces/default/pods?labelSelector=workflows.argoproj.io/workflow%%3D%s",
           name ? name : "x");
  resp p = req("GET", path, NULL);
  KB_CHECK(cJSON_GetArraySize(jpath(p.json, "items")) == 2);
  KB_CHECK(jstr(p.json, "items.0.metadata.name") &&
           strstr(jstr(p.json, "items.0.metadata.name"), "-echo-") != NULL);
  const cJSON *ann = jpath(p.json, "items.0.metadata.annotations");
  KB_CHECK(cJSON_GetObjectItem(ann, "workflows.argoproj.io/node-id") != NULL);
  resp_free(&p);
  /* list, watch (both stream formats), errors, delete */
  resp l = req("GET", "/api/v1/workflows/default?listOptions.labelSelector=workflows.argoproj.io%2Fcompleted%3Dtrue", NULL);
  KB_CHECK(l.status == 200);
  KB_CHECK(cJSON_GetArraySize(jpath(l.json, "items")) >= 1);
  resp_free(&l);
  snprintf(path, sizeof path,
           "/api/v1/workflow-events/default?listOptions.fieldSelector=metadata.name%%3D%s",
           name ? name : "x");
  resp s = req_full("GET", path, NULL, NULL, 300);
  KB_CHECK(s.status == 200);
  KB_CHECK(strncmp(s.body, "{\"result\":{\"type\":\"ADDED\",\"object\":{", 36) == 0);
  KB_CHECK(strstr(s.body, "\"phase\":\"Succeeded\"") != NULL);
  resp_free(&s);
  resp sse = req_full("GET", path, NULL, "text/event-stream", 300);
  KB_CHECK(strncmp(sse.body, "data: {\"result\":{\"type\":\"ADDED\",", 32) == 0);
  KB_CHECK(strstr(sse.body, "}}\n\n") != NULL);
  resp_free(&sse);
  resp nf = req("GET", "/api/v1/workflows/default/nope", NULL);
  KB_CHECK(nf.status == 404);
  KB_CHECK(jnum(nf.json, "code") == 5);
  KB_CHECK_STR(jstr(nf.json, "message"), "workflows.argoproj.io \"nope\" not found");
  resp_free(&nf);
  resp bad = req("POST", "/api/v1/workflows/default", "{\"namespace\":\"default\"}");
  KB_CHECK(bad.status == 400);
  KB_CHECK(jnum(bad.json, "code") == 3);
  KB_CHECK_STR(jstr(bad.json, "message"), "workflow is required");
  resp_free(&bad);
  snprintf(path, sizeof path, "/api/v1/workflows/default/%s", name ? name : "x");
  resp d = req("DELETE", path, NULL);
  KB_CHECK(d.status == 200);
  KB_CHECK_STR(d.body, "{}");
  resp_free(&d);
  resp gone = req("GET", path, NULL);
  KB_CHECK(gone.status == 404);
  resp_free(&gone);
  resp_free(&c);
}

static void test_workflow_crd(void) {
  char wf[2048];
  snprintf(wf, sizeof wf, wf_json, "crd-");
  resp c = req("POST", "/apis/argoproj.io/v1alpha1/namespaces/default/workflows", wf);
  KB_CHECK(c.status == 201);
  char path[256];
  snprintf(path, sizeof path, "/apis/argoproj.io/v1alpha1/namespaces/default/workflows/%s",
           jstr(c.json, "metadata.name") ? jstr(c.json, "metadata.name") : "x");
  resp w = wait_for(path, NULL, "Succeeded");
  check_workflow_done(w.json);
  resp_free(&w);
  resp_free(&c);
  resp ev = req("GET", "/api/v1/namespaces/default/events?fieldSelector=reason%3DWorkflowSucceeded", NULL);
  KB_CHECK(cJSON_GetArraySize(jpath(ev.json, "items")) == 2); /* this one and the argo-server one */
  KB_CHECK_STR(jstr(ev.json, "items.0.involvedObject.kind"), "Workflow");
  resp_free(&ev);
  /* a workflow the model cannot run ends in Error with the reason */
  const char *bad =
      "{\"apiVersion\":\"argoproj.io/v1alpha1\",\"kind\":\"Workflow\",\"metadata\":{\"name\":"
      "\"broken\"},\"spec\":{\"entrypoint\":\"nowhere\",\"templates\":[{\"name\":\"main\","
      "\"container\":{\"image\":\"alpine\"}}]}}";
  resp b = req("POST", "/apis/argoproj.io/v1alpha1/namespaces/default/workflows", bad);
  KB_CHECK(b.status == 201);
  resp_free(&b);
  resp e = req("GET", "/apis/argoproj.io/v1alpha1/namespaces/default/workflows/broken", NULL);
  KB_CHECK_STR(jstr(e.json, "status.phase"), "Error");
  KB_CHECK(jstr(e.json, "status.message") && strstr(jstr(e.json, "status.message"), "nowhere"));
  resp_free(&e);
}

static const char tfjob_json[] =
    "{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"TFJob\",\"metadata\":{\"name\":\"%s\"%s},"
    "\"spec\":{\"tfReplicaSpecs\":{\"Worker\":{\"replicas\":1,\"restartPolicy\":\"OnFailure\","
    "\"template\":{\"spec\":{\"containers\":[{\"name\":\"tensorflow\",\"image\":"
    "\"tensorflow/tensorflow:2.15.0\"}]}}}}}}";

static void test_tfjob(void) {
  char body[2048];
  snprintf(body, sizeof body, tfjob_json, "tf-cnn", "");
  resp c = req("POST", "/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs", body);
  KB_CHECK(c.status == 201);
  resp_free(&c);
  resp j = wait_for("/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs/tf-cnn", "Succeeded", NULL);
  const cJSON *s = condition(j.json, "Succeeded");
  KB_CHECK_STR(jstr(s, "reason"), "TFJobSucceeded");
  KB_CHECK_STR(jstr(s, "message"), "TFJob kubeflow/tf-cnn successfully completed.");
  KB_CHECK(condition(j.json, "Created") != NULL);
  KB_CHECK_STR(jstr(j.json, "status.conditions.0.reason"), "TFJobCreated");
  KB_CHECK_STR(jstr(j.json, "status.conditions.1.type"), "Running");
  KB_CHECK_STR(jstr(j.json, "status.conditions.1.status"), "False");
  KB_CHECK(jnum(j.json, "status.replicaStatuses.Worker.succeeded") == 1);
  KB_CHECK(jstr(j.json, "status.completionTime") != NULL);
  resp_free(&j);
  resp p = req("GET", "/api/v1/namespaces/kubeflow/pods/tf-cnn-worker-0", NULL);
  KB_CHECK(p.status == 200);
  KB_CHECK_STR(jstr(p.json, "status.phase"), "Succeeded");
  const cJSON *labels = jpath(p.json, "metadata.labels");
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "training.kubeflow.org/job-name")), "tf-cnn");
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "training.kubeflow.org/replica-type")), "worker");
  KB_CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "training.kubeflow.org/replica-index")), "0");
  resp_free(&p);
  resp ev = req("GET", "/api/v1/namespaces/kubeflow/events?fieldSelector=reason%3DTFJobSucceeded", NULL);
  KB_CHECK_STR(jstr(ev.json, "items.0.involvedObject.name"), "tf-cnn");
  KB_CHECK_STR(jstr(ev.json, "items.0.message"), "TFJob kubeflow/tf-cnn successfully completed.");
  resp_free(&ev);
  resp l = req("GET", "/api/v1/namespaces/kubeflow/pods/tf-cnn-worker-0/log", NULL);
  KB_CHECK(l.status == 200);
  KB_CHECK(strstr(l.body, "training finished") != NULL);
  resp_free(&l);
}

static void test_tfjob_fails(void) {
  char body[2048];
  snprintf(body, sizeof body, tfjob_json, "tf-bad", ",\"annotations\":{\"sim.kbrun.io/fail\":\"true\"}");
  resp c = req("POST", "/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs", body);
  KB_CHECK(c.status == 201);
  resp_free(&c);
  resp j = wait_for("/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs/tf-bad", "Failed", NULL);
  const cJSON *f = condition(j.json, "Failed");
  KB_CHECK_STR(jstr(f, "reason"), "TFJobFailed");
  KB_CHECK_STR(jstr(f, "message"), "TFJob kubeflow/tf-bad has failed because 1 Worker replica(s) failed.");
  KB_CHECK(condition(j.json, "Succeeded") == NULL);
  KB_CHECK(jstr(j.json, "status.completionTime") != NULL); /* as the operator does */
  KB_CHECK(jnum(j.json, "status.replicaStatuses.Worker.failed") == 1);
  resp_free(&j);
  resp l = req("GET", "/api/v1/namespaces/kubeflow/pods/tf-bad-worker-0/log", NULL);
  KB_CHECK(strstr(l.body, "failed") != NULL);
  resp_free(&l);
  /* no replica specs: Failed at once, with the reason */
  const char *empty = "{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"PyTorchJob\",\"metadata\":"
                      "{\"name\":\"pt-empty\"},\"spec\":{}}";
  resp e = req("POST", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", empty);
  KB_CHECK(e.status == 201);
  resp_free(&e);
  resp g = req("GET", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/pt-empty", NULL);
  KB_CHECK_STR(jstr(condition(g.json, "Failed"), "message"),
               "spec.pytorchReplicaSpecs: at least one replica type is required");
  resp_free(&g);
}

static void test_mpijob(void) {
  const char *body =
      "{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"mpi\"},"
      "\"spec\":{\"mpiReplicaSpecs\":{\"Launcher\":{\"replicas\":1,\"template\":{\"spec\":"
      "{\"containers\":[{\"name\":\"launcher\",\"image\":\"mpioperator/tensorflow-benchmarks\"}]}}},"
      "\"Worker\":{\"replicas\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\","
      "\"image\":\"mpioperator/tensorflow-benchmarks\"}]}}}}}}";
  resp c = req("POST", "/apis/kubeflow.org/v1/namespaces/default/mpijobs", body);
  KB_CHECK(c.status == 201);
  resp_free(&c);
  resp j = wait_for("/apis/kubeflow.org/v1/namespaces/default/mpijobs/mpi", "Succeeded", NULL);
  KB_CHECK_STR(jstr(condition(j.json, "Succeeded"), "reason"), "MPIJobSucceeded");
  KB_CHECK(jnum(j.json, "status.replicaStatuses.Worker.succeeded") == 2);
  KB_CHECK(jnum(j.json, "status.replicaStatuses.Launcher.succeeded") == 1);
  resp_free(&j);
  const char *pods[] = {"mpi-launcher", "mpi-worker-0", "mpi-worker-1"};
  for (int i = 0; i < 3; i++) {
    char path[128];
    snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s", pods[i]);
    resp p = req("GET", path, NULL);
    KB_CHECK(p.status == 200);
    resp_free(&p);
  }
}

static void test_kfp_run_workflow(void) {
  char real[PATH_MAX], body[PATH_MAX + 256];
  KB_CHECK(realpath(HELLO, real) != NULL);
  snprintf(body, sizeof body,
           "{\"pipeline\":{\"display_name\":\"hello\"},\"pipeline_version\":{\"display_name\":"
           "\"v1\",\"package_url\":{\"pipeline_url\":\"file://%s\"}}}", real);
  resp pc = req("POST", "/apis/v2beta1/pipelines/create", body);
  KB_CHECK(pc.status == 200);
  snprintf(body, sizeof body,
           "{\"display_name\":\"r1\",\"pipeline_version_reference\":{\"pipeline_id\":\"%s\"},"
           "\"runtime_config\":{\"parameters\":{\"message\":\"hi\"}}}",
           jstr(pc.json, "pipeline_id") ? jstr(pc.json, "pipeline_id") : "");
  resp run = req("POST", "/apis/v2beta1/runs", body);
  KB_CHECK(run.status == 200);
  const char *id = jstr(run.json, "run_id");
  char path[512];
  snprintf(path, sizeof path,
           "/apis/argoproj.io/v1alpha1/namespaces/kubeflow/workflows?labelSelector=pipeline%%2Frunid%%3D%s",
           id ? id : "x");
  resp w = {0};
  for (int i = 0; i < POLLS; i++) {
    w = req("GET", path, NULL);
    const char *ph = jstr(w.json, "items.0.status.phase");
    if (ph && !strcmp(ph, "Succeeded")) break;
    resp_free(&w);
    nap();
  }
  KB_CHECK(cJSON_GetArraySize(jpath(w.json, "items")) == 1);
  KB_CHECK_STR(jstr(w.json, "items.0.status.phase"), "Succeeded");
  KB_CHECK_STR(jstr(w.json, "items.0.metadata.namespace"), "kubeflow");
  KB_CHECK(cJSON_GetArraySize(jpath(w.json, "items.0.spec.templates")) >= 2);
  KB_CHECK(cJSON_GetArraySize(jpath(w.json, "items.0.status.nodes")) >= 2);
  resp_free(&w);
  resp_free(&run);
  resp_free(&pc);
}

static void test_metrics(void) {
  resp m = req("GET", "/metrics", NULL);
  KB_CHECK(m.status == 200);
  KB_CHECK(strstr(m.body, "kbrun_sim_http_requests_total{api=\"kubernetes\"}") != NULL);
  KB_CHECK(strstr(m.body, "kbrun_sim_http_requests_total{api=\"argo\"}") != NULL);
  KB_CHECK(strstr(m.body, "kbrun_sim_http_request_duration_seconds_bucket{api=\"kubernetes\",le=\"+Inf\"}") != NULL);
  KB_CHECK(strstr(m.body, "kbrun_sim_http_request_duration_seconds_count{api=\"kfp\"}") != NULL);
  resp_free(&m);
}

/* The default profile delays k8s answers by the modelled latency and says
 * so in Server-Timing. */
static void test_latency_timing(void) {
  kb_sim_server_opts o = {.profile = "default", .speed = 600, .seed = 3};
  kb_sim_error err = {0};
  kb_sim_server *slow = kb_sim_server_start(&o, &err);
  KB_CHECK(slow != NULL);
  if (!slow) return;
  kb_sim_server *keep = srv;
  srv = slow;
  resp r = req("GET", "/api/v1/namespaces/default/pods", NULL);
  KB_CHECK(r.status == 200);
  KB_CHECK(strncmp(r.timing, "kbrun-sim;dur=", 14) == 0);
  KB_CHECK(atof(r.timing + 14) > 0);
  resp_free(&r);
  srv = keep;
  kb_sim_server_stop(slow);
}

static size_t on_date(char *p, size_t sz, size_t n, void *ud) {
  if (n * sz > 6 && !strncasecmp(p, "Date: ", 6)) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (strptime(p + 6, "%a, %d %b %Y %H:%M:%S GMT", &tm)) *(time_t *)ud = timegm(&tm);
  }
  return sz * n;
}

/* The server dates its answers on the clock it dates its objects with: at
 * x600 the Date header runs ahead of this machine's clock, and agrees with
 * the creationTimestamp of an object created by the same request. */
static void test_date_follows_sim_clock(void) {
  for (int i = 0; i < 20; i++) nap(); /* >= 0.2 s real: >= 120 s simulated */
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/api/v1/namespaces/default/configmaps",
           kb_sim_server_port(srv));
  CURL *c = curl_easy_init();
  kb_buf b = KB_BUF_INIT;
  time_t date = 0;
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS,
                   "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"dated\"}}");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_date);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &date);
  KB_CHECK(curl_easy_perform(c) == CURLE_OK);
  time_t real = time(NULL);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  kb_buf_append(&b, "", 1);
  cJSON *cm = cJSON_Parse(b.data);
  const char *created = jstr(cm, "metadata.creationTimestamp");
  KB_CHECK(created != NULL);
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  KB_CHECK(created && strptime(created, "%Y-%m-%dT%H:%M:%SZ", &tm));
  time_t ts = timegm(&tm);
  KB_CHECK(date - real >= 60);
  KB_CHECK(llabs((long long)(date - ts)) <= 1);
  cJSON_Delete(cm);
  kb_buf_free(&b);
}

/* A parameter of a "kbrun-sim;dur=MS;sim=MS" Server-Timing value, or -1. */
static double timing_param(const char *timing, const char *key) {
  char pat[16];
  snprintf(pat, sizeof pat, ";%s=", key);
  const char *p = strstr(timing, pat);
  return p ? atof(p + strlen(pat)) : -1;
}

/* The modelled latencies of one request sequence, in simulated ms, at a
 * speed: the Kubernetes and Argo surfaces, then an unmodelled document. */
static void modelled_sequence(double speed, double out[4]) {
  kb_sim_server_opts o = {.profile = "default", .speed = speed, .seed = 5};
  kb_sim_error err = {0};
  kb_sim_server *s = kb_sim_server_start(&o, &err);
  KB_CHECK(s != NULL);
  if (!s) return;
  kb_sim_server *keep = srv;
  srv = s;
  const char *paths[4] = {"/api/v1/namespaces/default/pods", "/api/v1/workflows/default",
                          "/api/v1/workflows/default/nope", "/api/v1/version"};
  for (int i = 0; i < 4; i++) {
    resp r = req("GET", paths[i], NULL);
    double dur = timing_param(r.timing, "dur"), sim = timing_param(r.timing, "sim");
    out[i] = sim;
    /* dur is the real hold: the modelled time at this speed */
    KB_CHECK(dur >= 0 && sim >= 0);
    KB_CHECK(fabs(dur * speed - sim) <= 1e-3 * sim + 1e-6);
    resp_free(&r);
  }
  srv = keep;
  kb_sim_server_stop(s);
}

/* Every simulated surface models its latency in simulated time, the same
 * draws at any speed (issue: Argo's reported host time x speed); an API
 * that models none reports 0, never this machine's handling time. */
static void test_modelled_latency_any_speed(void) {
  double at600[4] = {0}, at6000[4] = {0};
  modelled_sequence(600, at600);
  modelled_sequence(6000, at6000);
  for (int i = 0; i < 3; i++) {
    KB_CHECK(at600[i] > 1.0); /* ms: k8s ~15, argo ~25-30 */
    KB_CHECK(fabs(at600[i] - at6000[i]) <= 1e-3 * at600[i]);
  }
  KB_CHECK(at600[3] == 0 && at6000[3] == 0);
}

/* Bodies refused before any handler: invalid UTF-8 anywhere (it was
 * stored and echoed raw), and a \u0000 in a KFP body (it cut the name at
 * the NUL); a literal backslash-u text and real UTF-8 stay accepted. */
static void test_refused_bodies(void) {
  resp a = req("POST", "/api/v1/namespaces/default/configmaps",
               "{\"metadata\":{\"name\":\"cm-bad\"},\"data\":{\"k\":\"\xff\xfe\"}}");
  KB_CHECK(a.status == 400);
  KB_CHECK_STR(jstr(a.json, "kind"), "Status");
  KB_CHECK(jstr(a.json, "message") && strstr(jstr(a.json, "message"), "not valid UTF-8"));
  resp_free(&a);
  resp g = req("GET", "/api/v1/namespaces/default/configmaps/cm-bad", NULL);
  KB_CHECK(g.status == 404); /* nothing was stored */
  resp_free(&g);
  resp n = req("POST", "/apis/v2beta1/experiments", "{\"display_name\":\"ab\\u0000cd\"}");
  KB_CHECK(n.status == 400);
  KB_CHECK(jnum(n.json, "code") == 3);
  resp_free(&n);
  resp ok = req("POST", "/apis/v2beta1/experiments", "{\"display_name\":\"h\xc3\xa9llo \\\\u0000\"}");
  KB_CHECK(ok.status == 200);
  KB_CHECK_STR(jstr(ok.json, "display_name"), "h\xc3\xa9llo \\u0000");
  resp_free(&ok);
  /* a Kubernetes body over the apiserver's 3 MiB: 413 as a Status */
  size_t big = 3 * 1024 * 1024 + 64;
  char *body = malloc(big + 1);
  KB_CHECK(body != NULL);
  if (!body) return;
  int head = snprintf(body, big, "{\"metadata\":{\"name\":\"cm-big\"},\"data\":{\"k\":\"");
  memset(body + head, 'a', big - (size_t)head - 3);
  memcpy(body + big - 3, "\"}}", 4);
  resp t = req("POST", "/api/v1/namespaces/default/configmaps", body);
  free(body);
  KB_CHECK(t.status == 413);
  KB_CHECK_STR(jstr(t.json, "kind"), "Status");
  KB_CHECK_STR(jstr(t.json, "reason"), "RequestEntityTooLarge");
  KB_CHECK_STR(jstr(t.json, "message"), "Request entity too large: limit is 3145728");
  resp_free(&t);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  kb_sim_server_opts o = {.profile = "fast", .speed = 600, .seed = 1,
                         .pipeline_dir = ".."}; /* the repository: its sample pipelines */
  kb_sim_error err = {0};
  srv = kb_sim_server_start(&o, &err);
  if (!srv) {
    fprintf(stderr, "kb_sim_server_start: %s\n", err.message);
    return 1;
  }
  KB_RUN(test_refused_bodies);
  KB_RUN(test_nodes);
  KB_RUN(test_job);
  KB_RUN(test_job_fails);
  KB_RUN(test_workflow_argo_server);
  KB_RUN(test_workflow_crd);
  KB_RUN(test_tfjob);
  KB_RUN(test_tfjob_fails);
  KB_RUN(test_mpijob);
  KB_RUN(test_kfp_run_workflow);
  KB_RUN(test_metrics);
  KB_RUN(test_latency_timing);
  KB_RUN(test_modelled_latency_any_speed);
  KB_RUN(test_date_follows_sim_clock);
  kb_sim_server_stop(srv);
  curl_global_cleanup();
  return kb_test_report();
}
