/* The Kubernetes schemas of the simulator (src/sim/k8s/k8s_schema.c): unknown
 * and duplicate fields found at any depth as the apiserver's strict
 * decoder names them, and the OpenAPI v3 components kubectl explain reads
 * (the real definitions, refs rewritten, every referenced one present). */
#include <stdlib.h>
#include <string.h>

#include "../../src/sim/k8s/k8s_table.h"
#include "kbtest.h"

static double fixed_now(void *ud) {
  (void)ud;
  return 1700000000.0;
}

static const kb_k8s_res *res_of(kb_k8s_store *st, const char *group, const char *resource) {
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    if (!strcmp(r->group, group) && !strcmp(r->resource, resource)) return r;
  }
  return NULL;
}

static int unknown(const kb_k8s_res *r, const char *json, char *out, size_t n) {
  cJSON *o = cJSON_Parse(json);
  KB_CHECK(o != NULL);
  int count = kb_k8s_schema_unknown_fields(r, o, out, n);
  cJSON_Delete(o);
  return count;
}

static void test_unknown_fields(void) {
  kb_k8s_store_config cfg = {.history = 4, .now = fixed_now, .seed = 7};
  kb_k8s_store *st = kb_k8s_store_new(&cfg);
  KB_CHECK(st && kb_k8s_store_add_builtins(st) == 0);
  const kb_k8s_res *pods = res_of(st, "", "pods"), *jobs = res_of(st, "batch", "jobs");
  const kb_k8s_res *wf = res_of(st, "argoproj.io", "workflows");
  KB_CHECK(pods && jobs && wf);
  char out[512];
  /* a valid pod: maps (labels), Quantities, IntOrString, arrays, times */
  KB_CHECK(unknown(pods,
                   "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\","
                   "\"labels\":{\"app\":\"x\",\"any-key\":\"v\"},\"creationTimestamp\":null},"
                   "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\","
                   "\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"}},"
                   "\"ports\":[{\"containerPort\":80}],\"readinessProbe\":{\"httpGet\":"
                   "{\"port\":\"http\",\"path\":\"/\"}}}],\"tolerations\":[{\"key\":\"k\","
                   "\"operator\":\"Exists\"}]},\"status\":{\"phase\":\"Running\"}}",
                   out, sizeof out) == 0);
  KB_CHECK_STR(out, "");
  /* nested unknown fields, in the order given, with array indices */
  KB_CHECK(unknown(jobs,
                   "{\"spec\":{\"bogusTop\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":"
                   "\"a\"},{\"name\":\"b\",\"bogus\":true}]}}},\"extra\":{}}",
                   out, sizeof out) == 3);
  KB_CHECK_STR(out, "unknown field \"spec.bogusTop\", unknown field "
                    "\"spec.template.spec.containers[1].bogus\", unknown field \"extra\"");
  /* a field given twice */
  KB_CHECK(unknown(pods, "{\"metadata\":{\"name\":\"a\",\"name\":\"b\"}}", out, sizeof out) == 1);
  KB_CHECK_STR(out, "duplicate field \"metadata.name\"");
  /* custom types keep unknown fields (their CRDs preserve them) */
  KB_CHECK(unknown(wf, "{\"spec\":{\"anything\":{\"at\":[1]}}}", out, sizeof out) == 0);
  /* a cut report still counts every field */
  char small[24];
  KB_CHECK(unknown(pods, "{\"a\":1,\"b\":2,\"c\":3}", small, sizeof small) == 3);
  KB_CHECK(strlen(small) < sizeof small);
  kb_k8s_store_free(st);
}

static int has_string(const cJSON *o, const char *needle) {
  if (cJSON_IsString(o) && strstr(o->valuestring, needle)) return 1;
  for (const cJSON *c = o ? o->child : NULL; c; c = c->next)
    if (has_string(c, needle)) return 1;
  return 0;
}

/* every "#/components/schemas/X" in o names a component */
static int refs_resolve(const cJSON *o, const cJSON *components) {
  if (cJSON_IsString(o) && o->string && !strcmp(o->string, "$ref"))
    return cJSON_GetObjectItemCaseSensitive(components, o->valuestring +
                                                            strlen("#/components/schemas/")) != NULL;
  for (const cJSON *c = o ? o->child : NULL; c; c = c->next)
    if (!refs_resolve(c, components)) return 0;
  return 1;
}

static void test_components(void) {
  cJSON *components = cJSON_CreateObject();
  KB_CHECK(kb_k8s_schema_add_closure(components, "io.k8s.api.core.v1.Pod") == 1);
  KB_CHECK(kb_k8s_schema_add_closure(components, "io.k8s.api.core.v1.NoSuchKind") == 0);
  const cJSON *container = cJSON_GetObjectItemCaseSensitive(components, "io.k8s.api.core.v1.Container");
  KB_CHECK(container != NULL);
  /* the real description of a nested field */
  const cJSON *image = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(container, "properties"), "image");
  KB_CHECK(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(image, "description")) &&
           strstr(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(image, "description")),
                  "Container image name"));
  KB_CHECK(cJSON_GetObjectItemCaseSensitive(components, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
  KB_CHECK(!has_string(components, "#/definitions/"));
  KB_CHECK(refs_resolve(components, components));
  /* a ref with a description beside it is wrapped in allOf, as v3 does */
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(components, "io.k8s.api.core.v1.Pod"), "properties"), "spec");
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(spec, "allOf")) == 1);
  KB_CHECK(cJSON_GetObjectItemCaseSensitive(spec, "description") != NULL);
  cJSON_Delete(components);
}

static const char *url_of(const cJSON *idx, const char *gv) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(idx, "paths"), gv),
      "serverRelativeURL"));
}

/* The index's hashes key kubectl's cache: a group's changes when a type
 * is added to it, and only that group's. */
static void test_index_hash(void) {
  kb_k8s_store_config cfg = {.history = 4, .now = fixed_now, .seed = 7};
  kb_k8s_store *st = kb_k8s_store_new(&cfg);
  KB_CHECK(st && kb_k8s_store_add_builtins(st) == 0);
  cJSON *before = kb_k8s_openapi_index(st);
  char core[300], argo[300];
  snprintf(core, sizeof core, "%s", url_of(before, "api/v1"));
  snprintf(argo, sizeof argo, "%s", url_of(before, "apis/argoproj.io/v1alpha1"));
  KB_CHECK(strstr(core, "/openapi/v3/api/v1?hash=") == core);
  kb_k8s_resdef def = {"argoproj.io", "v1alpha1", "cronworkflowsx", "CronWorkflowX", NULL, NULL,
                       NULL, 1, 0, 1, NULL, NULL, 0};
  KB_CHECK(kb_k8s_store_add_resource(st, &def) != NULL);
  cJSON *after = kb_k8s_openapi_index(st);
  KB_CHECK_STR(url_of(after, "api/v1"), core);
  KB_CHECK(strcmp(url_of(after, "apis/argoproj.io/v1alpha1"), argo) != 0);
  cJSON_Delete(before);
  cJSON_Delete(after);
  kb_k8s_store_free(st);
}

int main(void) {
  KB_RUN(test_unknown_fields);
  KB_RUN(test_index_hash);
  KB_RUN(test_components);
  return kb_test_report();
}
