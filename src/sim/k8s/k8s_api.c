/* The Kubernetes REST layer (include/kb/k8s_api.h): routing, query
 * options, responses and Status errors, watch and log streams, and the
 * fault/latency hooks. Tables and discovery documents come from
 * k8s_table.c and k8s_openapi.c; objects and their subresources are
 * k8s_api_objects.c's.
 *
 * A request goes: route -> fault hook -> latency hook (a timer on the
 * hook's clock when it asks for a delay) -> execute. Streams (watch, logs -f) stay open in the
 * api's stream list until the client goes away, the timeout fires, or the
 * api is freed. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "k8s_api_internal.h"
#include "kb/k8s_api.h"
#include "kb/k8s_proto.h"
#include "kb/vclock.h"
#include "kb/log.h"

/* ---- small helpers -------------------------------------------------------- */

static int hexval(int c) {
  return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

static void url_decode(const char *s, size_t n, char *out, size_t cap) {
  size_t j = 0;
  for (size_t i = 0; i < n && j + 1 < cap; i++) {
    if (s[i] == '%' && i + 2 < n + 0 && hexval((unsigned char)s[i + 1]) >= 0 &&
        hexval((unsigned char)s[i + 2]) >= 0) {
      out[j++] = (char)(hexval((unsigned char)s[i + 1]) * 16 + hexval((unsigned char)s[i + 2]));
      i += 2;
    } else {
      out[j++] = s[i] == '+' ? ' ' : s[i];
    }
  }
  out[j] = '\0';
}

/* The decoded value of a query parameter; 1 when present. */
int kb_k8s_qget(const char *query, const char *key, char *out, size_t cap) {
  size_t klen = strlen(key);
  out[0] = '\0';
  for (const char *p = query; p && *p;) {
    const char *amp = strchr(p, '&');
    size_t len = amp ? (size_t)(amp - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    size_t nlen = eq ? (size_t)(eq - p) : len;
    if (nlen == klen && !strncmp(p, key, klen)) {
      if (eq) url_decode(eq + 1, len - nlen - 1, out, cap);
      return 1;
    }
    p = amp ? amp + 1 : NULL;
  }
  return 0;
}

int kb_k8s_qbool(const char *query, const char *key) {
  char v[16];
  return kb_k8s_qget(query, key, v, sizeof v) && (!strcmp(v, "true") || !strcmp(v, "1") || !*v);
}

/* protobuf when the client lists it first (kubectl's and client-go's typed
 * calls: "application/vnd.kubernetes.protobuf,application/json") and the
 * object's kind has a message; JSON, the fallback they list next, for the
 * rest (custom resources, Tables, discovery, a value the schema cannot
 * hold). 1 when answered, kb_httpd_respond's result in *rc. */
static int send_protobuf(kb_httpd_req *req, int status, const cJSON *body, const char *warning,
                         int *rc) {
  const char *a = kb_httpd_req_header(req, "Accept");
  uint8_t *pb;
  size_t n;
  if (!body || !a || !kb_k8s_proto_media(a) || kb_k8s_proto_encode(body, &pb, &n, NULL, 0))
    return 0;
  kb_httpd_header h[3] = {{"Content-Type", KB_K8S_PROTO_MEDIA},
                          {"Cache-Control", "no-cache, private"},
                          {"Warning", warning}};
  *rc = kb_httpd_respond(req, status, h, warning ? 3 : 2, (const char *)pb, n);
  free(pb);
  return 1;
}

int kb_k8s_send_json(kb_httpd_req *req, int status, cJSON *body, const char *warning) {
  int rc;
  if (send_protobuf(req, status, body, warning, &rc)) {
    cJSON_Delete(body);
    return rc;
  }
  char *text = body ? cJSON_PrintUnformatted(body) : NULL;
  cJSON_Delete(body);
  kb_httpd_header h[3] = {{"Content-Type", "application/json"},
                          {"Cache-Control", "no-cache, private"},
                          {"Warning", warning}};
  if (!text) {
    static const char oom_body[] = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
                                   "\"Failure\",\"message\":\"out of memory\",\"code\":500}";
    return kb_httpd_respond(req, 500, h, 2, oom_body, sizeof oom_body - 1);
  }
  rc = kb_httpd_respond(req, status, h, warning ? 3 : 2, text, strlen(text));
  free(text);
  return rc;
}

int kb_k8s_send_error(kb_httpd_req *req, const kb_k8s_error *err, const kb_k8s_res *res) {
  return kb_k8s_send_json(req, err->code, kb_k8s_status_json(err, res), NULL);
}

int kb_k8s_fail(kb_httpd_req *req, const kb_k8s_res *res, int code, const char *reason,
                const char *msg) {
  kb_k8s_error e;
  kb_k8s_error_set(&e, code, reason, "%s", msg);
  return kb_k8s_send_error(req, &e, res);
}

static int send_text(kb_httpd_req *req, int status, const char *text, size_t len) {
  kb_httpd_header h[] = {{"Content-Type", "text/plain; charset=utf-8"}};
  return kb_httpd_respond(req, status, h, 1, text, len);
}

int kb_k8s_wants_table(kb_httpd_req *req) {
  const char *a = kb_httpd_req_header(req, "Accept");
  return a && strstr(a, "as=Table") != NULL;
}

k8s_table_include kb_k8s_table_include_of(const char *query) {
  char v[32];
  if (!kb_k8s_qget(query, "includeObject", v, sizeof v)) return K8S_TABLE_METADATA;
  return !strcmp(v, "None") ? K8S_TABLE_NONE
         : !strcmp(v, "Object") ? K8S_TABLE_OBJECT
                                : K8S_TABLE_METADATA;
}

/* ---- routing ----------------------------------------------------------------- */

static int seg_copy(char *out, size_t cap, const char *s, size_t n) {
  if (n >= cap) return -1;
  url_decode(s, n, out, cap);
  return 0;
}

/* Splits the path into at most 8 segments. */
static size_t split(const char *path, const char *seg[8], size_t len[8]) {
  size_t n = 0;
  for (const char *p = path; *p && n < 8;) {
    while (*p == '/') p++;
    if (!*p) break;
    const char *s = strchr(p, '/');
    seg[n] = p;
    len[n] = s ? (size_t)(s - p) : strlen(p);
    n++;
    p += len[n - 1];
  }
  return n;
}

#define SEG_IS(i, lit) (len[i] == sizeof(lit) - 1 && !strncmp(seg[i], lit, len[i]))

static void route_path(kb_k8s_api *api, const char *path, route *r) {
  memset(r, 0, sizeof *r);
  const char *seg[8];
  size_t len[8];
  size_t n = split(path, seg, len);
  if (n == 1 && SEG_IS(0, "version")) r->kind = R_VERSION;
  else if (n >= 1 && (SEG_IS(0, "healthz") || SEG_IS(0, "readyz") || SEG_IS(0, "livez")))
    r->kind = R_HEALTH;
  else if (n >= 2 && SEG_IS(0, "openapi") && SEG_IS(1, "v2")) r->kind = R_OPENAPI_V2;
  else if (n == 2 && SEG_IS(0, "openapi") && SEG_IS(1, "v3")) r->kind = R_OPENAPI_INDEX;
  else if (n >= 3 && SEG_IS(0, "openapi") && SEG_IS(1, "v3")) {
    r->kind = R_OPENAPI_DOC;
    snprintf(r->gvpath, sizeof r->gvpath, "%s", seg[2]);
  }
  if (r->kind != R_NONE || n == 0) return;
  size_t i;
  if (SEG_IS(0, "api")) {
    if (n == 1) {
      r->kind = R_API;
      return;
    }
    if (seg_copy(r->version, sizeof r->version, seg[1], len[1])) return;
    i = 2;
  } else if (SEG_IS(0, "apis")) {
    if (n == 1) {
      r->kind = R_APIS;
      return;
    }
    if (seg_copy(r->group, sizeof r->group, seg[1], len[1])) return;
    if (n == 2) {
      r->kind = R_GROUP;
      return;
    }
    if (seg_copy(r->version, sizeof r->version, seg[2], len[2])) return;
    i = 3;
  } else {
    return;
  }
  if (n == i) {
    r->kind = R_RESOURCES;
    return;
  }
  /* namespaces/NS/<resource>... unless it is the namespace object itself */
  if (SEG_IS(i, "namespaces") && n >= i + 3 && !r->group[0] && n == i + 3 &&
      (SEG_IS(i + 2, "status") || SEG_IS(i + 2, "finalize"))) {
    /* namespaces/NS/status */
  } else if (SEG_IS(i, "namespaces") && n >= i + 3) {
    if (seg_copy(r->ns, sizeof r->ns, seg[i + 1], len[i + 1])) return;
    i += 2;
  }
  if (seg_copy(r->resource, sizeof r->resource, seg[i], len[i])) return;
  if (n > i + 1 && seg_copy(r->name, sizeof r->name, seg[i + 1], len[i + 1])) return;
  if (n > i + 2 && seg_copy(r->sub, sizeof r->sub, seg[i + 2], len[i + 2])) return;
  if (n > i + 3) return;
  r->res = kb_k8s_store_lookup(api->st, r->group, r->version, r->resource);
  r->kind = r->res ? R_OBJECT : R_UNKNOWN_RES;
  if (r->res && !r->res->namespaced && r->ns[0]) r->kind = R_UNKNOWN_RES;
}

static const char *verb_of(const route *r, const char *method, const char *query) {
  if (r->kind != R_OBJECT) return r->kind == R_NONE ? "other" : "discovery";
  if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) {
    if (r->name[0]) return "get";
    return kb_k8s_qbool(query, "watch") ? "watch" : "list";
  }
  if (!strcmp(method, "POST")) return "create";
  if (!strcmp(method, "PUT")) return "update";
  if (!strcmp(method, "PATCH")) return "patch";
  if (!strcmp(method, "DELETE")) return r->name[0] ? "delete" : "deletecollection";
  return "other";
}

/* ---- streams ---------------------------------------------------------------- */

void kb_k8s_api_maybe_free(kb_k8s_api *api) {
  if (api->closing && api->handles == 0) free(api);
}

static void stream_closed(uv_handle_t *h) {
  kstream *ks = h->data;
  kb_k8s_api *api = ks->api;
  free(ks->ns);
  free(ks->pod);
  free(ks->container);
  free(ks);
  api->handles--;
  kb_k8s_api_maybe_free(api);
}

static void stream_finish(kstream *ks) {
  if (ks->ended) return;
  ks->ended = 1;
  kb_k8s_api *api = ks->api;
  if (ks->w) kb_k8s_watch_cancel(ks->w);
  ks->w = NULL;
  kb_httpd_req_on_abort(ks->req, NULL, NULL);
  kb_httpd_stream_end(ks->req);
  if (ks->prev) ks->prev->next = ks->next;
  else api->streams = ks->next;
  if (ks->next) ks->next->prev = ks->prev;
  api->n_streams--;
  if (ks->vtimer.clock) kb_vtimer_stop(&ks->vtimer);
  uv_timer_stop(&ks->timer);
  uv_close((uv_handle_t *)&ks->timer, stream_closed);
}

static void stream_abort(kb_httpd_req *req, void *ud) { stream_finish(ud); }

static void stream_timeout(uv_timer_t *t) { stream_finish(t->data); }
static void stream_vtimeout(kb_vtimer *t) { stream_finish(t->data); }

/* timeoutSeconds are real seconds to an outside client: on the clock they
 * last as long (in events mode, they pass as the clock does). */
static void stream_set_timeout(kstream *ks, double seconds) {
  kb_vclock *c = ks->api->latency_clock;
  if (!c) {
    uv_timer_start(&ks->timer, stream_timeout, (uint64_t)(seconds * 1000), 0);
    return;
  }
  kb_vtimer_init(c, &ks->vtimer, stream_vtimeout, ks);
  kb_vtimer_start(&ks->vtimer, seconds * kb_vclock_speed(c));
}

/* Writes one line; a client that cannot keep up is cut off. */
static void stream_line(kstream *ks, const char *text, size_t len, int in_callback) {
  if (ks->ended) return;
  int rc = kb_httpd_stream_write(ks->req, text, len);
  if (rc == 0 && !ks->follow) rc = kb_httpd_stream_write(ks->req, "\n", 1);
  if (rc || kb_httpd_req_write_queue(ks->req) > MAX_STREAM_QUEUE) {
    if (in_callback && !ks->w) ks->want_end = 1;
    else stream_finish(ks);
  }
}

static kstream *stream_new(kb_k8s_api *api, kb_httpd_req *req, const char *ctype) {
  kstream *ks = calloc(1, sizeof *ks);
  if (!ks) return NULL;
  ks->api = api;
  ks->req = req;
  uv_timer_init(api->loop, &ks->timer);
  ks->timer.data = ks;
  api->handles++;
  kb_httpd_header h[] = {{"Content-Type", ctype}, {"Cache-Control", "no-cache, private"}};
  kb_httpd_stream_begin(req, 200, h, 2);
  if (kb_httpd_req_on_abort(req, stream_abort, ks) == KB_HTTPD_EGONE) ks->want_end = 1;
  ks->next = api->streams;
  if (api->streams) api->streams->prev = ks;
  api->streams = ks;
  api->n_streams++;
  return ks;
}

static void watch_event(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  kstream *ks = ud;
  if (ks->ended || ks->want_end) return;
  if (type == KB_K8S_BOOKMARK && ks->table) return; /* Tables carry no bookmarks */
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", kb_k8s_event_name(type));
  cJSON *o;
  if (ks->table && type != KB_K8S_ERROR) {
    o = kb_k8s_table(ks->res, &obj, 1, kb_k8s_store_now(ks->api->st), ks->inc, !ks->cols_sent,
                  kb_k8s_meta_str(obj, "resourceVersion"), NULL);
    ks->cols_sent = 1;
  } else {
    o = cJSON_Duplicate(obj, 1);
  }
  cJSON_AddItemToObject(ev, "object", o);
  char *text = cJSON_PrintUnformatted(ev);
  cJSON_Delete(ev);
  if (text) stream_line(ks, text, strlen(text), 1);
  free(text);
  if (type == KB_K8S_ERROR) {
    if (ks->w) stream_finish(ks);
    else ks->want_end = 1;
  }
}

/* A resourceVersion option must be a number, as the apiserver's is: 400
 * otherwise (not an empty list). Returns 0 when rv is fine. */
int kb_k8s_refuse_bad_rv(kb_httpd_req *req, const kb_k8s_res *res, const char *rv) {
  for (const char *p = rv; *p; p++) {
    if (*p < '0' || *p > '9') {
      kb_k8s_error err;
      kb_k8s_error_set(&err, 400, "BadRequest", "invalid resource version \"%.100s\": strconv.ParseUint: "
                       "parsing \"%.100s\": invalid syntax", rv, rv);
      kb_k8s_send_error(req, &err, res);
      return -1;
    }
  }
  return 0;
}

void kb_k8s_do_watch(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query) {
  char rv[64], labels[1024], fields[1024], tmo[32];
  kb_k8s_qget(query, "resourceVersion", rv, sizeof rv);
  if (kb_k8s_refuse_bad_rv(req, r->res, rv)) return;
  kb_k8s_qget(query, "labelSelector", labels, sizeof labels);
  kb_k8s_qget(query, "fieldSelector", fields, sizeof fields);
  kb_k8s_watch_opts o = {r->ns, labels, fields, rv, kb_k8s_qbool(query, "sendInitialEvents"), 0};
  kb_k8s_error err;
  /* validate before the 200 goes out */
  kb_k8s_selector *sel = kb_k8s_selector_parse(labels, fields, r->res, &err);
  if (!sel) {
    kb_k8s_send_error(req, &err, r->res);
    return;
  }
  kb_k8s_selector_free(sel);
  kstream *ks = stream_new(api, req, "application/json");
  if (!ks) {
    kb_k8s_fail(req, r->res, 500, "InternalError", "out of memory");
    return;
  }
  ks->res = r->res;
  ks->table = kb_k8s_wants_table(req);
  ks->inc = kb_k8s_table_include_of(query);
  double timeout = DEFAULT_WATCH_TIMEOUT;
  if (kb_k8s_qget(query, "timeoutSeconds", tmo, sizeof tmo) && atof(tmo) > 0) timeout = atof(tmo);
  stream_set_timeout(ks, timeout);
  kb_k8s_watch *w = kb_k8s_watch_start(api->st, r->res, &o, watch_event, ks, &err);
  ks->w = w;
  if (!w || ks->want_end || kb_k8s_watch_done(w)) stream_finish(ks);
}

/* ---- pod logs ---------------------------------------------------------------- */

/* Complete new lines of a followed log, without their timestamps unless
 * asked for. */
static void follow_flush(kstream *ks) {
  size_t n;
  const char *raw = kb_k8s_log_raw(ks->api->st, ks->ns, ks->pod, ks->container, ks->offset, &n);
  const char *last = n ? memrchr(raw, '\n', n) : NULL;
  if (!last) return;
  size_t upto = (size_t)(last - raw) + 1;
  for (size_t i = 0; i < upto && !ks->ended;) {
    const char *nl = memchr(raw + i, '\n', upto - i);
    size_t end = (size_t)(nl - raw) + 1;
    const char *sp = memchr(raw + i, ' ', end - i);
    size_t from = ks->timestamps || !sp ? i : (size_t)(sp - raw) + 1;
    stream_line(ks, raw + from, end - from, 0);
    i = end;
  }
  ks->offset += upto;
}

static void log_appended(void *ud, const char *ns, const char *pod, const char *container) {
  kb_k8s_api *api = ud;
  for (kstream *ks = api->streams, *next; ks; ks = next) {
    next = ks->next;
    if (ks->follow && !strcmp(ks->ns, ns) && !strcmp(ks->pod, pod) &&
        !strcmp(ks->container, container ? container : ""))
      follow_flush(ks);
  }
}

static void follow_pod_event(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  kstream *ks = ud;
  const char *phase = cJSON_GetStringValue(kb_k8s_path(obj, "status.phase"));
  int done = type == KB_K8S_DELETED || type == KB_K8S_ERROR ||
             (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")));
  if (!done || ks->ended) return;
  follow_flush(ks);
  if (ks->w) stream_finish(ks);
  else ks->want_end = 1;
}

void kb_k8s_do_log(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query) {
  char container[256], tail[32], limit[32], since[32];
  kb_k8s_log_opts o = {.tail_lines = -1};
  if (kb_k8s_qget(query, "container", container, sizeof container) && container[0])
    o.container = container;
  if (kb_k8s_qget(query, "tailLines", tail, sizeof tail)) o.tail_lines = atol(tail);
  if (kb_k8s_qget(query, "limitBytes", limit, sizeof limit)) o.limit_bytes = atol(limit);
  if (kb_k8s_qget(query, "sinceSeconds", since, sizeof since)) o.since_seconds = atof(since);
  o.timestamps = kb_k8s_qbool(query, "timestamps");
  char *text;
  size_t len;
  kb_k8s_error err;
  if (kb_k8s_log_read(api->st, r->ns, r->name, &o, &text, &len, &err)) {
    kb_k8s_send_error(req, &err, r->res);
    return;
  }
  const cJSON *pod = kb_k8s_peek(api->st, r->res, r->ns, r->name);
  const char *phase = cJSON_GetStringValue(kb_k8s_path(pod, "status.phase"));
  int finished = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
  if (!kb_k8s_qbool(query, "follow") || finished) {
    send_text(req, 200, text, len);
    free(text);
    return;
  }
  kstream *ks = stream_new(api, req, "text/plain");
  if (!ks) {
    free(text);
    kb_k8s_fail(req, r->res, 500, "InternalError", "out of memory");
    return;
  }
  ks->follow = 1;
  ks->timestamps = o.timestamps;
  ks->res = r->res;
  /* the container the read picked: the only one when none was named */
  const char *cname = o.container;
  if (!cname) cname = cJSON_GetStringValue(kb_k8s_path(pod, "spec.containers[0].name"));
  ks->ns = strdup(r->ns[0] ? r->ns : "default");
  ks->pod = strdup(r->name);
  ks->container = strdup(cname ? cname : "");
  ks->offset = kb_k8s_log_size(api->st, ks->ns, ks->pod, ks->container);
  if (len) stream_line(ks, text, len, 0);
  free(text);
  char fs[300];
  snprintf(fs, sizeof fs, "metadata.name=%s", r->name);
  kb_k8s_watch_opts wo = {.ns = ks->ns, .field_selector = fs, .no_initial = 1};
  if (!ks->ended) {
    ks->w = kb_k8s_watch_start(api->st, r->res, &wo, follow_pod_event, ks, &err);
    if (!ks->w || !ks->ns || !ks->pod || !ks->container || ks->want_end) stream_finish(ks);
  }
}

/* ---- non-resource paths ---------------------------------------------------------- */

static void do_version(kb_httpd_req *req) {
  cJSON *v = cJSON_CreateObject();
  cJSON_AddStringToObject(v, "major", "1");
  cJSON_AddStringToObject(v, "minor", "32");
  cJSON_AddStringToObject(v, "gitVersion", "v1.32.0-kbrun-sim");
  cJSON_AddStringToObject(v, "gitCommit", "0000000000000000000000000000000000000000");
  cJSON_AddStringToObject(v, "gitTreeState", "clean");
  cJSON_AddStringToObject(v, "buildDate", "2024-12-11T00:00:00Z");
  cJSON_AddStringToObject(v, "goVersion", "go1.23.3");
  cJSON_AddStringToObject(v, "compiler", "gc");
  cJSON_AddStringToObject(v, "platform", "linux/amd64");
  kb_k8s_send_json(req, 200, v, NULL);
}

static void not_found_path(kb_httpd_req *req) {
  kb_k8s_fail(req, NULL, 404, "NotFound", "the server could not find the requested resource");
}

static void execute(kb_k8s_api *api, kb_httpd_req *req) {
  route r;
  route_path(api, kb_httpd_req_path(req), &r);
  const char *query = kb_httpd_req_query(req);
  const char *m = kb_httpd_req_method(req);
  int get = !strcmp(m, "GET") || !strcmp(m, "HEAD");
  if (r.kind == R_UNKNOWN_RES) { /* an unknown group, version or resource: 404 for any verb */
    not_found_path(req);
    return;
  }
  if ((r.kind == R_GROUP || r.kind == R_RESOURCES) && !get) {
    cJSON *d = r.kind == R_GROUP ? kb_k8s_discovery_group(api->st, r.group)
                                 : kb_k8s_discovery_resources(api->st, r.group, r.version);
    int served = d != NULL;
    cJSON_Delete(d);
    if (!served) {
      not_found_path(req);
      return;
    }
  }
  if (r.kind != R_OBJECT && r.kind != R_NONE && !get) {
    kb_k8s_fail(req, NULL, 405, "MethodNotAllowed",
         "the server does not allow this method on the requested resource");
    return;
  }
  cJSON *doc = NULL;
  switch (r.kind) {
  case R_VERSION: do_version(req); return;
  case R_HEALTH: send_text(req, 200, "ok", 2); return;
  case R_API: {
    char addr[64];
    snprintf(addr, sizeof addr, "%s", kb_httpd_req_header(req, "Host") ? kb_httpd_req_header(req, "Host") : "127.0.0.1");
    doc = kb_k8s_discovery_api(addr);
    break;
  }
  case R_APIS: doc = kb_k8s_discovery_groups(api->st); break;
  case R_GROUP: doc = kb_k8s_discovery_group(api->st, r.group); break;
  case R_RESOURCES: doc = kb_k8s_discovery_resources(api->st, r.group, r.version); break;
  case R_OPENAPI_INDEX: doc = kb_k8s_openapi_index(api->st); break;
  case R_OPENAPI_DOC: {
    /* "apis/batch/v1" from the path after /openapi/v3/ */
    const char *p = strstr(kb_httpd_req_path(req), "/openapi/v3/") + 12;
    doc = kb_k8s_openapi_doc(api->st, p);
    break;
  }
  case R_OPENAPI_V2: break;
  case R_OBJECT: kb_k8s_do_object(api, req, &r, query); return;
  case R_UNKNOWN_RES:
  case R_NONE: break;
  }
  if (doc) kb_k8s_send_json(req, 200, doc, NULL);
  else not_found_path(req);
}

/* ---- hooks and entry points ------------------------------------------------------- */

/* Unlinks and frees d (its timer stopped). */
static void delay_unlink(kdelay *d) {
  if (d->prev) d->prev->next = d->next;
  else d->api->delays = d->next;
  if (d->next) d->next->prev = d->prev;
  kb_vtimer_stop(&d->timer);
  free(d);
}

static int defer(kb_k8s_api *api, kb_httpd_req *req, double seconds, int fresh_wait);

/* A list or watch from a resourceVersion beyond the store's: the
 * apiserver's watch cache waits up to 3 s for it, then answers 504
 * "Too large resource version" (cause ResourceVersionTooLarge). 1 when the
 * request was deferred or answered. */
#define FRESH_WAIT_SECONDS 3.0

static int too_large_rv(kb_k8s_api *api, kb_httpd_req *req, int waited) {
  char rv[64];
  if (strcmp(kb_httpd_req_method(req), "GET") || !kb_k8s_qget(kb_httpd_req_query(req), "resourceVersion", rv, sizeof rv) ||
      !*rv || strspn(rv, "0123456789") != strlen(rv) || strlen(rv) > 19)
    return 0;
  unsigned long long want = strtoull(rv, NULL, 10), now = kb_k8s_store_rv(api->st);
  if (want <= now) return 0;
  if (!waited && defer(api, req, FRESH_WAIT_SECONDS, 1)) return 1;
  kb_k8s_error err;
  kb_k8s_error_set(&err, 504, "Timeout", "Too large resource version: %llu, current: %llu", want, now);
  kb_k8s_error_cause(&err, "ResourceVersionTooLarge", "Too large resource version", "");
  kb_k8s_send_error(req, &err, NULL);
  return 1;
}

static void delay_fired(kb_vtimer *t) {
  kdelay *d = t->data;
  kb_k8s_api *api = d->api;
  kb_httpd_req *req = d->req;
  int fresh_wait = d->fresh_wait;
  delay_unlink(d);
  if (fresh_wait && too_large_rv(api, req, 1)) return;
  execute(api, req);
}

static void send_fault(kb_httpd_req *req, const kb_k8s_res *res, const kb_k8s_fault *f) {
  if (f->kind == KB_K8S_FAULT_RESET) {
    kb_httpd_reset(req, NULL, 0);
    return;
  }
  int code = f->status >= 400 && f->status <= 599 ? f->status : 503;
  const char *reason = code == 429 ? "TooManyRequests" : code == 503 ? "ServiceUnavailable"
                       : code == 504 ? "Timeout" : code == 500 ? "InternalError" : "BadRequest";
  kb_k8s_error e;
  kb_k8s_error_set(&e, code, reason, "%s",
                   f->message[0] ? f->message
                   : code == 429 ? "Too many requests, please try again later."
                                 : "the server is currently unable to handle the request");
  cJSON *s = kb_k8s_status_json(&e, res);
  char ra[32] = "";
  if (f->retry_after > 0) {
    snprintf(ra, sizeof ra, "%.0f", f->retry_after < 1 ? 1 : f->retry_after);
    cJSON *d = cJSON_GetObjectItemCaseSensitive(s, "details");
    if (!d) d = cJSON_AddObjectToObject(s, "details");
    cJSON_AddNumberToObject(d, "retryAfterSeconds", atof(ra));
  }
  char *text = cJSON_PrintUnformatted(s);
  cJSON_Delete(s);
  kb_httpd_header h[] = {{"Content-Type", "application/json"}, {"Retry-After", ra}};
  kb_httpd_respond(req, code, h, ra[0] ? 2 : 1, text ? text : "", text ? strlen(text) : 0);
  free(text);
}

int kb_k8s_api_handle(kb_k8s_api *api, kb_httpd_req *req) {
  route r;
  const char *query = kb_httpd_req_query(req);
  route_path(api, kb_httpd_req_path(req), &r);
  if (r.kind == R_NONE) return 0;
  if (kb_log_enabled(KB_LOG_DEBUG)) {
    const char *a = kb_httpd_req_header(req, "Accept"), *ct = kb_httpd_req_header(req, "Content-Type");
    kb_log(KB_LOG_DEBUG, "k8s %s %s accept=%s content-type=%s", kb_httpd_req_method(req),
           kb_httpd_req_target(req), a ? a : "-", ct ? ct : "-");
  }
  kb_k8s_req_info info = {kb_httpd_req_method(req), verb_of(&r, kb_httpd_req_method(req), query),
                          r.res, r.ns, r.name, r.sub,
                          r.res ? kb_k8s_store_count(api->st, r.res, r.ns) : 0};
  if (api->fault) {
    kb_k8s_fault f;
    memset(&f, 0, sizeof f);
    api->fault(api->fault_ud, &info, &f);
    if (f.kind != KB_K8S_FAULT_NONE) {
      send_fault(req, r.res, &f);
      return 1;
    }
  }
  double delay = api->latency ? api->latency(api->latency_ud, &info) : 0;
  if (too_large_rv(api, req, 0)) return 1;
  if (delay > 0 && defer(api, req, delay, 0)) return 1;
  execute(api, req);
  return 1;
}

/* Runs the request after `seconds` on the latency clock; 0 when it cannot
 * be deferred (no clock, closing, out of memory). */
static int defer(kb_k8s_api *api, kb_httpd_req *req, double seconds, int fresh_wait) {
  if (!api->latency_clock || api->closing) return 0;
  kdelay *d = calloc(1, sizeof *d);
  if (!d) return 0;
  kb_vtimer_init(api->latency_clock, &d->timer, delay_fired, d);
  if (kb_vtimer_start(&d->timer, seconds) != 0) {
    free(d);
    return 0;
  }
  d->api = api;
  d->req = req;
  d->fresh_wait = fresh_wait;
  d->next = api->delays;
  if (api->delays) api->delays->prev = d;
  api->delays = d;
  return 1;
}

void kb_k8s_api_handler(kb_httpd_req *req, void *ud) {
  if (!kb_k8s_api_handle(ud, req)) not_found_path(req);
}

kb_k8s_api *kb_k8s_api_new(uv_loop_t *loop, kb_k8s_store *st) {
  kb_k8s_api *api = calloc(1, sizeof *api);
  if (!api) return NULL;
  api->loop = loop;
  api->st = st;
  kb_k8s_log_set_listener(st, log_appended, api);
  return api;
}

void kb_k8s_api_set_latency(kb_k8s_api *api, kb_vclock *clock, kb_k8s_latency_fn fn, void *ud) {
  api->latency = clock ? fn : NULL;
  api->latency_ud = ud;
  api->latency_clock = clock;
}

void kb_k8s_api_set_fault(kb_k8s_api *api, kb_k8s_fault_fn fn, void *ud) {
  api->fault = fn;
  api->fault_ud = ud;
}

size_t kb_k8s_api_streams(const kb_k8s_api *api) { return api->n_streams; }

uint64_t kb_k8s_api_list_slices(const kb_k8s_api *api) { return api->list_slices; }
double kb_k8s_api_longest_slice(const kb_k8s_api *api) { return api->longest_slice; }

void kb_k8s_api_set_authorization(kb_k8s_api *api, int deny_all) { api->deny_all = deny_all; }

void kb_k8s_api_free(kb_k8s_api *api) {
  if (!api || api->closing) return;
  api->closing = 1;
  kb_k8s_log_set_listener(api->st, NULL, NULL);
  while (api->streams) stream_finish(api->streams);
  kb_k8s_lists_end(api);
  while (api->delays) {
    kdelay *d = api->delays;
    kb_httpd_req *req = d->req;
    delay_unlink(d);
    kb_k8s_fail(req, NULL, 503, "ServiceUnavailable", "the simulated apiserver is shutting down");
  }
  kb_k8s_api_maybe_free(api);
}
