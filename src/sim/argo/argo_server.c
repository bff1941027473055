/* argo-server's REST API (the grpc-gateway routes of
 * /work/shared/notes/apis.md §1) over the store's Workflow and
 * WorkflowTemplate objects, on the simulator's port: the workflow
 * controller (ctl_workflow.c) runs what is created or submitted here
 * exactly as what comes through the CRD path. This file: routing, create,
 * lint, list/get/delete, submit, templates, logs and event streams; the
 * actions, validation, fields=, cron workflows and the archive are in the
 * other argo_*.c files (argo_internal.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "argo_internal.h"
#include "k8s_internal.h"
#include "kb/vclock.h"
#include "argo_server.h"

#define TEMPLATE_LABEL "workflows.argoproj.io/workflow-template"
#define WORKFLOW_LABEL "workflows.argoproj.io/workflow"

typedef struct argo_stream {
  struct kb_argo_server *a;
  kb_httpd_req *req;
  kb_k8s_watch *w;
  uv_timer_t timer;   /* listOptions.timeoutSeconds without a clock; its close frees */
  kb_vtimer vtimer;   /* the same on the server's clock */
  int sse, ended, want_end;
  char *fields; /* fields= for each event's object ("result.object." taken off), or NULL */
  struct argo_stream *prev, *next;
} argo_stream;

struct kb_argo_server {
  argo_env env; /* the same store and resources, for the other argo files */
  argo_archive *archive;
  kb_k8s_store *st;
  uv_loop_t *loop;
  kb_vclock *clock; /* NULL: stream timeouts in real time */
  const kb_k8s_res *res, *templates, *pods;
  argo_stream *streams;
};

/* ---- helpers ---- */

static int hexval(int c) {
  return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* The url-decoded value of key in the query, or 0 when absent. */
int kb_argo_query(const char *q, const char *key, char *out, size_t cap) {
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

void kb_argo_send_json(kb_httpd_req *req, int status, cJSON *body) {
  char *text = cJSON_PrintUnformatted(body);
  kb_httpd_header h[] = {{"Content-Type", "application/json"}};
  kb_httpd_respond(req, status, h, 1, text ? text : "{}", text ? strlen(text) : 2);
  free(text);
  cJSON_Delete(body);
}

/* grpc-gateway's error body: {code, message, details}. */
void kb_argo_send_error(kb_httpd_req *req, int http, const char *msg) {
  int code = http == 404 ? 5 : http == 409 ? 6 : http == 400 || http == 422 ? 3
             : http == 410 ? 9 : http == 429 ? 8 : http == 501 ? 12 : 13;
  cJSON *e = cJSON_CreateObject();
  cJSON_AddNumberToObject(e, "code", code);
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddArrayToObject(e, "details");
  kb_argo_send_json(req, http == 422 ? 400 : http, e);
}

void kb_argo_send_k8s_error(kb_httpd_req *req, const kb_k8s_error *err) {
  kb_argo_send_error(req, err->code ? err->code : 500, err->message);
}

static int wants_sse(kb_httpd_req *req) {
  const char *accept = kb_httpd_req_header(req, "Accept");
  return accept && strstr(accept, "text/event-stream") != NULL;
}

int kb_argo_server_path(const char *path) {
  return !strncmp(path, "/api/v1/workflows", 17) || !strncmp(path, "/api/v1/workflow-events", 23) ||
         !strncmp(path, "/api/v1/workflow-templates", 26) || !strcmp(path, "/api/v1/version") ||
         !strncmp(path, "/api/v1/cron-workflows", 22) || !strncmp(path, "/api/v1/archived-workflows", 26) ||
         !strcmp(path, "/api/v1/info") ||
         !strcmp(path, "/api/v1/userinfo");
}

/* ---- streams ---- */

static void stream_closed(uv_handle_t *h) {
  argo_stream *s = h->data;
  free(s->fields);
  free(s);
}

static void stream_end(argo_stream *s) {
  if (s->ended) return;
  s->ended = 1;
  if (s->prev) s->prev->next = s->next;
  else s->a->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  if (s->w) kb_k8s_watch_cancel(s->w);
  s->w = NULL;
  kb_httpd_req_on_abort(s->req, NULL, NULL);
  kb_httpd_stream_end(s->req);
  if (s->vtimer.clock) kb_vtimer_stop(&s->vtimer);
  uv_timer_stop(&s->timer);
  uv_close((uv_handle_t *)&s->timer, stream_closed);
}

static void stream_abort(kb_httpd_req *req, void *ud) {
  (void)req;
  stream_end(ud);
}

static void stream_timeout(uv_timer_t *t) { stream_end(t->data); }
static void stream_vtimeout(kb_vtimer *t) { stream_end(t->data); }

/* One message of a stream: "data: {...}\n\n" for SSE, else a JSON line. */
static char *stream_msg(const cJSON *msg, int sse, size_t *len) {
  char *text = cJSON_PrintUnformatted(msg);
  if (!text) return NULL;
  size_t n = strlen(text);
  char *out = malloc(n + 9);
  if (!out) {
    free(text);
    return NULL;
  }
  *len = (size_t)snprintf(out, n + 9, sse ? "data: %s\n\n" : "%s\n", text);
  free(text);
  return out;
}

static void stream_event(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  argo_stream *s = ud;
  if (type == KB_K8S_BOOKMARK || s->ended || s->want_end) return;
  cJSON *msg = cJSON_CreateObject();
  if (type == KB_K8S_ERROR) {
    cJSON *e = cJSON_AddObjectToObject(msg, "error");
    cJSON_AddNumberToObject(e, "code", 9);
    cJSON_AddStringToObject(e, "message", "too old resource version");
  } else {
    cJSON *result = cJSON_AddObjectToObject(msg, "result");
    cJSON_AddStringToObject(result, "type", kb_k8s_event_name(type));
    cJSON *copy = cJSON_Duplicate(obj, 1);
    if (s->fields) kb_argo_fields_prune(copy, s->fields);
    cJSON_AddItemToObject(result, "object", copy);
  }
  size_t len = 0;
  char *text = stream_msg(msg, s->sse, &len);
  cJSON_Delete(msg);
  if (text) kb_httpd_stream_write(s->req, text, len);
  free(text);
  /* the watch is over after an ERROR: so is the stream */
  if (type == KB_K8S_ERROR) {
    if (s->w) stream_end(s);
    else s->want_end = 1;
  }
}

static void do_watch(kb_argo_server *a, kb_httpd_req *req, const char *ns) {
  const char *q = kb_httpd_req_query(req);
  char labels[1024], fields[1024], rv[64], tmo[32];
  kb_argo_query(q, "listOptions.labelSelector", labels, sizeof labels);
  kb_argo_query(q, "listOptions.fieldSelector", fields, sizeof fields);
  kb_argo_query(q, "listOptions.resourceVersion", rv, sizeof rv);
  kb_argo_query(q, "listOptions.timeoutSeconds", tmo, sizeof tmo);
  /* validate the selectors before the 200 is sent */
  kb_k8s_error err = {0};
  kb_k8s_selector *sel = kb_k8s_selector_parse(labels, fields, a->res, &err);
  if (!sel) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  kb_k8s_selector_free(sel);
  argo_stream *s = calloc(1, sizeof *s);
  if (!s) {
    kb_argo_send_error(req, 500, "out of memory");
    return;
  }
  s->a = a;
  s->req = req;
  s->sse = wants_sse(req);
  char fl[2048];
  if (kb_argo_query(q, "fields", fl, sizeof fl) && *fl) s->fields = kb_argo_fields_without_prefix(fl, "result.object.");
  uv_timer_init(a->loop, &s->timer);
  s->timer.data = s;
  kb_httpd_header h[] = {{"Content-Type", s->sse ? "text/event-stream" : "application/json"},
                         {"Cache-Control", "no-cache"}};
  kb_httpd_stream_begin(req, 200, h, 2);
  s->next = a->streams;
  if (a->streams) a->streams->prev = s;
  a->streams = s;
  kb_httpd_req_on_abort(req, stream_abort, s);
  /* argo-server passes listOptions to its Kubernetes watch, which ends
   * after timeoutSeconds; without it the stream stays open */
  double timeout = atof(tmo);
  if (timeout > 0 && a->clock) { /* real seconds to a client: as long on the clock */
    kb_vtimer_init(a->clock, &s->vtimer, stream_vtimeout, s);
    kb_vtimer_start(&s->vtimer, timeout * kb_vclock_speed(a->clock));
  } else if (timeout > 0) {
    uv_timer_start(&s->timer, stream_timeout, (uint64_t)(timeout * 1000 + 0.5), 0);
  }
  kb_k8s_watch_opts o = {.ns = ns, .label_selector = labels, .field_selector = fields,
                         .resource_version = rv};
  s->w = kb_k8s_watch_start(a->st, a->res, &o, stream_event, s, &err);
  if (!s->w || s->want_end) stream_end(s);
}

/* ---- workflows ---- */

/* Stores wf (apiVersion and kind defaulted) and answers the Workflow as the
 * controller has already seen it. */
void kb_argo_create_workflow(argo_env *a, kb_httpd_req *req, const char *ns, cJSON *wf, int dry) {
  char msg[1024];
  if (kb_argo_validate_workflow(wf, 0, msg, sizeof msg) < 0) { /* argo refuses before storing */
    kb_argo_send_error(req, 400, msg);
    return;
  }
  if (!cJSON_GetObjectItemCaseSensitive(wf, "apiVersion"))
    cJSON_AddStringToObject(wf, "apiVersion", "argoproj.io/v1alpha1");
  if (!cJSON_GetObjectItemCaseSensitive(wf, "kind")) cJSON_AddStringToObject(wf, "kind", "Workflow");
  cJSON *out = NULL;
  kb_k8s_error err = {0};
  if (kb_k8s_create(a->st, a->wfs, ns, wf, dry ? KB_K8S_DRY_RUN : 0, &out, &err) < 0) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  /* the controller has written a first status meanwhile */
  const cJSON *now = dry ? NULL : kb_k8s_peek(a->st, a->wfs, ns, kb_k8s_meta_str(out, "name"));
  if (now) {
    cJSON_Delete(out);
    out = cJSON_Duplicate(now, 1);
  }
  kb_argo_send_json(req, 200, out);
}

/* The request body as a JSON object, or NULL after answering 400. */
static cJSON *body_object(kb_httpd_req *req) {
  size_t len;
  const char *text = kb_httpd_req_body(req, &len);
  cJSON *body = cJSON_ParseWithLength(text, len);
  if (cJSON_IsObject(body)) return body;
  cJSON_Delete(body);
  kb_argo_send_error(req, 400, "the body must be a JSON object");
  return NULL;
}

static void do_create(kb_argo_server *a, kb_httpd_req *req, const char *ns) {
  cJSON *body = body_object(req);
  if (!body) return;
  const cJSON *wf = cJSON_GetObjectItemCaseSensitive(body, "workflow");
  if (!cJSON_IsObject(wf)) {
    cJSON_Delete(body);
    kb_argo_send_error(req, 400, "workflow is required");
    return;
  }
  cJSON *copy = cJSON_Duplicate(wf, 1);
  int dry = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "serverDryRun"));
  cJSON_Delete(body);
  kb_argo_create_workflow(&a->env, req, ns, copy, dry);
  cJSON_Delete(copy);
}

/* POST .../lint: argo's validation, nothing stored; the Workflow back. */
static void do_lint(kb_httpd_req *req, const char *ns) {
  cJSON *body = body_object(req);
  if (!body) return;
  cJSON *wf = cJSON_DetachItemFromObjectCaseSensitive(body, "workflow");
  cJSON_Delete(body);
  char msg[1024];
  if (!cJSON_IsObject(wf)) {
    cJSON_Delete(wf);
    kb_argo_send_error(req, 500, "unable to get a workflow");
  } else if (kb_argo_validate_workflow(wf, 0, msg, sizeof msg) < 0) {
    cJSON_Delete(wf);
    kb_argo_send_error(req, 400, msg);
  } else {
    cJSON *md = cJSON_GetObjectItemCaseSensitive(wf, "metadata");
    if (!cJSON_IsObject(md)) md = cJSON_AddObjectToObject(wf, "metadata");
    if (!cJSON_GetObjectItemCaseSensitive(md, "namespace") && ns)
      cJSON_AddStringToObject(md, "namespace", ns);
    kb_argo_send_json(req, 200, wf);
  }
}

/* The answer with fields= applied. */
static void send_fields(kb_httpd_req *req, cJSON *out) {
  char fields[2048];
  if (kb_argo_query(kb_httpd_req_query(req), "fields", fields, sizeof fields)) kb_argo_fields_prune(out, fields);
  kb_argo_send_json(req, 200, out);
}

void kb_argo_list(argo_env *a, const kb_k8s_res *res, kb_httpd_req *req, const char *ns) {
  const char *q = kb_httpd_req_query(req);
  char labels[1024], fields[1024], limit[32], cont[512];
  kb_argo_query(q, "listOptions.labelSelector", labels, sizeof labels);
  kb_argo_query(q, "listOptions.fieldSelector", fields, sizeof fields);
  kb_argo_query(q, "listOptions.limit", limit, sizeof limit);
  kb_argo_query(q, "listOptions.continue", cont, sizeof cont);
  kb_k8s_list_opts o = {.ns = ns, .label_selector = labels, .field_selector = fields,
                        .limit = (size_t)strtoul(limit, NULL, 10), .continue_token = cont};
  cJSON *out = NULL;
  kb_k8s_error err = {0};
  if (kb_k8s_list(a->st, res, &o, &out, &err) < 0) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  send_fields(req, out);
}

void kb_argo_get(argo_env *a, const kb_k8s_res *res, kb_httpd_req *req, const char *ns,
              const char *name) {
  kb_k8s_error err = {0};
  cJSON *o = kb_k8s_get(a->st, res, ns, name, &err);
  if (o) send_fields(req, o);
  else kb_argo_send_k8s_error(req, &err);
}

void kb_argo_delete(argo_env *a, const kb_k8s_res *res, kb_httpd_req *req, const char *ns,
                 const char *name) {
  kb_k8s_error err = {0};
  kb_k8s_delete_opts o = {.propagation = KB_K8S_PROPAGATE_BACKGROUND};
  if (kb_k8s_delete(a->st, res, ns, name, &o, NULL, &err) < 0) kb_argo_send_k8s_error(req, &err);
  else kb_argo_send_json(req, 200, cJSON_CreateObject());
}

/* ---- submit from a WorkflowTemplate ---- */

static cJSON *obj_at(cJSON *parent, const char *key) {
  cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, key);
  if (cJSON_IsObject(o)) return o;
  cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
  return cJSON_AddObjectToObject(parent, key);
}

/* "a=b,c=d" (submitOptions.labels / annotations) into a map. */
static void add_pairs(cJSON *map, const char *text) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", text ? text : "");
  for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(t, '=');
    if (!eq || eq == t) continue;
    *eq = 0;
    cJSON_DeleteItemFromObjectCaseSensitive(map, t);
    cJSON_AddStringToObject(map, t, eq + 1);
  }
}

/* spec.arguments.parameters with "name=value" set: an existing parameter
 * gets the value, an unknown one is added (Argo's ApplySubmitOpts). */
static void set_parameter(cJSON *spec, const char *kv) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv) return;
  char name[256];
  snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
  cJSON *params = cJSON_GetObjectItemCaseSensitive(obj_at(spec, "arguments"), "parameters");
  if (!cJSON_IsArray(params)) {
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(spec, "arguments"), "parameters");
    params = cJSON_AddArrayToObject(cJSON_GetObjectItem(spec, "arguments"), "parameters");
  }
  cJSON *p;
  cJSON_ArrayForEach(p, params) {
    const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name"));
    if (n && !strcmp(n, name)) {
      cJSON_DeleteItemFromObjectCaseSensitive(p, "value");
      cJSON_AddStringToObject(p, "value", eq + 1);
      return;
    }
  }
  p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "name", name);
  cJSON_AddStringToObject(p, "value", eq + 1);
  cJSON_AddItemToArray(params, p);
}

/* The Workflow a template submits. Argo stores spec.workflowTemplateRef
 * and resolves it in the controller; the model loads the Workflow itself,
 * so the template's spec is inlined here. workflowMetadata becomes the
 * Workflow's labels and annotations, as in Argo. */
static cJSON *workflow_from_template(const cJSON *tmpl, const char *name, const cJSON *opts) {
  cJSON *wf = cJSON_CreateObject();
  cJSON_AddStringToObject(wf, "apiVersion", "argoproj.io/v1alpha1");
  cJSON_AddStringToObject(wf, "kind", "Workflow");
  cJSON *meta = cJSON_AddObjectToObject(wf, "metadata");
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(tmpl, "spec");
  cJSON *spec = cJSON_IsObject(src) ? cJSON_Duplicate(src, 1) : cJSON_CreateObject();
  cJSON_AddItemToObject(wf, "spec", spec);
  cJSON *wm = cJSON_DetachItemFromObjectCaseSensitive(spec, "workflowMetadata");
  cJSON *labels = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(wm, "labels"), 1);
  cJSON *ann = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(wm, "annotations"), 1);
  cJSON_Delete(wm);
  cJSON_AddItemToObject(meta, "labels", cJSON_IsObject(labels) ? labels : cJSON_CreateObject());
  if (!cJSON_IsObject(labels)) cJSON_Delete(labels);
  labels = cJSON_GetObjectItem(meta, "labels");
  cJSON_AddItemToObject(meta, "annotations", cJSON_IsObject(ann) ? ann : cJSON_CreateObject());
  if (!cJSON_IsObject(ann)) cJSON_Delete(ann);
  ann = cJSON_GetObjectItem(meta, "annotations");
  cJSON_DeleteItemFromObjectCaseSensitive(labels, TEMPLATE_LABEL);
  cJSON_AddStringToObject(labels, TEMPLATE_LABEL, name);
  add_pairs(labels, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opts, "labels")));
  add_pairs(ann, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opts, "annotations")));
  if (!cJSON_GetArraySize(ann)) cJSON_DeleteItemFromObjectCaseSensitive(meta, "annotations");

  const char *wname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opts, "name"));
  const char *gen = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opts, "generateName"));
  char dflt[300];
  snprintf(dflt, sizeof dflt, "%s-", name);
  if (wname && *wname) cJSON_AddStringToObject(meta, "name", wname);
  else cJSON_AddStringToObject(meta, "generateName", gen && *gen ? gen : dflt);

  const char *entry = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opts, "entryPoint"));
  if (entry && *entry) {
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "entrypoint");
    cJSON_AddStringToObject(spec, "entrypoint", entry);
  }
  const char *sa = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opts, "serviceAccount"));
  if (sa && *sa) {
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "serviceAccountName");
    cJSON_AddStringToObject(spec, "serviceAccountName", sa);
  }
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(opts, "parameters")) {
    if (cJSON_IsString(p)) set_parameter(spec, p->valuestring);
  }
  return wf;
}

static int is_template_kind(const char *k) {
  return !strcmp(k, "WorkflowTemplate") || !strcmp(k, "workflowtemplate") ||
         !strcmp(k, "workflowtemplates") || !strcmp(k, "wftmpl");
}

static void do_submit(kb_argo_server *a, kb_httpd_req *req, const char *ns) {
  cJSON *body = body_object(req);
  if (!body) return;
  const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "resourceKind"));
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "resourceName"));
  const cJSON *opts = cJSON_GetObjectItemCaseSensitive(body, "submitOptions");
  char msg[512];
  if (!kind || !*kind || !name || !*name) {
    kb_argo_send_error(req, 400, "resourceKind and resourceName are required");
  } else if (!is_template_kind(kind)) {
    snprintf(msg, sizeof msg, "resourceKind %.200s: only WorkflowTemplate is supported by the "
             "simulator (ClusterWorkflowTemplate, CronWorkflow are not)", kind);
    kb_argo_send_error(req, strcasecmp(kind, "ClusterWorkflowTemplate") &&
                    strcasecmp(kind, "CronWorkflow") ? 400 : 501, msg);
  } else {
    const cJSON *tmpl = kb_k8s_peek(a->st, a->templates, ns, name);
    if (!tmpl) {
      snprintf(msg, sizeof msg, "workflowtemplates.argoproj.io \"%.200s\" not found", name);
      kb_argo_send_error(req, 404, msg);
    } else {
      cJSON *wf = workflow_from_template(tmpl, name, opts);
      int dry = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(opts, "serverDryRun"));
      kb_argo_create_workflow(&a->env, req, ns, wf, dry);
      cJSON_Delete(wf);
    }
  }
  cJSON_Delete(body);
}

/* ---- workflow templates ---- */

static void do_create_template(kb_argo_server *a, kb_httpd_req *req, const char *ns) {
  cJSON *body = body_object(req);
  if (!body) return;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(body, "template");
  if (!cJSON_IsObject(t)) {
    cJSON_Delete(body);
    kb_argo_send_error(req, 400, "template is required");
    return;
  }
  cJSON *copy = cJSON_Duplicate(t, 1);
  cJSON_Delete(body);
  char msg[1024];
  if (kb_argo_validate_workflow(copy, 1, msg, sizeof msg) < 0) {
    cJSON_Delete(copy);
    kb_argo_send_error(req, 400, msg);
    return;
  }
  if (!cJSON_GetObjectItemCaseSensitive(copy, "apiVersion"))
    cJSON_AddStringToObject(copy, "apiVersion", "argoproj.io/v1alpha1");
  if (!cJSON_GetObjectItemCaseSensitive(copy, "kind"))
    cJSON_AddStringToObject(copy, "kind", "WorkflowTemplate");
  cJSON *out = NULL;
  kb_k8s_error err = {0};
  int rc = kb_k8s_create(a->st, a->templates, ns, copy, 0, &out, &err);
  cJSON_Delete(copy);
  if (rc < 0) kb_argo_send_k8s_error(req, &err);
  else kb_argo_send_json(req, 200, out);
}

static void route_templates(kb_argo_server *a, kb_httpd_req *req, const char *m, int n, char seg[][256]) {
  const char *ns = n > 1 ? seg[1] : NULL;
  if (n == 2 && !strcmp(m, "POST")) do_create_template(a, req, ns);
  else if (n <= 2 && !strcmp(m, "GET")) kb_argo_list(&a->env, a->templates, req, ns);
  else if (n == 3 && !strcmp(m, "GET")) kb_argo_get(&a->env, a->templates, req, ns, seg[2]);
  else if (n == 3 && !strcmp(m, "DELETE")) kb_argo_delete(&a->env, a->templates, req, ns, seg[2]);
  else if (n == 3 && !strcmp(m, "PUT")) kb_argo_send_error(req, 501, "not supported by the simulator");
  else kb_argo_send_error(req, 404, "Not Found");
}

/* ---- logs ---- */

/* Appends the {"result":{podName, content}} messages of one pod's log. */
static int pod_log(kb_argo_server *a, kb_buf *out, const char *ns, const char *pod,
                   const kb_k8s_log_opts *lo, const char *grep, int sse, kb_k8s_error *err);

static void do_logs(kb_argo_server *a, kb_httpd_req *req, const char *ns, const char *name) {
  const char *q = kb_httpd_req_query(req);
  char pod[256], container[128], grep[256], tail[32], ts[16];
  kb_argo_query(q, "podName", pod, sizeof pod);
  if (!kb_argo_query(q, "logOptions.container", container, sizeof container) || !*container)
    snprintf(container, sizeof container, "main");
  kb_argo_query(q, "grep", grep, sizeof grep);
  int has_tail = kb_argo_query(q, "logOptions.tailLines", tail, sizeof tail) && *tail;
  kb_argo_query(q, "logOptions.timestamps", ts, sizeof ts);
  kb_k8s_error err = {0};
  if (!kb_k8s_peek(a->st, a->res, ns, name)) {
    char msg[512];
    snprintf(msg, sizeof msg, "workflows.argoproj.io \"%.200s\" not found", name);
    kb_argo_send_error(req, 404, msg);
    return;
  }
  char labels[400], fields[300];
  snprintf(labels, sizeof labels, WORKFLOW_LABEL "=%s", name);
  snprintf(fields, sizeof fields, *pod ? "metadata.name=%s" : "%s", pod);
  kb_k8s_list_opts lo = {.ns = ns, .label_selector = labels, .field_selector = fields};
  cJSON *pods = NULL;
  if (kb_k8s_list(a->st, a->pods, &lo, &pods, &err) < 0) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  kb_k8s_log_opts o = {.container = container, .tail_lines = has_tail ? atol(tail) : -1,
                       .timestamps = !strcmp(ts, "true")};
  int sse = wants_sse(req);
  kb_buf out = KB_BUF_INIT;
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(pods, "items")) {
    const char *pn = kb_k8s_meta_str(p, "name");
    /* a pod without that container has no such log: others still count */
    if (pn && pod_log(a, &out, ns, pn, &o, grep, sse, &err) < 0 && *pod) break;
    err.code = 0;
  }
  cJSON_Delete(pods);
  if (err.code) {
    kb_buf_free(&out);
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  kb_httpd_header h[] = {{"Content-Type", sse ? "text/event-stream" : "application/json"}};
  kb_httpd_respond(req, 200, h, 1, out.data ? out.data : "", out.len);
  kb_buf_free(&out);
}

static int pod_log(kb_argo_server *a, kb_buf *out, const char *ns, const char *pod,
                   const kb_k8s_log_opts *lo, const char *grep, int sse, kb_k8s_error *err) {
  char *text = NULL;
  size_t len = 0;
  if (kb_k8s_log_read(a->st, ns, pod, lo, &text, &len, err) < 0) return -1;
  for (char *line = text, *nl; line && line < text + len; line = nl + 1) {
    nl = memchr(line, '\n', (size_t)(text + len - line));
    if (!nl) nl = text + len;
    *nl = 0;
    if (*grep && !strstr(line, grep)) continue;
    cJSON *msg = cJSON_CreateObject();
    cJSON *r = cJSON_AddObjectToObject(msg, "result");
    cJSON_AddStringToObject(r, "podName", pod);
    cJSON_AddStringToObject(r, "content", line);
    size_t n = 0;
    char *m = stream_msg(msg, sse, &n);
    cJSON_Delete(msg);
    if (m) kb_buf_append(out, m, n);
    free(m);
  }
  free(text);
  return 0;
}

/* ---- routing ---- */

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
  kb_argo_send_json(req, 200, v);
}

/* Splits "/workflows/{ns}/{name}/..." into up to 5 segments; returns how
 * many there are (6 when more). */
static int segments(const char *path, char seg[5][256]) {
  int n = 0;
  for (const char *p = path; *p;) {
    while (*p == '/') p++;
    if (!*p) break;
    if (n == 5) return 6;
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(seg[n++], 256, "%.*s", (int)len, p);
    p += len;
  }
  return n;
}

static void route_workflows(kb_argo_server *a, kb_httpd_req *req, const char *m, int n, char seg[][256]) {
  const char *ns = n > 1 ? seg[1] : NULL;
  if (n == 2 && !strcmp(m, "POST")) do_create(a, req, ns);
  else if (n <= 2 && !strcmp(m, "GET")) kb_argo_list(&a->env, a->res, req, ns);
  else if (n == 3 && !strcmp(m, "POST") && !strcmp(seg[2], "submit")) do_submit(a, req, ns);
  else if (n == 3 && !strcmp(m, "POST") && !strcmp(seg[2], "lint")) do_lint(req, ns);
  else if (n == 4 && !strcmp(m, "PUT")) kb_argo_workflow_action(&a->env, req, ns, seg[2], seg[3]);
  else if (n == 3 && !strcmp(m, "GET")) kb_argo_get(&a->env, a->res, req, ns, seg[2]);
  else if (n == 3 && !strcmp(m, "DELETE")) kb_argo_delete(&a->env, a->res, req, ns, seg[2]);
  else if (n == 4 && !strcmp(m, "GET") && !strcmp(seg[3], "log")) do_logs(a, req, ns, seg[2]);
  else if (n >= 3 && n <= 5)
    kb_argo_send_error(req, n >= 4 ? 501 : 404, n >= 4 ? "not supported by the simulator" : "Not Found");
  else if (n > 5) kb_argo_send_error(req, 404, "Not Found");
  else kb_argo_send_error(req, 405, "Method Not Allowed");
}

int kb_argo_server_handle(kb_argo_server *a, kb_httpd_req *req) {
  const char *path = kb_httpd_req_path(req), *m = kb_httpd_req_method(req);
  if (!kb_argo_server_path(path)) return 0;
  if (!strcmp(path, "/api/v1/version")) {
    do_version(req);
    return 1;
  }
  if (!strcmp(path, "/api/v1/info") || !strcmp(path, "/api/v1/userinfo")) {
    kb_argo_send_json(req, 200, cJSON_CreateObject());
    return 1;
  }
  char seg[5][256] = {{0}};
  int n = segments(path + 7, seg); /* after "/api/v1" */
  if (!strcmp(seg[0], "workflow-events") && n <= 2 && !strcmp(m, "GET"))
    do_watch(a, req, n > 1 ? seg[1] : NULL);
  else if (!strcmp(seg[0], "workflows")) route_workflows(a, req, m, n, seg);
  else if (!strcmp(seg[0], "workflow-templates") && n <= 5) route_templates(a, req, m, n, seg);
  else if (!strcmp(seg[0], "cron-workflows") && n >= 2 && n <= 4) kb_argo_cron_route(&a->env, req, m, n, seg);
  else if (!strcmp(seg[0], "archived-workflows") && n <= 3) kb_argo_archive_route(a->archive, req, m, n, seg);
  else kb_argo_send_error(req, 404, "Not Found");
  return 1;
}

kb_argo_server *kb_argo_server_new(kb_k8s_store *st, uv_loop_t *loop) {
  kb_argo_server *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->st = st;
  a->loop = loop;
  a->res = kb_k8s_store_lookup(st, "argoproj.io", "v1alpha1", "workflows");
  a->templates = kb_k8s_store_lookup(st, "argoproj.io", "v1alpha1", "workflowtemplates");
  a->pods = kb_k8s_store_lookup(st, "", "v1", "pods");
  const kb_k8s_res *crons = kb_k8s_store_lookup(st, "argoproj.io", "v1alpha1", "cronworkflows");
  if (!a->res || !a->templates || !a->pods || !crons) {
    free(a);
    return NULL;
  }
  a->env = (argo_env){st, a->res, a->templates, a->pods, crons};
  a->archive = kb_argo_archive_new(&a->env); /* NULL: the archive answers 500 */
  return a;
}

void kb_argo_server_set_clock(kb_argo_server *a, kb_vclock *clock) { a->clock = clock; }

void kb_argo_server_free(kb_argo_server *a) {
  if (!a) return;
  while (a->streams) stream_end(a->streams);
  kb_argo_archive_free(a->archive);
  free(a);
}
