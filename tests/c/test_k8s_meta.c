/* ObjectMeta validation of the simulator's store (src/sim/k8s/k8s_meta_valid.c):
 * names, label keys and values, annotation keys and size, refused on create
 * and update with the apiserver's words (and nothing stored), and what the
 * real apiserver accepts accepted. */
#include <stdlib.h>
#include <string.h>

#include "../../src/sim/k8s/k8s_internal.h"
#include "kbtest.h"

static double fixed_now(void *ud) {
  (void)ud;
  return 1700000000.0;
}

static kb_k8s_store *st;

static const kb_k8s_res *res_of(const char *resource) {
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    if (!r->group[0] && !strcmp(r->resource, resource)) return r;
  }
  return NULL;
}

/* creates json as a `resource` in default; the status (0 or -code) */
static int create(const char *resource, const char *json, kb_k8s_error *err) {
  cJSON *o = cJSON_Parse(json);
  KB_CHECK(o != NULL);
  int rc = kb_k8s_create(st, res_of(resource), "default", o, 0, NULL, err);
  cJSON_Delete(o);
  return rc;
}

static void test_refused(void) {
  kb_k8s_error err;
  KB_CHECK(create("configmaps", "{\"metadata\":{\"name\":\"c1\",\"labels\":{\"bad key!\":\"v\"}}}",
                  &err) == -422);
  KB_CHECK(strstr(err.message, "ConfigMap \"c1\" is invalid: metadata.labels: Invalid value: "
                               "\"bad key!\": name part must consist of alphanumeric characters") != NULL);
  KB_CHECK(kb_k8s_peek(st, res_of("configmaps"), "default", "c1") == NULL); /* nothing stored */
  KB_CHECK(create("configmaps", "{\"metadata\":{\"name\":\"c2\",\"labels\":{\"ok\":\"bad value!\"}}}",
                  &err) == -422);
  KB_CHECK(strstr(err.message, "metadata.labels: Invalid value: \"bad value!\": a valid label must "
                               "be an empty string") != NULL);
  char json[400];
  snprintf(json, sizeof json, "{\"metadata\":{\"name\":\"%064d\"}}", 0);
  KB_CHECK(create("namespaces", json, &err) == -422);
  KB_CHECK(strstr(err.message, "metadata.name: Invalid value") && strstr(err.message, "must be no more than 63 characters"));
  KB_CHECK(create("namespaces", "{\"metadata\":{\"name\":\"a.b\"}}", &err) == -422);
  KB_CHECK(strstr(err.message, "a lowercase RFC 1123 label must consist of") != NULL);
  KB_CHECK(create("configmaps", "{\"metadata\":{\"name\":\"c3\",\"annotations\":{\"-bad.io/x\":\"v\"}}}",
                  &err) == -422);
  KB_CHECK(strstr(err.message, "metadata.annotations: Invalid value: \"-bad.io/x\": prefix part a "
                               "lowercase RFC 1123 subdomain") != NULL);
  snprintf(json, sizeof json, "{\"metadata\":{\"name\":\"c4\",\"labels\":{\"k\":\"%064d\"}}}", 0);
  KB_CHECK(create("configmaps", json, &err) == -422);
  KB_CHECK(strstr(err.message, "must be no more than 63 characters") != NULL);
}

static void test_accepted_and_updates(void) {
  kb_k8s_error err;
  /* prefixed keys, empty and dotted values, a 63-character namespace, a
   * dotted object name */
  char json[600];
  snprintf(json, sizeof json, "{\"metadata\":{\"name\":\"%s\"}}",
           "a23456789012345678901234567890123456789012345678901234567890123");
  KB_CHECK(create("namespaces", json, &err) == 0);
  KB_CHECK(create("configmaps", "{\"metadata\":{\"name\":\"web.v1\",\"labels\":{\"app.kubernetes.io/"
                  "name\":\"web\",\"empty\":\"\",\"v\":\"1.2_x-Y\"},\"annotations\":{\"example.com/"
                  "Note_1\":\"any text at all!\"}}}", &err) == 0);
  /* an update that breaks a label is refused and leaves the object */
  cJSON *o = kb_k8s_get(st, res_of("configmaps"), "default", "web.v1", &err);
  KB_CHECK(o != NULL);
  cJSON *labels = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "metadata"), "labels");
  cJSON_AddStringToObject(labels, "x/", "v");
  KB_CHECK(kb_k8s_update(st, res_of("configmaps"), "default", "web.v1", o, 0, NULL, &err) == -422);
  KB_CHECK(strstr(err.message, "Invalid value: \"x/\": name part must be non-empty") != NULL);
  cJSON_Delete(o);
  const cJSON *kept = kb_k8s_peek(st, res_of("configmaps"), "default", "web.v1");
  KB_CHECK(kept && !cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(kept, "metadata"),
                                                            "labels"), "x/"));
}

int main(void) {
  kb_k8s_store_config cfg = {.history = 16, .now = fixed_now, .seed = 7};
  st = kb_k8s_store_new(&cfg);
  KB_CHECK(st && kb_k8s_store_add_builtins(st) == 0);
  KB_RUN(test_refused);
  KB_RUN(test_accepted_and_updates);
  kb_k8s_store_free(st);
  return kb_test_report();
}
