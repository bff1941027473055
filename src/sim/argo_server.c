/* argo-server's REST API (the grpc-gateway routes of
 * /work/shared/notes/apis.md §1) over the store's Workflow objects, on the
 * simulator's port: the workflow controller (ctl_workflow.c) runs what is
 * created here exactly as what comes through the CRD path. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "k8s_internal.h"
#include "sim_glue.h"

typedef struct argo_stream {
  struct glue_argo *a;
  kb_httpd_req *req;
  kb_k8s_watch *w;
  int sse;
  struct argo_stream *prev, *next;
} argo_stream;

struct glue_argo {
  kb_k8s_store *st;
  const kb_k8s_res *res;
  argo_stream *streams;
};

/* ---- helpers ---- */

static int hexval(int c) {
  return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* The url-decoded value of key in the query, or 0 when absent. */
static int qget(const char *q, const char *key, char *out, size_t cap) {
  size_t klen = strlen(key);
  for (const char *p = q; p && *p;) {
    const char *amp = strchr(p, '&');
    size_t len = amp ? (size_t)(amp - p) : strlen(p);
    if (len > klen && !strncmp(p, key, klen) && p[klen] == '=') {
      size_t o = 0;
      for (size_t i = klen + 1; i < len && o + 1 < cap; i++) {
        if (p[i] == '%' && i + 2 < len && hexval(p[i + 1]) >= 0 && hexval(p[i + 2]) >= 0) {
          out[o++] = (char)(hexval(p[i + 1]) * 16 + hexval(p[i + 2]));
          i += 2;
        } else {
          out[o++] = p[i] == '+' ? ' ' : p[i];
        }
      }
      out[o] = 0;
      return 1;
    }
    p = amp ? amp + 1 : NULL;
  }
  out[0] = 0;
  return 0;
}

static void send_json(kb_httpd_req *req, int status, cJSON *body) {
  char *text = cJSON_PrintUnformatted(body);
  kb_httpd_header h[] = {{"Content-Type", "application/json"}};
  kb_httpd_respond(req, status, h, 1, text ? text : "{}", text ? strlen(text) : 2);
  free(text);
  cJSON_Delete(body);
}

/* grpc-gateway's error body: {code, message, details}. */
static void send_grpc_error(kb_httpd_req *req, int http, const char *msg) {
  int code = http == 404 ? 5 : http == 409 ? 6 : http == 400 || http == 422 ? 3
             : http == 410 ? 9 : http == 429 ? 8 : http == 501 ? 12 : 13;
  cJSON *e = cJSON_CreateObject();
  cJSON_AddNumberToObject(e, "code", code);
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddArrayToObject(e, "details");
  send_json(req, http == 422 ? 400 : http, e);
}

static void send_k8s_error(kb_httpd_req *req, const kb_k8s_error *err) {
  send_grpc_error(req, err->code ? err->code : 500, err->message);
}

int glue_argo_path(const char *path) {
  return !strncmp(path, "/api/v1/workflows", 17) || !strncmp(path, "/api/v1/workflow-events", 23) ||
         !strcmp(path, "/api/v1/version") || !strcmp(path, "/api/v1/info") ||
         !strcmp(path, "/api/v1/userinfo");
}

/* ---- streams ---- */

static void stream_end(argo_stream *s) {
  if (s->prev) s->prev->next = s->next;
  else s->a->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  if (s->w) kb_k8s_watch_cancel(s->w);
  kb_httpd_req_on_abort(s->req, NULL, NULL);
  kb_httpd_stream_end(s->req);
  free(s);
}

static void stream_abort(kb_httpd_req *req, void *ud) {
  (void)req;
  stream_end(ud);
}

static void stream_event(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  argo_stream *s = ud;
  if (type == KB_K8S_BOOKMARK) return;
  cJSON *msg = cJSON_CreateObject();
  cJSON *result = cJSON_AddObjectToObject(msg, "result");
  if (type == KB_K8S_ERROR) {
    cJSON_Delete(msg);
    msg = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(msg, "error");
    cJSON_AddNumberToObject(e, "code", 9);
    cJSON_AddStringToObject(e, "message", "too old resource version");
  } else {
    cJSON_AddStringToObject(result, "type", kb_k8s_event_name(type));
    cJSON_AddItemToObject(result, "object", cJSON_Duplicate(obj, 1));
  }
  char *text = cJSON_PrintUnformatted(msg);
  cJSON_Delete(msg);
  if (!text) return;
  if (s->sse) {
    kb_httpd_stream_write(s->req, "data: ", 6);
    kb_httpd_stream_write(s->req, text, strlen(text));
    kb_httpd_stream_write(s->req, "\n\n", 2);
  } else {
    kb_httpd_stream_write(s->req, text, strlen(text));
    kb_httpd_stream_write(s->req, "\n", 1);
  }
  free(text);
}

static void do_watch(glue_argo *a, kb_httpd_req *req, const char *ns) {
  const char *q = kb_httpd_req_query(req);
  char labels[1024], fields[1024], rv[64];
  qget(q, "listOptions.labelSelector", labels, sizeof labels);
  qget(q, "listOptions.fieldSelector", fields, sizeof fields);
  qget(q, "listOptions.resourceVersion", rv, sizeof rv);
  const char *accept = kb_httpd_req_header(req, "Accept");
  argo_stream *s = calloc(1, sizeof *s);
  if (!s) {
    send_grpc_error(req, 500, "out of memory");
    return;
  }
  s->a = a;
  s->req = req;
  s->sse = accept && strstr(accept, "text/event-stream") != NULL;
  kb_httpd_header h[] = {{"Content-Type", s->sse ? "text/event-stream" : "application/json"},
                         {"Cache-Control", "no-cache"}};
  /* validate the selectors before the 200 is sent */
  kb_k8s_error err = {0};
  kb_k8s_selector *sel = kb_k8s_selector_parse(labels, fields, a->res, &err);
  if (!sel) {
    free(s);
    send_k8s_error(req, &err);
    return;
  }
  kb_k8s_selector_free(sel);
  kb_httpd_stream_begin(req, 200, h, 2);
  s->next = a->streams;
  if (a->streams) a->streams->prev = s;
  a->streams = s;
  kb_httpd_req_on_abort(req, stream_abort, s);
  kb_k8s_watch_opts o = {.ns = ns, .label_selector = labels, .field_selector = fields,
                         .resource_version = rv};
  s->w = kb_k8s_watch_start(a->st, a->res, &o, stream_event, s, &err);
  if (!s->w) stream_end(s);
}

/* ---- calls ---- */

static void do_create(glue_argo *a, kb_httpd_req *req, const char *ns) {
  size_t len;
  const char *text = kb_httpd_req_body(req, &len);
  cJSON *body = cJSON_ParseWithLength(text, len);
  const cJSON *wf = cJSON_GetObjectItemCaseSensitive(body, "workflow");
  if (!cJSON_IsObject(wf)) {
    cJSON_Delete(body);
    send_grpc_error(req, 400, cJSON_IsObject(body) ? "workflow is required"
                                                   : "the body must be a JSON object");
    return;
  }
  const cJSON *dry = cJSON_GetObjectItemCaseSensitive(body, "serverDryRun");
  cJSON *copy = cJSON_Duplicate(wf, 1);
  if (!cJSON_GetObjectItemCaseSensitive(copy, "apiVersion"))
    cJSON_AddStringToObject(copy, "apiVersion", "argoproj.io/v1alpha1");
  if (!cJSON_GetObjectItemCaseSensitive(copy, "kind")) cJSON_AddStringToObject(copy, "kind", "Workflow");
  cJSON *out = NULL;
  kb_k8s_error err = {0};
  int rc = kb_k8s_create(a->st, a->res, ns, copy, cJSON_IsTrue(dry) ? KB_K8S_DRY_RUN : 0, &out, &err);
  cJSON_Delete(copy);
  cJSON_Delete(body);
  if (rc < 0) {
    send_k8s_error(req, &err);
    return;
  }
  /* the controller has written a first status meanwhile */
  const cJSON *now = cJSON_IsTrue(dry) ? NULL : kb_k8s_peek(a->st, a->res, ns, k8s_meta_str(out, "name"));
  if (now) {
    cJSON_Delete(out);
    out = cJSON_Duplicate(now, 1);
  }
  send_json(req, 200, out);
}

static void do_list(glue_argo *a, kb_httpd_req *req, const char *ns) {
  const char *q = kb_httpd_req_query(req);
  char labels[1024], fields[1024], limit[32], cont[512];
  qget(q, "listOptions.labelSelector", labels, sizeof labels);
  qget(q, "listOptions.fieldSelector", fields, sizeof fields);
  qget(q, "listOptions.limit", limit, sizeof limit);
  qget(q, "listOptions.continue", cont, sizeof cont);
  kb_k8s_list_opts o = {.ns = ns, .label_selector = labels, .field_selector = fields,
                        .limit = (size_t)strtoul(limit, NULL, 10), .continue_token = cont};
  cJSON *out = NULL;
  kb_k8s_error err = {0};
  if (kb_k8s_list(a->st, a->res, &o, &out, &err) < 0) {
    send_k8s_error(req, &err);
    return;
  }
  send_json(req, 200, out);
}

static void do_version(kb_httpd_req *req) {
  cJSON *v = cJSON_CreateObject();
  cJSON_AddStringToObject(v, "version", "v3.4.17");
  cJSON_AddStringToObject(v, "buildDate", "2024-05-13T00:00:00Z");
  cJSON_AddStringToObject(v, "gitCommit", "0000000000000000000000000000000000000000");
  cJSON_AddStringToObject(v, "gitTag", "v3.4.17");
  cJSON_AddStringToObject(v, "gitTreeState", "clean");
  cJSON_AddStringToObject(v, "goVersion", "go1.21.10");
  cJSON_AddStringToObject(v, "compiler", "gc");
  cJSON_AddStringToObject(v, "platform", "linux/amd64");
  send_json(req, 200, v);
}

/* Splits "/api/v1/workflows/{ns}/{name}/..." into its segments. */
static int segments(const char *path, char seg[4][256]) {
  int n = 0;
  for (const char *p = path; *p && n < 4;) {
    while (*p == '/') p++;
    if (!*p) break;
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(seg[n++], 256, "%.*s", (int)len, p);
    p += len;
  }
  return n;
}

int glue_argo_handle(glue_argo *a, kb_httpd_req *req) {
  const char *path = kb_httpd_req_path(req), *m = kb_httpd_req_method(req);
  if (!glue_argo_path(path)) return 0;
  if (!strcmp(path, "/api/v1/version")) {
    do_version(req);
    return 1;
  }
  if (!strcmp(path, "/api/v1/info") || !strcmp(path, "/api/v1/userinfo")) {
    send_json(req, 200, cJSON_CreateObject());
    return 1;
  }
  char seg[4][256] = {{0}};
  int n = segments(path + 7, seg); /* after "/api/v1" */
  const char *ns = n > 1 ? seg[1] : NULL;
  if (!strcmp(seg[0], "workflow-events") && n <= 2 && !strcmp(m, "GET")) {
    do_watch(a, req, ns);
    return 1;
  }
  if (strcmp(seg[0], "workflows")) {
    send_grpc_error(req, 404, "Not Found");
    return 1;
  }
  if (n == 2 && !strcmp(m, "POST")) {
    do_create(a, req, ns);
    return 1;
  }
  if (n <= 2 && !strcmp(m, "GET")) {
    do_list(a, req, ns);
    return 1;
  }
  kb_k8s_error err = {0};
  if (n == 3 && !strcmp(m, "GET")) {
    cJSON *o = kb_k8s_get(a->st, a->res, ns, seg[2], &err);
    if (o) send_json(req, 200, o);
    else send_k8s_error(req, &err);
    return 1;
  }
  if (n == 3 && !strcmp(m, "DELETE")) {
    kb_k8s_delete_opts o = {.propagation = KB_K8S_PROPAGATE_BACKGROUND};
    if (kb_k8s_delete(a->st, a->res, ns, seg[2], &o, NULL, &err) < 0) send_k8s_error(req, &err);
    else send_json(req, 200, cJSON_CreateObject());
    return 1;
  }
  if (n >= 3) {
    send_grpc_error(req, n == 4 ? 501 : 404, n == 4 ? "not supported by the simulator" : "Not Found");
    return 1;
  }
  send_grpc_error(req, 405, "Method Not Allowed");
  return 1;
}

glue_argo *glue_argo_new(kb_k8s_store *st) {
  glue_argo *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->st = st;
  a->res = kb_k8s_store_lookup(st, "argoproj.io", "v1alpha1", "workflows");
  if (!a->res) {
    free(a);
    return NULL;
  }
  return a;
}

void glue_argo_free(glue_argo *a) {
  if (!a) return;
  while (a->streams) stream_end(a->streams);
  free(a);
}
