/* Discovery (the legacy APIGroupList flow) and OpenAPI v3 documents,
 * generated from the store's resource types.
 *
 * A built-in kind's schema is the real one (k8s_schema.c: the Kubernetes
 * 1.32 definitions and all they reference), so `kubectl explain` reads the
 * nested fields and their descriptions; a custom type's is loose (its CRD
 * preserves unknown fields). Every write operation declares the
 * fieldValidation parameter, so kubectl leaves validation to the server
 * (fieldValidation=Strict, checked against the same schemas). PATCH
 * operations list JSON and merge patch only; see operation(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_table.h"
#include "kb/fnv.h"

/* ---- discovery --------------------------------------------------------------- */

cJSON *kb_k8s_discovery_api(const char *server_address) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "kind", "APIVersions");
  cJSON_AddItemToObject(d, "versions", cJSON_CreateStringArray((const char *[]){"v1"}, 1));
  cJSON *cidr = cJSON_CreateObject();
  cJSON_AddStringToObject(cidr, "clientCIDR", "0.0.0.0/0");
  cJSON_AddStringToObject(cidr, "serverAddress", server_address);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "serverAddressByClientCIDRs"), cidr);
  return d;
}

static cJSON *group_entry(const kb_k8s_store *st, const char *group) {
  cJSON *g = cJSON_CreateObject();
  cJSON_AddStringToObject(g, "name", group);
  cJSON *versions = cJSON_AddArrayToObject(g, "versions");
  const char *first = NULL;
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    if (strcmp(r->group, group)) continue;
    int seen = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, versions) seen |= !strcmp(cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(v, "version")), r->version);
    if (seen) continue;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "groupVersion", r->api_version);
    cJSON_AddStringToObject(e, "version", r->version);
    cJSON_AddItemToArray(versions, e);
    if (!first) first = r->api_version;
  }
  if (!first) {
    cJSON_Delete(g);
    return NULL;
  }
  cJSON *pref = cJSON_AddObjectToObject(g, "preferredVersion");
  cJSON_AddStringToObject(pref, "groupVersion", first);
  cJSON_AddStringToObject(pref, "version", strchr(first, '/') + 1);
  return g;
}

cJSON *kb_k8s_discovery_groups(const kb_k8s_store *st) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "kind", "APIGroupList");
  cJSON_AddStringToObject(d, "apiVersion", "v1");
  cJSON *groups = cJSON_AddArrayToObject(d, "groups");
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    if (!r->group[0]) continue;
    int seen = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, groups) seen |= !strcmp(cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(g, "name")), r->group);
    if (!seen) cJSON_AddItemToArray(groups, group_entry(st, r->group));
  }
  return d;
}

cJSON *kb_k8s_discovery_group(const kb_k8s_store *st, const char *group) {
  cJSON *g = group_entry(st, group);
  if (!g) return NULL;
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "kind", "APIGroup");
  cJSON_AddStringToObject(d, "apiVersion", "v1");
  for (cJSON *c = g->child; c;) {
    cJSON *next = c->next;
    cJSON_AddItemToObject(d, c->string, cJSON_DetachItemViaPointer(g, c));
    c = next;
  }
  cJSON_Delete(g);
  return d;
}

static cJSON *csv_array(const char *csv) {
  cJSON *a = cJSON_CreateArray();
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s", csv);
  for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save))
    cJSON_AddItemToArray(a, cJSON_CreateString(t));
  return a;
}

static cJSON *api_resource(const kb_k8s_res *r, const char *sub, const char *const *verbs,
                           int nverbs) {
  char name[160];
  snprintf(name, sizeof name, "%s%s%s", r->resource, sub ? "/" : "", sub ? sub : "");
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "name", name);
  cJSON_AddStringToObject(e, "singularName", sub ? "" : r->singular);
  cJSON_AddBoolToObject(e, "namespaced", r->namespaced);
  cJSON_AddStringToObject(e, "kind", r->kind);
  cJSON_AddItemToObject(e, "verbs", cJSON_CreateStringArray(verbs, nverbs));
  if (!sub && r->short_names[0]) cJSON_AddItemToObject(e, "shortNames", csv_array(r->short_names));
  if (!sub && r->categories[0]) cJSON_AddItemToObject(e, "categories", csv_array(r->categories));
  return e;
}

cJSON *kb_k8s_discovery_resources(const kb_k8s_store *st, const char *group, const char *version) {
  static const char *const all[] = {"create", "delete", "deletecollection", "get", "list",
                                    "patch", "update", "watch"};
  static const char *const status[] = {"get", "patch", "update"};
  static const char *const get[] = {"get"};
  static const char *const create[] = {"create"};
  cJSON *d = NULL, *list = NULL;
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    if (strcmp(r->group, group) || strcmp(r->version, version)) continue;
    if (!d) {
      d = cJSON_CreateObject();
      cJSON_AddStringToObject(d, "kind", "APIResourceList");
      cJSON_AddStringToObject(d, "apiVersion", "v1");
      cJSON_AddStringToObject(d, "groupVersion", r->api_version);
      list = cJSON_AddArrayToObject(d, "resources");
    }
    int review = !strcmp(r->resource, "selfsubjectaccessreviews") ||
                 !strcmp(r->resource, "selfsubjectreviews");
    cJSON_AddItemToArray(list, review ? api_resource(r, NULL, create, 1) : api_resource(r, NULL, all, 8));
    if (r->status_subresource) cJSON_AddItemToArray(list, api_resource(r, "status", status, 3));
    if (!strcmp(r->group, "apps") &&
        (!strcmp(r->resource, "deployments") || !strcmp(r->resource, "replicasets"))) {
      cJSON *sc = api_resource(r, "scale", status, 3);
      cJSON_ReplaceItemInObjectCaseSensitive(sc, "kind", cJSON_CreateString("Scale"));
      cJSON_AddStringToObject(sc, "group", "autoscaling");
      cJSON_AddStringToObject(sc, "version", "v1");
      cJSON_AddItemToArray(list, sc);
    }
    if (!r->group[0] && !strcmp(r->resource, "pods")) {
      cJSON_AddItemToArray(list, api_resource(r, "log", get, 1));
      cJSON *ev = api_resource(r, "eviction", create, 1); /* kubectl drain looks for it */
      cJSON_DeleteItemFromObjectCaseSensitive(ev, "kind");
      cJSON_AddStringToObject(ev, "group", "policy");
      cJSON_AddStringToObject(ev, "version", "v1");
      cJSON_AddStringToObject(ev, "kind", "Eviction");
      cJSON_AddItemToArray(list, ev);
    }
  }
  return d;
}

/* ---- OpenAPI v3 ------------------------------------------------------------------ */

#define META "io.k8s.apimachinery.pkg.apis.meta.v1."

static void gv_path(const kb_k8s_res *r, char *out, size_t n) {
  if (r->group[0]) snprintf(out, n, "apis/%s/%s", r->group, r->version);
  else snprintf(out, n, "api/%s", r->version);
}

static cJSON *ref(const char *name) {
  char buf[256];
  snprintf(buf, sizeof buf, "#/components/schemas/%s", name);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "$ref", buf);
  return o;
}

static cJSON *gvk(const kb_k8s_res *r, const char *kind) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "group", r->group);
  cJSON_AddStringToObject(o, "kind", kind);
  cJSON_AddStringToObject(o, "version", r->version);
  return o;
}

static cJSON *loose(const char *type) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", type);
  if (!strcmp(type, "object")) cJSON_AddBoolToObject(o, "x-kubernetes-preserve-unknown-fields", 1);
  return o;
}

static cJSON *kind_schema(const kb_k8s_res *r) {
  cJSON *s = cJSON_CreateObject();
  char d[200];
  snprintf(d, sizeof d, "%s (simulated by kbrun)", r->kind);
  cJSON_AddStringToObject(s, "description", d);
  cJSON_AddStringToObject(s, "type", "object");
  cJSON *p = cJSON_AddObjectToObject(s, "properties");
  cJSON_AddItemToObject(p, "apiVersion", loose("string"));
  cJSON_AddItemToObject(p, "kind", loose("string"));
  cJSON *meta = cJSON_CreateObject();
  cJSON *all = cJSON_AddArrayToObject(meta, "allOf");
  cJSON_AddItemToArray(all, ref(META "ObjectMeta"));
  cJSON_AddItemToObject(meta, "default", cJSON_CreateObject());
  cJSON_AddItemToObject(p, "metadata", meta);
  cJSON_AddItemToObject(p, "spec", loose("object"));
  cJSON_AddItemToObject(p, "status", loose("object"));
  cJSON_AddBoolToObject(s, "x-kubernetes-preserve-unknown-fields", 1);
  cJSON *g = cJSON_AddArrayToObject(s, "x-kubernetes-group-version-kind");
  cJSON_AddItemToArray(g, gvk(r, r->kind));
  return s;
}

static cJSON *list_schema(const kb_k8s_res *r, const char *item) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "type", "object");
  cJSON *p = cJSON_AddObjectToObject(s, "properties");
  cJSON_AddItemToObject(p, "apiVersion", loose("string"));
  cJSON_AddItemToObject(p, "kind", loose("string"));
  cJSON *items = cJSON_AddObjectToObject(p, "items");
  cJSON_AddStringToObject(items, "type", "array");
  cJSON_AddItemToObject(items, "items", ref(item));
  cJSON_AddItemToObject(p, "metadata", ref(META "ListMeta"));
  cJSON_AddItemToObject(s, "required", cJSON_CreateStringArray((const char *[]){"items"}, 1));
  cJSON_AddItemToArray(cJSON_AddArrayToObject(s, "x-kubernetes-group-version-kind"),
                       gvk(r, r->list_kind));
  return s;
}

static cJSON *object_meta_schema(void) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "type", "object");
  cJSON *p = cJSON_AddObjectToObject(s, "properties");
  static const char *strs[] = {"name", "generateName", "namespace", "uid", "resourceVersion",
                               "creationTimestamp", "deletionTimestamp", "selfLink"};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    cJSON_AddItemToObject(p, strs[i], loose("string"));
  cJSON_AddItemToObject(p, "generation", loose("integer"));
  cJSON_AddItemToObject(p, "deletionGracePeriodSeconds", loose("integer"));
  for (int i = 0; i < 2; i++) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "object");
    cJSON_AddItemToObject(m, "additionalProperties", loose("string"));
    cJSON_AddItemToObject(p, i ? "annotations" : "labels", m);
  }
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "type", "array");
  cJSON_AddItemToObject(f, "items", loose("string"));
  cJSON_AddStringToObject(f, "x-kubernetes-patch-strategy", "merge");
  cJSON_AddItemToObject(p, "finalizers", f);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", "array");
  cJSON_AddItemToObject(o, "items", loose("object"));
  cJSON_AddStringToObject(o, "x-kubernetes-patch-merge-key", "uid");
  cJSON_AddStringToObject(o, "x-kubernetes-patch-strategy", "merge");
  cJSON_AddItemToObject(p, "ownerReferences", o);
  cJSON *mf = cJSON_CreateObject();
  cJSON_AddStringToObject(mf, "type", "array");
  cJSON_AddItemToObject(mf, "items", loose("object"));
  cJSON_AddItemToObject(p, "managedFields", mf);
  return s;
}

static cJSON *qparam(const char *name, const char *type) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "in", "query");
  cJSON_AddStringToObject(p, "name", name);
  cJSON *s = cJSON_AddObjectToObject(p, "schema");
  cJSON_AddStringToObject(s, "type", type);
  cJSON_AddBoolToObject(s, "uniqueItems", 1);
  return p;
}

static cJSON *pathparam(const char *name) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "in", "path");
  cJSON_AddStringToObject(p, "name", name);
  cJSON_AddBoolToObject(p, "required", 1);
  cJSON_AddItemToObject(cJSON_AddObjectToObject(p, "schema"), "type", cJSON_CreateString("string"));
  cJSON_AddBoolToObject(cJSON_GetObjectItem(p, "schema"), "uniqueItems", 1);
  return p;
}

static cJSON *json_response(const char *schema) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "description", "OK");
  cJSON *c = cJSON_AddObjectToObject(r, "content");
  static const char *types[] = {"application/json", "application/yaml"};
  for (int i = 0; i < 2; i++)
    cJSON_AddItemToObject(cJSON_AddObjectToObject(c, types[i]), "schema", ref(schema));
  return r;
}

/* One operation; action: get list create update patch delete deletecollection. */
static cJSON *operation(const kb_k8s_res *r, const char *action, const char *kind_schema_name,
                        const char *list_schema_name, int cluster_wide) {
  cJSON *op = cJSON_CreateObject();
  char id[200], Kind[96];
  snprintf(Kind, sizeof Kind, "%s", r->kind);
  snprintf(id, sizeof id, "%s%s%s", action, r->namespaced && !cluster_wide ? "Namespaced" : "",
           !strcmp(action, "list") || !strcmp(action, "deletecollection") ? r->list_kind : Kind);
  cJSON_AddStringToObject(op, "operationId", id);
  cJSON *params = cJSON_AddArrayToObject(op, "parameters");
  int write = !strcmp(action, "create") || !strcmp(action, "update") || !strcmp(action, "patch");
  if (write || !strcmp(action, "delete") || !strcmp(action, "deletecollection"))
    cJSON_AddItemToArray(params, qparam("dryRun", "string"));
  if (write) {
    cJSON_AddItemToArray(params, qparam("fieldManager", "string"));
    cJSON_AddItemToArray(params, qparam("fieldValidation", "string"));
  }
  if (!strcmp(action, "patch")) cJSON_AddItemToArray(params, qparam("force", "boolean"));
  if (!strcmp(action, "list") || !strcmp(action, "deletecollection")) {
    static const char *lp[] = {"allowWatchBookmarks", "continue", "fieldSelector",
                               "labelSelector", "limit", "resourceVersion",
                               "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds",
                               "watch"};
    for (size_t i = 0; i < sizeof lp / sizeof lp[0]; i++)
      cJSON_AddItemToArray(params, qparam(lp[i], !strcmp(lp[i], "limit") ||
                                                         !strcmp(lp[i], "timeoutSeconds")
                                                     ? "integer"
                                                 : !strcmp(lp[i], "watch") ||
                                                         !strcmp(lp[i], "allowWatchBookmarks") ||
                                                         !strcmp(lp[i], "sendInitialEvents")
                                                     ? "boolean"
                                                     : "string"));
  }
  if (!strcmp(action, "create") || !strcmp(action, "update")) {
    cJSON *body = cJSON_AddObjectToObject(op, "requestBody");
    cJSON *c = cJSON_AddObjectToObject(body, "content");
    cJSON_AddItemToObject(cJSON_AddObjectToObject(c, "*/*"), "schema", ref(kind_schema_name));
    cJSON_AddBoolToObject(body, "required", 1);
  } else if (!strcmp(action, "patch")) {
    cJSON *body = cJSON_AddObjectToObject(op, "requestBody");
    cJSON *c = cJSON_AddObjectToObject(body, "content");
    /* strategic merge patch is accepted but not advertised: kubectl then
     * computes it from its compiled-in types (exact merge keys) instead of
     * from these loose schemas */
    static const char *types[] = {"application/json-patch+json", "application/merge-patch+json"};
    for (int i = 0; i < 2; i++)
      cJSON_AddItemToObject(cJSON_AddObjectToObject(c, types[i]), "schema", ref(META "Patch"));
    cJSON_AddBoolToObject(body, "required", 1);
  } else if (!strcmp(action, "delete") || !strcmp(action, "deletecollection")) {
    cJSON *body = cJSON_AddObjectToObject(op, "requestBody");
    cJSON_AddItemToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(body, "content"), "*/*"),
                          "schema", ref(META "DeleteOptions"));
  }
  cJSON *resp = cJSON_AddObjectToObject(op, "responses");
  const char *schema = !strcmp(action, "list") ? list_schema_name
                       : !strcmp(action, "deletecollection") ? META "Status"
                                                             : kind_schema_name;
  cJSON_AddItemToObject(resp, "200", json_response(schema));
  if (!strcmp(action, "create")) {
    cJSON_AddItemToObject(resp, "201", json_response(schema));
    cJSON_AddItemToObject(resp, "202", json_response(schema));
  }
  cJSON_AddStringToObject(op, "x-kubernetes-action", !strcmp(action, "create") ? "post"
                                                     : !strcmp(action, "update") ? "put"
                                                                                 : action);
  cJSON_AddItemToObject(op, "x-kubernetes-group-version-kind", gvk(r, r->kind));
  return op;
}

static void add_paths(cJSON *paths, const kb_k8s_res *r) {
  char base[200], p[300], kname[200], lname[200];
  if (r->group[0]) snprintf(base, sizeof base, "/apis/%s/%s", r->group, r->version);
  else snprintf(base, sizeof base, "/api/%s", r->version);
  kb_k8s_schema_name(r, "", kname, sizeof kname);
  kb_k8s_schema_name(r, "List", lname, sizeof lname);
  const char *nsp = r->namespaced ? "/namespaces/{namespace}" : "";
  snprintf(p, sizeof p, "%s%s/%s", base, nsp, r->resource);
  cJSON *coll = cJSON_AddObjectToObject(paths, p);
  cJSON_AddItemToObject(coll, "get", operation(r, "list", kname, lname, 0));
  cJSON_AddItemToObject(coll, "post", operation(r, "create", kname, lname, 0));
  cJSON_AddItemToObject(coll, "delete", operation(r, "deletecollection", kname, lname, 0));
  cJSON *cps = cJSON_AddArrayToObject(coll, "parameters");
  if (r->namespaced) cJSON_AddItemToArray(cps, pathparam("namespace"));
  cJSON_AddItemToArray(cps, qparam("pretty", "string"));
  for (int status = 0; status <= r->status_subresource; status++) {
    snprintf(p, sizeof p, "%s%s/%s/{name}%s", base, nsp, r->resource, status ? "/status" : "");
    cJSON *item = cJSON_AddObjectToObject(paths, p);
    cJSON_AddItemToObject(item, "get", operation(r, "read", kname, lname, 0));
    cJSON_AddItemToObject(item, "put", operation(r, "update", kname, lname, 0));
    cJSON_AddItemToObject(item, "patch", operation(r, "patch", kname, lname, 0));
    if (!status) cJSON_AddItemToObject(item, "delete", operation(r, "delete", kname, lname, 0));
    cJSON *ips = cJSON_AddArrayToObject(item, "parameters");
    cJSON_AddItemToArray(ips, pathparam("name"));
    if (r->namespaced) cJSON_AddItemToArray(ips, pathparam("namespace"));
    cJSON_AddItemToArray(ips, qparam("pretty", "string"));
  }
  if (r->namespaced) {
    snprintf(p, sizeof p, "%s/%s", base, r->resource);
    cJSON_AddItemToObject(cJSON_AddObjectToObject(paths, p), "get",
                          operation(r, "list", kname, lname, 1));
  }
}

cJSON *kb_k8s_openapi_doc(const kb_k8s_store *st, const char *gvp) {
  cJSON *doc = NULL, *paths = NULL, *schemas = NULL;
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    char p[200], name[200];
    gv_path(r, p, sizeof p);
    if (strcmp(p, gvp)) continue;
    if (!doc) {
      doc = cJSON_CreateObject();
      cJSON_AddStringToObject(doc, "openapi", "3.0.0");
      cJSON *info = cJSON_AddObjectToObject(doc, "info");
      cJSON_AddStringToObject(info, "title", "Kubernetes");
      cJSON_AddStringToObject(info, "version", "v1.32.0-kbrun-sim");
      paths = cJSON_AddObjectToObject(doc, "paths");
      schemas = cJSON_AddObjectToObject(cJSON_AddObjectToObject(doc, "components"), "schemas");
    }
    add_paths(paths, r);
    kb_k8s_schema_name(r, "", name, sizeof name);
    char lname[200];
    kb_k8s_schema_name(r, "List", lname, sizeof lname);
    /* a built-in kind: its real schema and every one it references (the
     * meta/v1 ones included), as the apiserver serves them; a custom
     * type: the loose schema its CRD declares */
    if (kb_k8s_schema_of(r) && kb_k8s_schema_add_closure(schemas, name)) {
      /* a kind without a List of its own (the reviews) gets the loose one */
      if (!kb_k8s_schema_add_closure(schemas, lname))
        cJSON_AddItemToObject(schemas, lname, list_schema(r, name));
      continue;
    }
    cJSON_AddItemToObject(schemas, name, kind_schema(r));
    cJSON_AddItemToObject(schemas, lname, list_schema(r, name));
  }
  if (doc) {
    /* what the operations reference: the real meta/v1 schemas (the
     * closures above hold most of them already) */
    static const char *meta[] = {META "ObjectMeta", META "ListMeta", META "Patch",
                                 META "DeleteOptions", META "Status"};
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++)
      if (!cJSON_GetObjectItemCaseSensitive(schemas, meta[i]) &&
          !kb_k8s_schema_add_closure(schemas, meta[i]))
        cJSON_AddItemToObject(schemas, meta[i], i ? loose("object") : object_meta_schema());
  }
  return doc;
}

/* The hash in a group's URL keys kubectl's HTTP cache of the document. A
 * document is a function of the group's resource types alone (the schemas
 * linked in are fixed for a build), so the hash is taken over those
 * rather than over the document: building every group's document for each
 * index request cost 10-25 ms of every kubectl create. */
static uint64_t group_hash(const kb_k8s_store *st, const char *gvp) {
  uint64_t h = kb_fnv64(KB_FNV64_INIT, "kbrun-openapi-1");
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    char p[200], flags[48];
    gv_path(r, p, sizeof p);
    if (strcmp(p, gvp)) continue;
    snprintf(flags, sizeof flags, "|%d%d%d|", r->namespaced, r->status_subresource, r->custom);
    const char *parts[] = {r->resource, r->kind, r->list_kind, r->singular, r->short_names,
                           r->categories, flags};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
      h = kb_fnv64(kb_fnv64(h, parts[k] ? parts[k] : ""), "/");
  }
  return h;
}

cJSON *kb_k8s_openapi_index(const kb_k8s_store *st) {
  cJSON *idx = cJSON_CreateObject();
  cJSON *paths = cJSON_AddObjectToObject(idx, "paths");
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    char p[200], url[300];
    gv_path(kb_k8s_store_resource_at(st, i), p, sizeof p);
    if (cJSON_GetObjectItemCaseSensitive(paths, p)) continue;
    snprintf(url, sizeof url, "/openapi/v3/%s?hash=%016llX", p,
             (unsigned long long)group_hash(st, p));
    cJSON_AddStringToObject(cJSON_AddObjectToObject(paths, p), "serverRelativeURL", url);
  }
  return idx;
}
