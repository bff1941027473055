/* Objects through the Kubernetes REST layer: bodies (JSON, YAML,
 * protobuf) and fieldValidation, lists, deletes, creates, updates,
 * patches and server-side apply with their field managers, and the
 * subresources (status, scale, pods/eviction, the self reviews). Routing,
 * responses and streams are k8s_api.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_api_internal.h"
#include "k8s_pdb.h"
#include "k8s_subres.h"
#include "kb/k8s_proto.h"
#include "kb/yaml.h"

/* ---- objects ---------------------------------------------------------------- */

/* A request body as JSON, by its Content-Type as the apiserver negotiates
 * it: none is JSON; JSON, YAML and (for built-in kinds, and for
 * DeleteOptions on any resource) Kubernetes protobuf are read; any other
 * type (CBOR, text/plain, ...) is 415 with the apiserver's wording. */
static cJSON *parse_body(kb_httpd_req *req, int protobuf_ok, kb_k8s_error *err) {
  size_t len;
  const char *body = kb_httpd_req_body(req, &len);
  const char *ct = kb_httpd_req_header(req, "Content-Type");
  size_t tl = ct ? strcspn(ct, ";") : 0;
  while (tl && (ct[tl - 1] == ' ' || ct[tl - 1] == '\t')) tl--;
  cJSON *doc;
  if (ct && tl && kb_k8s_proto_media(ct) && protobuf_ok) {
    char msg[KB_K8S_PROTO_ERRLEN];
    doc = kb_k8s_proto_decode(body, len, msg, sizeof msg);
    if (!doc) kb_k8s_error_set(err, 400, "BadRequest", "%s", msg);
  } else if (ct && tl && memmem(ct, tl, "yaml", 4)) {
    kb_yaml_error ye;
    doc = kb_yaml_parse(body, len, &ye);
    if (!doc) kb_k8s_error_set(err, 400, "BadRequest", "invalid YAML: %s", ye.message);
  } else if (!ct || !tl || (tl == 16 && !strncasecmp(ct, "application/json", 16))) {
    doc = cJSON_ParseWithLength(body, len);
    if (!doc)
      kb_k8s_error_set(err, 400, "BadRequest",
                       "the request body is not valid JSON near offset %zu",
                       (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - body : 0));
  } else {
    kb_k8s_error_set(err, 415, "UnsupportedMediaType",
                     "the body of the request was in an unknown format - accepted media types "
                     "include: application/json, application/yaml%s",
                     protobuf_ok ? ", " KB_K8S_PROTO_MEDIA : "");
    doc = NULL;
  }
  return doc;
}

/* fieldValidation (Strict, Warn, Ignore) against the kind's schema: 1 if
 * the request was answered (a Strict failure). Custom types preserve
 * unknown fields (their CRDs say so) and are not checked. */
static int field_validation(kb_httpd_req *req, const kb_k8s_res *res, const cJSON *obj,
                            const char *query, char *warning, size_t wn) {
  char mode[16], fields[1024];
  warning[0] = '\0';
  if (!kb_k8s_qget(query, "fieldValidation", mode, sizeof mode)) snprintf(mode, sizeof mode, "Warn");
  if (!strcmp(mode, "Ignore") || !kb_k8s_schema_unknown_fields(res, obj, fields, sizeof fields))
    return 0;
  if (!strcmp(mode, "Strict")) {
    kb_k8s_error e;
    kb_k8s_error_set(&e, 400, "BadRequest",
                     "%s in version \"%s\" cannot be handled as a %s: strict decoding error: %s",
                     res->kind, res->version, res->kind, fields);
    kb_k8s_send_error(req, &e, res);
    return 1;
  }
  /* Warn: the first, as a Warning header (299) kubectl prints, escaped;
   * a control character in a key never breaks the header */
  const char *end = strstr(fields, "\", ");
  size_t n = end ? (size_t)(end - fields) + 1 : strlen(fields), o = 0;
  if (wn < 16) return 0;
  o = (size_t)snprintf(warning, wn, "299 - \"");
  for (size_t i = 0; i < n && o + 4 < wn; i++) {
    char c = fields[i];
    if (c == '"' || c == '\\') warning[o++] = '\\';
    warning[o++] = (unsigned char)c < 0x20 ? '?' : c;
  }
  warning[o++] = '"';
  warning[o] = '\0';
  return 0;
}

static unsigned dry_run(const char *query) {
  char v[16];
  return kb_k8s_qget(query, "dryRun", v, sizeof v) && !strcmp(v, "All") ? KB_K8S_DRY_RUN : 0;
}

static void respond_obj(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query,
                        int status, cJSON *obj, const char *warning) {
  if (kb_k8s_wants_table(req) && !strcmp(kb_httpd_req_method(req), "GET")) {
    const cJSON *o = obj;
    cJSON *t = kb_k8s_table(r->res, &o, 1, kb_k8s_store_now(api->st), kb_k8s_table_include_of(query), 1,
                         kb_k8s_meta_str(obj, "resourceVersion"), NULL);
    cJSON_Delete(obj);
    obj = t;
  }
  kb_k8s_send_json(req, status, obj, warning && *warning ? warning : NULL);
}

static void do_list(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query) {
  char labels[1024], fields[1024], limit[32], cont[1024], rv[64];
  kb_k8s_qget(query, "resourceVersion", rv, sizeof rv);
  if (kb_k8s_refuse_bad_rv(req, r->res, rv)) return;
  kb_k8s_qget(query, "labelSelector", labels, sizeof labels);
  kb_k8s_qget(query, "fieldSelector", fields, sizeof fields);
  kb_k8s_qget(query, "limit", limit, sizeof limit);
  kb_k8s_qget(query, "continue", cont, sizeof cont);
  kb_k8s_list_opts o = {r->ns, labels, fields, (size_t)strtoul(limit, NULL, 10), cont};
  const char *accept = kb_httpd_req_header(req, "Accept");
  if (!kb_k8s_wants_table(req) && !(accept && kb_k8s_proto_media(accept))) {
    kb_k8s_list_sliced(api, req, r->res, &o); /* JSON: the stored text, in slices */
    return;
  }
  cJSON *list;
  kb_k8s_error err;
  if (kb_k8s_list(api->st, r->res, &o, &list, &err)) {
    kb_k8s_send_error(req, &err, r->res);
    return;
  }
  if (kb_k8s_wants_table(req)) {
    cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
    size_t n = (size_t)cJSON_GetArraySize(items), i = 0;
    const cJSON **objs = calloc(n ? n : 1, sizeof *objs);
    if (!objs) {
      cJSON_Delete(list);
      kb_k8s_fail(req, r->res, 500, "InternalError", "out of memory");
      return;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, items) objs[i++] = it;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(list, "metadata");
    cJSON *t = kb_k8s_table(r->res, objs, n, kb_k8s_store_now(api->st), kb_k8s_table_include_of(query), 1,
                         cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "resourceVersion")),
                         cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "continue")));
    free(objs);
    cJSON_Delete(list);
    list = t;
  }
  kb_k8s_send_json(req, 200, list, NULL);
}

static kb_k8s_propagation parse_propagation(const char *s) {
  if (!s) return KB_K8S_PROPAGATE_DEFAULT;
  if (!strcmp(s, "Orphan")) return KB_K8S_PROPAGATE_ORPHAN;
  if (!strcmp(s, "Background")) return KB_K8S_PROPAGATE_BACKGROUND;
  if (!strcmp(s, "Foreground")) return KB_K8S_PROPAGATE_FOREGROUND;
  return (kb_k8s_propagation)-1;
}

static void do_delete(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query) {
  size_t blen;
  kb_httpd_req_body(req, &blen);
  cJSON *opts = NULL;
  kb_k8s_error err;
  if (blen && !(opts = parse_body(req, 1, &err))) {
    kb_k8s_send_error(req, &err, r->res);
    return;
  }
  char qprop[32];
  const char *prop = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(opts, "propagationPolicy"));
  if (!prop && kb_k8s_qget(query, "propagationPolicy", qprop, sizeof qprop)) prop = qprop;
  const cJSON *orphan = cJSON_GetObjectItemCaseSensitive(opts, "orphanDependents");
  kb_k8s_delete_opts o = {parse_propagation(prop), NULL, NULL, dry_run(query)};
  if (cJSON_IsBool(orphan) && !prop)
    o.propagation = cJSON_IsTrue(orphan) ? KB_K8S_PROPAGATE_ORPHAN : KB_K8S_PROPAGATE_BACKGROUND;
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(opts, "preconditions");
  o.precondition_uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pre, "uid"));
  o.precondition_rv = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pre, "resourceVersion"));
  const cJSON *dr;
  cJSON_ArrayForEach(dr, cJSON_GetObjectItemCaseSensitive(opts, "dryRun"))
    if (cJSON_IsString(dr) && !strcmp(dr->valuestring, "All")) o.flags |= KB_K8S_DRY_RUN;
  if ((int)o.propagation < 0) {
    char msg[128];
    snprintf(msg, sizeof msg, "propagationPolicy: Unsupported value: \"%s\"", prop);
    cJSON_Delete(opts);
    kb_k8s_fail(req, r->res, 400, "BadRequest", msg);
    return;
  }
  if (!r->name[0]) { /* deletecollection */
    char labels[1024], fields[1024];
    kb_k8s_qget(query, "labelSelector", labels, sizeof labels);
    kb_k8s_qget(query, "fieldSelector", fields, sizeof fields);
    kb_k8s_list_opts lo = {r->ns, labels, fields, 0, NULL};
    cJSON *list;
    if (kb_k8s_list(api->st, r->res, &lo, &list, &err)) {
      cJSON_Delete(opts);
      kb_k8s_send_error(req, &err, r->res);
      return;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items"))
      kb_k8s_delete(api->st, r->res, kb_k8s_meta_str(it, "namespace"), kb_k8s_meta_str(it, "name"), &o,
                    NULL, NULL);
    cJSON_Delete(opts);
    kb_k8s_send_json(req, 200, list, NULL);
    return;
  }
  cJSON *out = NULL;
  int rc = kb_k8s_delete(api->st, r->res, r->ns, r->name, &o, &out, &err);
  cJSON_Delete(opts);
  if (rc < 0) kb_k8s_send_error(req, &err, r->res);
  else kb_k8s_send_json(req, rc == 1 ? 202 : 200, out, NULL);
}

/* ---- the scale subresource and the self reviews (k8s_subres.c) ---- */

static int patch_type(const char *ct, kb_k8s_patch_type *type) {
  if (ct && !strncmp(ct, "application/merge-patch+json", 28)) *type = KB_K8S_PATCH_MERGE;
  else if (ct && !strncmp(ct, "application/json-patch+json", 27)) *type = KB_K8S_PATCH_JSON;
  else if (ct && !strncmp(ct, "application/strategic-merge-patch+json", 38))
    *type = KB_K8S_PATCH_STRATEGIC;
  else return -1;
  return 0;
}

static void do_scale(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query) {
  const char *m = kb_httpd_req_method(req);
  kb_k8s_error err;
  cJSON *out = NULL;
  int rc;
  if (!strcmp(m, "GET") || !strcmp(m, "HEAD")) {
    out = kb_k8s_scale_get(api->st, r->res, r->ns, r->name, &err);
    rc = out ? 0 : -err.code;
  } else if (!strcmp(m, "PUT")) {
    cJSON *body = parse_body(req, 1, &err);
    rc = body ? kb_k8s_scale_put(api->st, r->res, r->ns, r->name, body, dry_run(query), &out, &err)
              : -err.code;
    cJSON_Delete(body);
  } else if (!strcmp(m, "PATCH")) {
    kb_k8s_patch_type type;
    size_t len;
    const char *body = kb_httpd_req_body(req, &len);
    if (patch_type(kb_httpd_req_header(req, "Content-Type"), &type))
      rc = kb_k8s_error_set(&err, 415, "UnsupportedMediaType", "the patch type of this request "
                            "is not supported on /scale (use a merge, JSON or strategic merge patch)");
    else
      rc = kb_k8s_scale_patch(api->st, r->res, r->ns, r->name, type, body, len, dry_run(query), &out,
                           &err);
  } else {
    rc = kb_k8s_error_set(&err, 405, "MethodNotAllowed",
                          "the server does not allow this method on the requested resource");
  }
  if (rc) kb_k8s_send_error(req, &err, r->res);
  else kb_k8s_send_json(req, 200, out, NULL);
}

static void do_review(kb_k8s_api *api, kb_httpd_req *req, const route *r) {
  kb_k8s_error err;
  if (strcmp(kb_httpd_req_method(req), "POST") || r->name[0]) {
    kb_k8s_fail(req, r->res, 405, "MethodNotAllowed",
         "the server does not allow this method on the requested resource");
    return;
  }
  cJSON *body = parse_body(req, 1, &err);
  cJSON *out = body ? kb_k8s_review(r->res, body, api->deny_all, &err) : NULL;
  cJSON_Delete(body);
  if (out) kb_k8s_send_json(req, 201, out, NULL);
  else kb_k8s_send_error(req, &err, r->res);
}

/* POST pods/{name}/eviction: the budget check of k8s_pdb.c, then the
 * pod's delete; 201 with a Success Status, or the refusal's Status. */
static void do_evict(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query) {
  kb_k8s_error err;
  cJSON *body = parse_body(req, 1, &err);
  if (!body) {
    kb_k8s_send_error(req, &err, r->res);
    return;
  }
  cJSON *out = NULL;
  int rc = kb_k8s_pod_evict(api->st, r->ns, r->name, body, dry_run(query), &out, &err);
  cJSON_Delete(body);
  if (rc == 0) kb_k8s_send_json(req, 201, out, NULL);
  else if (out) kb_k8s_send_json(req, -rc, out, NULL);
  else kb_k8s_send_error(req, &err, r->res);
}

/* Server-side apply: the body (YAML or JSON) is the object as the field
 * manager wants it (kb_k8s_apply); 201 when it created the object. */
static void do_apply(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query,
                     unsigned flags) {
  kb_k8s_error err;
  size_t len;
  const char *body = kb_httpd_req_body(req, &len);
  kb_yaml_error ye;
  cJSON *config = kb_yaml_parse(body, len, &ye);
  if (!config) {
    kb_k8s_error_set(&err, 400, "BadRequest", "error decoding YAML: %s", ye.message);
    kb_k8s_send_error(req, &err, r->res);
    return;
  }
  char manager[128] = "", force[8] = "", warning[400] = "";
  kb_k8s_qget(query, "fieldManager", manager, sizeof manager);
  kb_k8s_qget(query, "force", force, sizeof force);
  if (cJSON_IsObject(config) &&
      field_validation(req, r->res, config, query, warning, sizeof warning)) {
    cJSON_Delete(config);
    return;
  }
  cJSON *out;
  int created = 0;
  int rc = kb_k8s_apply(api->st, r->res, r->ns, r->name, config, manager, !strcmp(force, "true"),
                        flags, &out, &created, &err);
  cJSON_Delete(config);
  if (rc) kb_k8s_send_error(req, &err, r->res);
  else respond_obj(api, req, r, query, created ? 201 : 200, out, warning);
}

/* The field manager of a write: fieldManager, else the client's name from
 * its User-Agent ("kubectl/v1.32.4 (linux/amd64) ..." -> "kubectl"), as
 * the apiserver derives it. */
static void field_manager(kb_httpd_req *req, const char *query, char *out, size_t n) {
  if (kb_k8s_qget(query, "fieldManager", out, n) && *out) return;
  const char *ua = kb_httpd_req_header(req, "User-Agent");
  size_t len = ua ? strcspn(ua, "/ ") : 0;
  snprintf(out, n, "%.*s", (int)(len < 120 ? len : 120), len ? ua : "unknown");
}

/* POST, PUT, PATCH of an object, recorded in its managedFields under the
 * request's field manager. */
static void do_write(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query,
                     unsigned flags) {
  const char *m = kb_httpd_req_method(req);
  const kb_k8s_res *res = r->res;
  kb_k8s_error err;
  char warning[400] = "";
  int create = !strcmp(m, "POST") && !r->name[0];
  if (create || (!strcmp(m, "PUT") && r->name[0])) {
    cJSON *body = parse_body(req, !res->custom, &err);
    if (!body) {
      kb_k8s_send_error(req, &err, res);
      return;
    }
    if (cJSON_IsObject(body) && field_validation(req, res, body, query, warning, sizeof warning)) {
      cJSON_Delete(body);
      return;
    }
    cJSON *out;
    int rc = create ? kb_k8s_create(api->st, res, r->ns, body, flags, &out, &err)
                    : kb_k8s_update(api->st, res, r->ns, r->name, body, flags, &out, &err);
    cJSON_Delete(body);
    if (rc) kb_k8s_send_error(req, &err, res);
    else respond_obj(api, req, r, query, create ? 201 : 200, out, warning);
    return;
  }
  if (!strcmp(m, "PATCH") && r->name[0]) {
    const char *ct = kb_httpd_req_header(req, "Content-Type");
    kb_k8s_patch_type type;
    if (ct && !strncmp(ct, "application/apply-patch+yaml", 28)) {
      do_apply(api, req, r, query, flags);
      return;
    }
    if (patch_type(ct, &type)) {
      char msg[300];
      snprintf(msg, sizeof msg,
               "the body of the request was in an unknown format - accepted media types "
               "include: application/json-patch+json, application/merge-patch+json, "
               "application/apply-patch+yaml%s",
               res->custom ? "" : ", application/strategic-merge-patch+json");
      kb_k8s_fail(req, res, 415, "UnsupportedMediaType", msg);
      return;
    }
    size_t len;
    const char *body = kb_httpd_req_body(req, &len);
    cJSON *out;
    int rc = kb_k8s_patch(api->st, res, r->ns, r->name, type, body, len, flags, &out, &err);
    if (rc) kb_k8s_send_error(req, &err, res);
    else respond_obj(api, req, r, query, 200, out, NULL);
    return;
  }
  char msg[128];
  snprintf(msg, sizeof msg, "the server does not allow this method on the requested resource");
  kb_k8s_fail(req, res, 405, "MethodNotAllowed", msg);
}

void kb_k8s_do_object(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query) {
  const char *m = kb_httpd_req_method(req);
  const kb_k8s_res *res = r->res;
  kb_k8s_error err;
  int is_get = !strcmp(m, "GET") || !strcmp(m, "HEAD");
  if (kb_k8s_is_review(res)) {
    do_review(api, req, r);
    return;
  }
  if (!strcmp(r->sub, "scale") && r->name[0] && kb_k8s_has_scale(res)) {
    do_scale(api, req, r, query);
    return;
  }
  int pods = !strcmp(res->resource, "pods") && !res->group[0];
  if (pods && !strcmp(r->sub, "eviction") && !strcmp(m, "POST")) {
    do_evict(api, req, r, query);
    return;
  }
  if (r->sub[0] && strcmp(r->sub, "status") && !(is_get && !strcmp(r->sub, "log") && pods)) {
    char msg[300];
    snprintf(msg, sizeof msg, "the server could not find the requested resource");
    kb_k8s_fail(req, res, 404, "NotFound", msg);
    return;
  }
  if (!strcmp(r->sub, "status") && !res->status_subresource) {
    kb_k8s_fail(req, res, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  unsigned flags = dry_run(query) | (!strcmp(r->sub, "status") ? KB_K8S_STATUS : 0);
  if (is_get) {
    if (!strcmp(r->sub, "log")) {
      kb_k8s_do_log(api, req, r, query);
    } else if (r->name[0]) {
      cJSON *o = kb_k8s_get(api->st, res, r->ns, r->name, &err);
      if (!o) kb_k8s_send_error(req, &err, res);
      else respond_obj(api, req, r, query, 200, o, NULL);
    } else if (kb_k8s_qbool(query, "watch")) {
      kb_k8s_do_watch(api, req, r, query);
    } else {
      do_list(api, req, r, query);
    }
    return;
  }
  if (!strcmp(m, "DELETE")) {
    do_delete(api, req, r, query);
    return;
  }
  char manager[128];
  field_manager(req, query, manager, sizeof manager);
  kb_k8s_store_set_manager(api->st, manager);
  do_write(api, req, r, query, flags);
  kb_k8s_store_set_manager(api->st, NULL);
}

