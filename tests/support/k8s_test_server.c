/* A standalone Kubernetes API (src/sim/k8s_*.c) for tests/e2e/kubectl.sh:
 *
 *   k8s_test_server [-v] [--port N]
 *
 * prints "PORT <n>" on stdout once listening on 127.0.0.1 and serves until
 * SIGTERM/SIGINT. A fake controller (test support only; the real one is
 * the cluster model's) makes the state kubectl shows plausible:
 *  - two Ready nodes exist;
 *  - a created Pod is scheduled and Running, logs one line, and gets a
 *    "Scheduled" Event;
 *  - a created Job gets one Succeeded pod (owned by it) and completes. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "kb/http_server.h"
#include "kb/k8s_api.h"
#include "kb/k8s_store.h"
#include "kb/log.h"

typedef struct server {
  kb_k8s_store *st;
  const kb_k8s_res *pods, *jobs, *nodes, *events;
} server;

static cJSON *parse(const char *json) {
  cJSON *o = cJSON_Parse(json);
  if (!o) {
    fprintf(stderr, "bad fixture JSON: %s\n", json);
    exit(2);
  }
  return o;
}

static void add_node(server *s, const char *name) {
  char ts[32], json[1024];
  kb_k8s_format_time(kb_k8s_store_now(s->st), ts);
  snprintf(json, sizeof json,
           "{\"metadata\":{\"name\":\"%s\",\"labels\":{\"kubernetes.io/hostname\":\"%s\","
           "\"node-role.kubernetes.io/worker\":\"\"}},"
           "\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
           "\"lastTransitionTime\":\"%s\"}],\"nodeInfo\":{\"kubeletVersion\":\"v1.32.0\","
           "\"osImage\":\"kbrun sim\",\"kernelVersion\":\"6.1\","
           "\"containerRuntimeVersion\":\"containerd://1.7\"},"
           "\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"10.0.0.%d\"}]}}",
           name, name, ts, name[strlen(name) - 1] - '0' + 10);
  cJSON *n = parse(json);
  cJSON *out = NULL;
  kb_k8s_create(s->st, s->nodes, NULL, n, 0, &out, NULL);
  /* nodes have a status subresource: the status goes in separately */
  if (out) kb_k8s_update(s->st, s->nodes, NULL, name, n, KB_K8S_STATUS, NULL, NULL);
  cJSON_Delete(out);
  cJSON_Delete(n);
}

static void set_pod_status(server *s, const cJSON *pod, int done) {
  const char *ns = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "namespace"));
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "name"));
  const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), "containers"), 0);
  const char *cname = cJSON_GetStringValue(cJSON_GetObjectItem(c0, "name"));
  const char *image = cJSON_GetStringValue(cJSON_GetObjectItem(c0, "image"));
  char ts[32], json[2048], line[256];
  kb_k8s_format_time(kb_k8s_store_now(s->st), ts);
  snprintf(line, sizeof line, "hello from %s\n", name);
  kb_k8s_log_append(s->st, ns, name, cname, line, strlen(line));
  cJSON *next = cJSON_Duplicate(pod, 1);
  cJSON *spec = cJSON_GetObjectItem(next, "spec");
  cJSON_DeleteItemFromObject(spec, "nodeName");
  cJSON_AddStringToObject(spec, "nodeName", "node-1");
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(next, "metadata"), "resourceVersion");
  kb_k8s_update(s->st, s->pods, ns, name, next, 0, NULL, NULL);
  snprintf(json, sizeof json,
           "{\"metadata\":{\"name\":\"%s\"},\"status\":{\"phase\":\"%s\",\"podIP\":\"10.1.0.7\","
           "\"hostIP\":\"10.0.0.11\",\"startTime\":\"%s\",\"qosClass\":\"BestEffort\","
           "\"conditions\":[{\"type\":\"Ready\",\"status\":\"%s\"}],"
           "\"containerStatuses\":[{\"name\":\"%s\",\"image\":\"%s\",\"imageID\":\"\","
           "\"ready\":%s,\"restartCount\":0,\"started\":%s,\"state\":%s}]}}",
           name, done ? "Succeeded" : "Running", ts, done ? "False" : "True", cname,
           image ? image : "", done ? "false" : "true", done ? "false" : "true",
           done ? "{\"terminated\":{\"exitCode\":0,\"reason\":\"Completed\"}}"
                : "{\"running\":{}}");
  cJSON *st = parse(json);
  kb_k8s_update(s->st, s->pods, ns, name, st, KB_K8S_STATUS, NULL, NULL);
  cJSON_Delete(st);
  cJSON_Delete(next);
  const char *uid = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "uid"));
  snprintf(json, sizeof json,
           "{\"metadata\":{\"generateName\":\"%s.\"},\"involvedObject\":{\"kind\":\"Pod\","
           "\"namespace\":\"%s\",\"name\":\"%s\",\"uid\":\"%s\",\"apiVersion\":\"v1\"},"
           "\"reason\":\"Scheduled\",\"message\":\"Successfully assigned %s/%s to node-1\","
           "\"type\":\"Normal\",\"source\":{\"component\":\"default-scheduler\"},"
           "\"firstTimestamp\":\"%s\",\"lastTimestamp\":\"%s\",\"count\":1}",
           name, ns, name, uid ? uid : "", ns, name, ts, ts);
  cJSON *ev = parse(json);
  kb_k8s_create(s->st, s->events, ns, ev, 0, NULL, NULL);
  cJSON_Delete(ev);
}

static void on_pod(void *ud, kb_k8s_event_type type, const cJSON *pod) {
  server *s = ud;
  const cJSON *m = cJSON_GetObjectItem(pod, "metadata");
  if (type != KB_K8S_ADDED) return;
  /* job pods are finished by on_job */
  if (cJSON_GetObjectItem(cJSON_GetObjectItem(m, "labels"), "job-name")) return;
  set_pod_status(s, pod, 0);
}

static void on_job(void *ud, kb_k8s_event_type type, const cJSON *job) {
  server *s = ud;
  if (type != KB_K8S_ADDED) return;
  const cJSON *m = cJSON_GetObjectItem(job, "metadata");
  const char *ns = cJSON_GetStringValue(cJSON_GetObjectItem(m, "namespace"));
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(m, "name"));
  const char *uid = cJSON_GetStringValue(cJSON_GetObjectItem(m, "uid"));
  cJSON *tmpl = cJSON_GetObjectItem(cJSON_GetObjectItem(job, "spec"), "template");
  cJSON *pod = cJSON_CreateObject();
  cJSON *pm = cJSON_Duplicate(cJSON_GetObjectItem(tmpl, "metadata"), 1);
  if (!pm) pm = cJSON_CreateObject();
  char gen[300], ts[32], json[1024];
  snprintf(gen, sizeof gen, "%s-", name);
  cJSON_AddStringToObject(pm, "generateName", gen);
  snprintf(json, sizeof json,
           "[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"%s\",\"uid\":\"%s\","
           "\"controller\":true,\"blockOwnerDeletion\":true}]", name, uid);
  cJSON_AddItemToObject(pm, "ownerReferences", parse(json));
  cJSON_AddItemToObject(pod, "metadata", pm);
  cJSON_AddItemToObject(pod, "spec", cJSON_Duplicate(cJSON_GetObjectItem(tmpl, "spec"), 1));
  cJSON *created = NULL;
  kb_k8s_error e;
  if (kb_k8s_create(s->st, s->pods, ns, pod, 0, &created, &e))
    fprintf(stderr, "fake job controller: %s\n", e.message);
  cJSON_Delete(pod);
  if (created) set_pod_status(s, created, 1);
  cJSON_Delete(created);
  kb_k8s_format_time(kb_k8s_store_now(s->st), ts);
  snprintf(json, sizeof json,
           "{\"status\":{\"startTime\":\"%s\",\"completionTime\":\"%s\",\"succeeded\":1,"
           "\"active\":0,\"ready\":0,\"conditions\":["
           "{\"type\":\"SuccessCriteriaMet\",\"status\":\"True\",\"reason\":\"CompletionsReached\","
           "\"message\":\"Reached expected number of succeeded pods\",\"lastProbeTime\":\"%s\","
           "\"lastTransitionTime\":\"%s\"},"
           "{\"type\":\"Complete\",\"status\":\"True\",\"reason\":\"CompletionsReached\","
           "\"message\":\"Reached expected number of succeeded pods\",\"lastProbeTime\":\"%s\","
           "\"lastTransitionTime\":\"%s\"}]}}", ts, ts, ts, ts, ts, ts);
  cJSON *st = parse(json);
  cJSON_AddItemToObject(st, "metadata", cJSON_Duplicate(m, 1));
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(st, "metadata"), "resourceVersion");
  if (kb_k8s_update(s->st, s->jobs, ns, name, st, KB_K8S_STATUS, NULL, &e))
    fprintf(stderr, "fake job controller: %s\n", e.message);
  cJSON_Delete(st);
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  uv_stop(h->loop);
}

int main(int argc, char **argv) {
  int port = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) kb_log_set_level(KB_LOG_DEBUG);
    else if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [-v] [--port N]\n", argv[0]);
      return 2;
    }
  }
  uv_loop_t *loop = uv_default_loop();
  server s = {0};
  s.st = kb_k8s_store_new(NULL);
  if (!s.st || kb_k8s_store_add_builtins(s.st)) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  s.pods = kb_k8s_store_lookup(s.st, "", "v1", "pods");
  s.nodes = kb_k8s_store_lookup(s.st, "", "v1", "nodes");
  s.events = kb_k8s_store_lookup(s.st, "", "v1", "events");
  s.jobs = kb_k8s_store_lookup(s.st, "batch", "v1", "jobs");
  add_node(&s, "node-1");
  add_node(&s, "node-2");
  kb_k8s_watch *wp = kb_k8s_store_on(s.st, s.pods, on_pod, &s);
  kb_k8s_watch *wj = kb_k8s_store_on(s.st, s.jobs, on_job, &s);
  kb_k8s_api *api = kb_k8s_api_new(loop, s.st);
  kb_httpd *srv = kb_httpd_new(loop, NULL, kb_k8s_api_handler, api);
  int rc = srv ? kb_httpd_listen(srv, "127.0.0.1", port) : UV_ENOMEM;
  if (rc) {
    fprintf(stderr, "listen: %s\n", kb_httpd_strerror(rc));
    return 1;
  }
  printf("PORT %d\n", kb_httpd_port(srv));
  fflush(stdout);
  uv_signal_t sigterm, sigint;
  uv_signal_init(loop, &sigterm);
  uv_signal_init(loop, &sigint);
  uv_signal_start(&sigterm, on_signal, SIGTERM);
  uv_signal_start(&sigint, on_signal, SIGINT);
  uv_run(loop, UV_RUN_DEFAULT);
  kb_k8s_api_free(api);
  kb_httpd_close(srv, NULL, NULL);
  uv_close((uv_handle_t *)&sigterm, NULL);
  uv_close((uv_handle_t *)&sigint, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  kb_k8s_watch_cancel(wp);
  kb_k8s_watch_cancel(wj);
  kb_k8s_store_free(s.st);
  uv_loop_close(loop);
  return 0;
}
