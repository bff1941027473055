/* The Kubernetes 1.32 schemas of the built-in kinds, from the API's own
 * OpenAPI document (specs/k8s/swagger-v1.32.json, linked into the binary
 * by k8s_swagger.S): what fieldValidation checks a body against, and what
 * the OpenAPI v3 documents serve (so `kubectl explain pod.spec.containers`
 * reads the real field descriptions).
 *
 * The document is parsed once per process, on first use (10-20 ms, about 10 MB; a
 * KFP-only benchmark never pays it), and only its `definitions` are kept,
 * sorted by name for lookups. It is read-only from then on, so simulators
 * on several threads share it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"

extern const char kb_k8s_swagger_json[];
extern const char kb_k8s_swagger_json_end[];

#define DEFS_REF "#/definitions/"

typedef struct {
  const char *name;
  const cJSON *def;
} schema_entry;

static struct {
  pthread_once_t once;
  cJSON *defs; /* the document's "definitions", detached */
  schema_entry *by_name;
  size_t n;
} schemas = {PTHREAD_ONCE_INIT, NULL, NULL, 0};

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const schema_entry *)a)->name, ((const schema_entry *)b)->name);
}

static void schemas_load(void) {
  size_t len = (size_t)(kb_k8s_swagger_json_end - kb_k8s_swagger_json);
  cJSON *doc = cJSON_ParseWithLength(kb_k8s_swagger_json, len);
  cJSON *defs = doc ? cJSON_DetachItemFromObjectCaseSensitive(doc, "definitions") : NULL;
  cJSON_Delete(doc);
  size_t n = (size_t)cJSON_GetArraySize(defs);
  schema_entry *by_name = n ? malloc(n * sizeof *by_name) : NULL;
  if (!by_name) {
    /* out of memory or a broken build: no schemas, so nothing is validated */
    cJSON_Delete(defs);
    return;
  }
  size_t i = 0;
  for (const cJSON *d = defs->child; d; d = d->next) by_name[i++] = (schema_entry){d->string, d};
  qsort(by_name, n, sizeof *by_name, cmp_entry);
  schemas.defs = defs;
  schemas.by_name = by_name;
  schemas.n = n;
}

const cJSON *kb_k8s_schema_def(const char *name) {
  pthread_once(&schemas.once, schemas_load);
  if (!name || !schemas.n) return NULL;
  schema_entry key = {name, NULL};
  const schema_entry *e = bsearch(&key, schemas.by_name, schemas.n, sizeof key, cmp_entry);
  return e ? e->def : NULL;
}

/* The definition a "$ref" (or an allOf of one) names, else the schema. */
const cJSON *kb_k8s_schema_resolve(const cJSON *s) {
  for (int depth = 0; s && depth < 8; depth++) {
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (!cJSON_IsString(ref)) {
      const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
      if (cJSON_GetArraySize(all) != 1) return s;
      s = cJSON_GetArrayItem(all, 0);
      continue;
    }
    if (strncmp(ref->valuestring, DEFS_REF, strlen(DEFS_REF))) return NULL;
    s = kb_k8s_schema_def(ref->valuestring + strlen(DEFS_REF));
  }
  return s;
}

const cJSON *kb_k8s_schema_child(const cJSON *schema, const char *key) {
  const cJSON *s = kb_k8s_schema_resolve(schema);
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "properties"), key);
  if (p) return p;
  const cJSON *more = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
  return cJSON_IsObject(more) ? more : NULL;
}

static int gvk_matches(const cJSON *def, const kb_k8s_res *r) {
  const cJSON *g;
  cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(def, "x-kubernetes-group-version-kind")) {
    const char *group = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(g, "group"));
    const char *version = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(g, "version"));
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(g, "kind"));
    if (group && version && kind && !strcmp(group, r->group) && !strcmp(version, r->version) &&
        !strcmp(kind, r->kind))
      return 1;
  }
  return 0;
}

void kb_k8s_schema_name(const kb_k8s_res *r, const char *suffix, char *out, size_t n) {
  if (r->custom) {
    /* the apiserver's name for custom types: the group reversed
     * (io.argoproj.v1alpha1.Workflow) */
    char rev[160] = "", tmp[160];
    snprintf(tmp, sizeof tmp, "%s", r->group);
    for (char *dot; (dot = strrchr(tmp, '.')) != NULL; *dot = '\0')
      snprintf(rev + strlen(rev), sizeof rev - strlen(rev), "%s.", dot + 1);
    snprintf(rev + strlen(rev), sizeof rev - strlen(rev), "%s", tmp);
    snprintf(out, n, "%s.%s.%s%s", rev, r->version, r->kind, suffix);
  } else if (!strcmp(r->group, "apiextensions.k8s.io")) {
    snprintf(out, n, "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.%s.%s%s", r->version,
             r->kind, suffix);
  } else {
    /* io.k8s.api.<group's first label>.<version>.<Kind>: core, apps,
     * batch, policy, coordination, discovery, storage, ... */
    char group[64];
    snprintf(group, sizeof group, "%s", r->group[0] ? r->group : "core");
    char *dot = strchr(group, '.');
    if (dot) *dot = '\0';
    snprintf(out, n, "io.k8s.api.%s.%s.%s%s", group, r->version, r->kind, suffix);
  }
}

const cJSON *kb_k8s_schema_of(const kb_k8s_res *r) {
  if (r->custom) return NULL;
  char name[256];
  kb_k8s_schema_name(r, "", name, sizeof name);
  const cJSON *def = kb_k8s_schema_def(name);
  return def && gvk_matches(def, r) ? def : NULL;
}

/* ---- unknown and duplicate fields ------------------------------------------------- */

typedef struct {
  char *out;
  size_t cap, len;
  int count;
} field_report;

static void report(field_report *fr, const char *what, const char *path) {
  fr->count++;
  if (fr->len >= fr->cap) return;
  int w = snprintf(fr->out + fr->len, fr->cap - fr->len, "%s%s field \"%s\"",
                   fr->len ? ", " : "", what, path);
  fr->len = w < 0 ? fr->cap : fr->len + (size_t)w;
  if (fr->len >= fr->cap) fr->len = fr->cap; /* cut: the count still says how many */
}

static int preserves_unknown(const cJSON *s) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "x-kubernetes-preserve-unknown-fields"));
}

static void walk(const cJSON *schema, const cJSON *v, char *path, size_t plen, size_t pcap,
                 field_report *fr, int depth);

/* The path of a child: ".key" or "[i]" appended, restored by the caller;
 * a path longer than the buffer is cut, never overflowed. Returns the end. */
static size_t path_end(size_t plen, size_t pcap, int written) {
  size_t end = written < 0 ? plen : plen + (size_t)written;
  return end >= pcap ? pcap - 1 : end;
}

static size_t push_key(char *path, size_t plen, size_t pcap, const char *key) {
  return path_end(plen, pcap, snprintf(path + plen, pcap - plen, "%s%s", plen ? "." : "", key));
}

static size_t push_index(char *path, size_t plen, size_t pcap, int index) {
  return path_end(plen, pcap, snprintf(path + plen, pcap - plen, "[%d]", index));
}

static void walk_object(const cJSON *s, const cJSON *v, char *path, size_t plen, size_t pcap,
                        field_report *fr, int depth) {
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
  const cJSON *more = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
  for (const cJSON *c = v->child; c; c = c->next) {
    size_t end = push_key(path, plen, pcap, c->string);
    for (const cJSON *d = v->child; d != c; d = d->next)
      if (!strcmp(d->string, c->string)) {
        report(fr, "duplicate", path);
        break;
      }
    const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, c->string) : NULL;
    if (ps) walk(ps, c, path, end, pcap, fr, depth + 1);
    else if (cJSON_IsObject(more)) walk(more, c, path, end, pcap, fr, depth + 1);
    else if (props && !cJSON_IsTrue(more)) report(fr, "unknown", path);
    path[plen] = '\0';
  }
}

static void walk(const cJSON *schema, const cJSON *v, char *path, size_t plen, size_t pcap,
                 field_report *fr, int depth) {
  const cJSON *s = kb_k8s_schema_resolve(schema);
  if (!s || depth > 64 || preserves_unknown(s)) return;
  if (cJSON_IsObject(v)) {
    walk_object(s, v, path, plen, pcap, fr, depth);
  } else if (cJSON_IsArray(v)) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (!items) return;
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
      size_t end = push_index(path, plen, pcap, i);
      walk(items, c, path, end, pcap, fr, depth + 1);
      path[plen] = '\0';
    }
  }
}

int kb_k8s_schema_unknown_fields(const kb_k8s_res *r, const cJSON *obj, char *out, size_t n) {
  const cJSON *def = kb_k8s_schema_of(r);
  if (n) out[0] = '\0';
  if (!def || !cJSON_IsObject(obj)) return 0;
  char path[512] = "";
  field_report fr = {out, n, 0, 0};
  walk(def, obj, path, 0, sizeof path, &fr, 0);
  return fr.count;
}

/* ---- OpenAPI v3 components ---------------------------------------------------------- */

/* A v2 schema as OpenAPI v3 writes it: "#/definitions/X" refs become
 * "#/components/schemas/X", and a ref with siblings (a description, a
 * default) is wrapped in allOf, as the apiserver's v3 documents do.
 * Every name referenced is added to `todo` (an array of strings). */
static cJSON *to_v3(const cJSON *s, cJSON *todo) {
  if (!cJSON_IsObject(s) && !cJSON_IsArray(s)) return cJSON_Duplicate(s, 1);
  cJSON *o = cJSON_IsArray(s) ? cJSON_CreateArray() : cJSON_CreateObject();
  const cJSON *ref = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "$ref") : NULL;
  int wrap = cJSON_IsString(ref) && cJSON_GetArraySize(s) > 1;
  for (const cJSON *c = s->child; c; c = c->next) {
    if (c == ref && cJSON_IsString(ref) && !strncmp(ref->valuestring, DEFS_REF, strlen(DEFS_REF))) {
      const char *name = ref->valuestring + strlen(DEFS_REF);
      char buf[300];
      snprintf(buf, sizeof buf, "#/components/schemas/%s", name);
      cJSON_AddItemToArray(todo, cJSON_CreateString(name));
      if (wrap) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "$ref", buf);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "allOf"), r);
      } else {
        cJSON_AddStringToObject(o, "$ref", buf);
      }
      continue;
    }
    cJSON *copy = to_v3(c, todo);
    if (cJSON_IsArray(s)) cJSON_AddItemToArray(o, copy);
    else cJSON_AddItemToObject(o, c->string, copy);
  }
  return o;
}

int kb_k8s_schema_add_closure(cJSON *components, const char *name) {
  if (!kb_k8s_schema_def(name)) return 0;
  cJSON *todo = cJSON_CreateArray();
  cJSON_AddItemToArray(todo, cJSON_CreateString(name));
  /* breadth first over the references; a name already present is done */
  for (int i = 0; i < cJSON_GetArraySize(todo); i++) {
    const char *n = cJSON_GetArrayItem(todo, i)->valuestring;
    if (cJSON_GetObjectItemCaseSensitive(components, n)) continue;
    const cJSON *def = kb_k8s_schema_def(n);
    if (def) cJSON_AddItemToObject(components, n, to_v3(def, todo));
  }
  cJSON_Delete(todo);
  return 1;
}
