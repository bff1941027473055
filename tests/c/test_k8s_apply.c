/* Server-side apply and managedFields in the simulator's store
 * (src/sim/k8s/k8s_apply.c): ownership per manager, conflicts with their
 * causes, force, removal of fields a manager stops applying, list-maps
 * merged by their keys (a Pod's containers by name), and the Update
 * entries other writes record. tests/e2e/kubectl_apply.sh drives the same
 * with the real kubectl. */
#include <stdlib.h>
#include <string.h>

#include "../../src/sim/k8s/k8s_internal.h"
#include "kbtest.h"

static double fixed_now(void *ud) {
  (void)ud;
  return 1700000000.0;
}

static const kb_k8s_res *res_of(kb_k8s_store *st, const char *resource) {
  for (size_t i = 0; i < kb_k8s_store_resource_count(st); i++) {
    const kb_k8s_res *r = kb_k8s_store_resource_at(st, i);
    if (!r->group[0] && !strcmp(r->resource, resource)) return r;
  }
  return NULL;
}

static int apply(kb_k8s_store *st, const kb_k8s_res *r, const char *name, const char *json,
                 const char *manager, int force, kb_k8s_error *err) {
  cJSON *c = cJSON_Parse(json);
  KB_CHECK(c != NULL);
  cJSON *out = NULL;
  int created = -1;
  int rc = kb_k8s_apply(st, r, "default", name, c, manager, force, 0, &out, &created, err);
  cJSON_Delete(c);
  cJSON_Delete(out);
  return rc;
}

static const char *str(const cJSON *o, const char *path) {
  const cJSON *v = kb_k8s_path(o, path);
  return cJSON_GetStringValue(v);
}

/* the manager names of the object's managedFields, "m/op,m/op" */
static void managers(const cJSON *o, char *out, size_t n) {
  out[0] = '\0';
  const cJSON *e;
  cJSON_ArrayForEach(e, kb_k8s_path(o, "metadata.managedFields")) {
    size_t l = strlen(out);
    snprintf(out + l, n - l, "%s%s/%s", l ? "," : "", str(e, "manager"), str(e, "operation"));
  }
}

static void test_ownership_and_conflicts(void) {
  kb_k8s_store_config cfg = {.history = 16, .now = fixed_now, .seed = 7};
  kb_k8s_store *st = kb_k8s_store_new(&cfg);
  KB_CHECK(st && kb_k8s_store_add_builtins(st) == 0);
  const kb_k8s_res *cms = res_of(st, "configmaps");
  kb_k8s_error err;
  /* an apply creates, owned by its manager */
  KB_CHECK(apply(st, cms, "c", "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\","
                 "\"labels\":{\"team\":\"a\"}},\"data\":{\"x\":\"1\",\"y\":\"2\"}}", "alice", 0, &err) == 0);
  cJSON *o = kb_k8s_get(st, cms, "default", "c", &err);
  char m[200];
  managers(o, m, sizeof m);
  KB_CHECK_STR(m, "alice/Apply");
  KB_CHECK(kb_k8s_path(o, "metadata.managedFields.0.fieldsV1.f:data.f:x") == NULL); /* kb_k8s_path is dotted */
  const cJSON *set = kb_k8s_path(kb_k8s_path(o, "metadata.managedFields")->child, "fieldsV1");
  KB_CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(set, "f:data"), "f:x") != NULL);
  KB_CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(set, "f:metadata"), "f:name") == NULL);
  cJSON_Delete(o);
  /* bob applies another value of x: a conflict naming alice and the field */
  int rc = apply(st, cms, "c", "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"},"
                 "\"data\":{\"x\":\"9\"}}", "bob", 0, &err);
  KB_CHECK(rc == -409);
  KB_CHECK_STR(err.message, "Apply failed with 1 conflict: conflict with \"alice\" using v1: .data.x");
  KB_CHECK(err.n_causes == 1 && !strcmp(err.causes[0].field, ".data.x") &&
           !strcmp(err.causes[0].reason, "FieldManagerConflict"));
  /* the same value co-owns without a conflict; force takes a field over */
  KB_CHECK(apply(st, cms, "c", "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"},"
                 "\"data\":{\"y\":\"2\"}}", "carol", 0, &err) == 0);
  KB_CHECK(apply(st, cms, "c", "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"},"
                 "\"data\":{\"x\":\"9\"}}", "bob", 1, &err) == 0);
  o = kb_k8s_get(st, cms, "default", "c", &err);
  KB_CHECK_STR(str(o, "data.x"), "9");
  managers(o, m, sizeof m);
  KB_CHECK_STR(m, "alice/Apply,carol/Apply,bob/Apply");
  cJSON_Delete(o);
  /* alice stops applying x (bob's now), y (carol co-owns it) and the
   * label (hers alone): only the label goes */
  KB_CHECK(apply(st, cms, "c", "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"},"
                 "\"data\":{\"z\":\"3\"}}", "alice", 0, &err) == 0);
  o = kb_k8s_get(st, cms, "default", "c", &err);
  KB_CHECK_STR(str(o, "data.x"), "9");
  KB_CHECK_STR(str(o, "data.y"), "2");
  KB_CHECK_STR(str(o, "data.z"), "3");
  KB_CHECK(kb_k8s_path(o, "metadata.labels.team") == NULL);
  cJSON_Delete(o);
  /* an update through the API takes the fields it changes */
  kb_k8s_store_set_manager(st, "editor");
  cJSON *edit = kb_k8s_get(st, cms, "default", "c", &err);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(edit, "data"), "z", cJSON_CreateString("4"));
  KB_CHECK(kb_k8s_update(st, cms, "default", "c", edit, 0, NULL, &err) == 0);
  cJSON_Delete(edit);
  kb_k8s_store_set_manager(st, NULL);
  rc = apply(st, cms, "c", "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"},"
             "\"data\":{\"z\":\"3\"}}", "alice", 0, &err);
  KB_CHECK(rc == -409 && strstr(err.message, "conflict with \"editor\" using v1: .data.z"));
  /* no fieldManager: refused */
  KB_CHECK(apply(st, cms, "c", "{\"metadata\":{\"name\":\"c\"}}", "", 0, &err) == -400);
  kb_k8s_store_free(st);
}

static void test_list_map(void) {
  kb_k8s_store_config cfg = {.history = 16, .now = fixed_now, .seed = 7};
  kb_k8s_store *st = kb_k8s_store_new(&cfg);
  KB_CHECK(st && kb_k8s_store_add_builtins(st) == 0);
  const kb_k8s_res *pods = res_of(st, "pods");
  kb_k8s_error err;
  KB_CHECK(apply(st, pods, "p", "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"},"
                 "\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"img:1\"}]}}", "one", 0, &err) == 0);
  /* a second manager adds a container: merged by name, not replaced */
  KB_CHECK(apply(st, pods, "p", "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"},"
                 "\"spec\":{\"containers\":[{\"name\":\"b\",\"image\":\"img:2\"}]}}", "two", 0, &err) == 0);
  cJSON *o = kb_k8s_get(st, pods, "default", "p", &err);
  KB_CHECK(cJSON_GetArraySize(kb_k8s_path(o, "spec.containers")) == 2);
  const cJSON *set = kb_k8s_path(kb_k8s_path(o, "metadata.managedFields")->child, "fieldsV1");
  const cJSON *el = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(set, "f:spec"),
                                                            "f:containers"), "k:{\"name\":\"a\"}");
  KB_CHECK(el && cJSON_GetObjectItem(el, ".") && cJSON_GetObjectItem(el, "f:image"));
  cJSON_Delete(o);
  /* the second manager changes the first's image: the path names the element */
  int rc = apply(st, pods, "p", "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"},"
                 "\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"img:3\"},{\"name\":\"b\","
                 "\"image\":\"img:2\"}]}}", "two", 0, &err);
  KB_CHECK(rc == -409);
  KB_CHECK(strstr(err.message, "conflict with \"one\" using v1: .spec.containers[name=\"a\"].image"));
  /* the first manager drops its container: it goes, the other stays */
  rc = apply(st, pods, "p", "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"},"
             "\"spec\":{}}", "one", 0, &err);
  KB_CHECK(rc == 0);
  o = kb_k8s_get(st, pods, "default", "p", &err);
  KB_CHECK(cJSON_GetArraySize(kb_k8s_path(o, "spec.containers")) == 1);
  KB_CHECK_STR(str(cJSON_GetArrayItem(kb_k8s_path(o, "spec.containers"), 0), "name"), "b");
  cJSON_Delete(o);
  kb_k8s_store_free(st);
}

int main(void) {
  KB_RUN(test_ownership_and_conflicts);
  KB_RUN(test_list_map);
  return kb_test_report();
}
