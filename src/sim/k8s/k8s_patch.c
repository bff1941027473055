/* The three patch formats of the Kubernetes API: JSON merge patch (RFC
 * 7386), JSON patch (RFC 6902) and strategic merge patch.
 *
 * Strategic merge patch needs each list's merge key. The apiserver takes
 * them from the Go structs; the built-in types we serve use few enough
 * list fields that a table keyed by field name (from the 1.32 OpenAPI
 * x-kubernetes-patch-merge-key extensions) is exact for them. */
#include <stdlib.h>
#include <string.h>

#include "kb/k8s_store.h"

/* ---- JSON merge patch ------------------------------------------------- */

cJSON *kb_k8s_merge_patch(cJSON *target, const cJSON *patch) {
  if (!cJSON_IsObject(patch)) {
    cJSON_Delete(target);
    return cJSON_Duplicate(patch, 1);
  }
  if (!cJSON_IsObject(target)) {
    cJSON_Delete(target);
    target = cJSON_CreateObject();
    if (!target) return NULL;
  }
  for (const cJSON *p = patch->child; p; p = p->next) {
    if (cJSON_IsNull(p)) {
      cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
      continue;
    }
    cJSON *old = cJSON_DetachItemFromObjectCaseSensitive(target, p->string);
    cJSON *merged = kb_k8s_merge_patch(old, p);
    if (!merged || !cJSON_AddItemToObject(target, p->string, merged)) {
      cJSON_Delete(merged);
      cJSON_Delete(target);
      return NULL;
    }
  }
  return target;
}

/* ---- JSON patch --------------------------------------------------------- */

/* Splits a JSON pointer into its parent container and last token. */
typedef struct ptr_ref {
  cJSON *parent; /* NULL: the pointer is "" (the whole document) */
  char *token;   /* decoded last token (malloc'd) */
} ptr_ref;

static char *decode_token(const char *s, size_t n) {
  char *t = malloc(n + 1);
  if (!t) return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '~' && i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1')) {
      t[j++] = s[i + 1] == '0' ? '~' : '/';
      i++;
    } else {
      t[j++] = s[i];
    }
  }
  t[j] = '\0';
  return t;
}

/* Array index token: digits without leading zeros; "-" gives len. */
static int array_index(const cJSON *arr, const char *tok, int allow_end, int *out) {
  int n = cJSON_GetArraySize(arr);
  if (allow_end && strcmp(tok, "-") == 0) {
    *out = n;
    return 0;
  }
  if (!*tok || (tok[0] == '0' && tok[1]) || strspn(tok, "0123456789") != strlen(tok) ||
      strlen(tok) > 9)
    return -1;
  int i = atoi(tok);
  if (i > n || (!allow_end && i == n)) return -1;
  *out = i;
  return 0;
}

static cJSON *child_of(cJSON *node, const char *tok) {
  if (cJSON_IsObject(node)) return cJSON_GetObjectItemCaseSensitive(node, tok);
  if (cJSON_IsArray(node)) {
    int i;
    if (array_index(node, tok, 0, &i)) return NULL;
    return cJSON_GetArrayItem(node, i);
  }
  return NULL;
}

static int resolve(cJSON *doc, const char *path, ptr_ref *ref, kb_k8s_error *err) {
  ref->parent = NULL;
  ref->token = NULL;
  if (!path) return kb_k8s_error_set(err, 400, "BadRequest", "json patch: missing path");
  if (!*path) return 0;
  if (*path != '/')
    return kb_k8s_error_set(err, 400, "BadRequest", "json patch: invalid path %s", path);
  cJSON *node = doc;
  const char *s = path + 1;
  for (;;) {
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    char *tok = decode_token(s, n);
    if (!tok) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
    if (!slash) {
      ref->parent = node;
      ref->token = tok;
      return 0;
    }
    cJSON *next = child_of(node, tok);
    free(tok);
    if (!next)
      return kb_k8s_error_set(err, 422, "Invalid",
                              "json patch: path %s: missing intermediate value", path);
    node = next;
    s = slash + 1;
  }
}

static cJSON *ref_get(cJSON *doc, const ptr_ref *r) {
  return r->parent ? child_of(r->parent, r->token) : doc;
}

/* Removes and returns the referenced value. */
static cJSON *ref_detach(cJSON **doc, const ptr_ref *r) {
  if (!r->parent) {
    cJSON *d = *doc;
    *doc = NULL;
    return d;
  }
  if (cJSON_IsObject(r->parent))
    return cJSON_DetachItemFromObjectCaseSensitive(r->parent, r->token);
  int i;
  if (!cJSON_IsArray(r->parent) || array_index(r->parent, r->token, 0, &i)) return NULL;
  return cJSON_DetachItemFromArray(r->parent, i);
}

/* Adds (inserting into arrays, replacing object members). Consumes v. */
static int ref_add(cJSON **doc, const ptr_ref *r, cJSON *v, const char *path,
                   kb_k8s_error *err) {
  if (!r->parent) {
    cJSON_Delete(*doc);
    *doc = v;
    return 0;
  }
  if (cJSON_IsObject(r->parent)) {
    cJSON_DeleteItemFromObjectCaseSensitive(r->parent, r->token);
    if (!cJSON_AddItemToObject(r->parent, r->token, v)) goto oom;
    return 0;
  }
  if (cJSON_IsArray(r->parent)) {
    int i;
    if (array_index(r->parent, r->token, 1, &i)) {
      cJSON_Delete(v);
      return kb_k8s_error_set(err, 422, "Invalid", "json patch: path %s: index out of range",
                              path);
    }
    if (i == cJSON_GetArraySize(r->parent) ? !cJSON_AddItemToArray(r->parent, v)
                                           : !cJSON_InsertItemInArray(r->parent, i, v))
      goto oom;
    return 0;
  }
  cJSON_Delete(v);
  return kb_k8s_error_set(err, 422, "Invalid", "json patch: path %s: parent is not a container",
                          path);
oom:
  cJSON_Delete(v);
  return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
}

static int apply_op(cJSON **doc, const cJSON *op, kb_k8s_error *err) {
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(op, "op"));
  const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(op, "path"));
  const char *from = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(op, "from"));
  const cJSON *value = cJSON_GetObjectItemCaseSensitive(op, "value");
  if (!name) return kb_k8s_error_set(err, 400, "BadRequest", "json patch: operation without op");
  ptr_ref r;
  int rc = resolve(*doc, path, &r, err);
  if (rc) return rc;
  if (!strcmp(name, "add") || !strcmp(name, "replace") || !strcmp(name, "test")) {
    if (!value) {
      rc = kb_k8s_error_set(err, 400, "BadRequest", "json patch: %s operation needs a value",
                            name);
    } else if (!strcmp(name, "test")) {
      cJSON *cur = ref_get(*doc, &r);
      if (!cur || !cJSON_Compare(cur, value, 1))
        rc = kb_k8s_error_set(err, 422, "Invalid", "json patch: test failed at %s", path);
    } else {
      if (!strcmp(name, "replace")) {
        cJSON *old = ref_get(*doc, &r);
        if (!old) {
          rc = kb_k8s_error_set(err, 422, "Invalid",
                                "json patch: replace operation does not apply: doc is missing "
                                "key: %s", path);
          goto out;
        }
        if (r.parent && cJSON_IsArray(r.parent)) cJSON_Delete(ref_detach(doc, &r));
      }
      cJSON *v = cJSON_Duplicate(value, 1);
      rc = v ? ref_add(doc, &r, v, path, err)
             : kb_k8s_error_set(err, 500, "InternalError", "out of memory");
    }
  } else if (!strcmp(name, "remove")) {
    cJSON *old = ref_get(*doc, &r) ? ref_detach(doc, &r) : NULL;
    if (!old)
      rc = kb_k8s_error_set(err, 422, "Invalid",
                            "json patch: remove operation does not apply: doc is missing path: %s",
                            path);
    cJSON_Delete(old);
  } else if (!strcmp(name, "move") || !strcmp(name, "copy")) {
    ptr_ref f;
    rc = resolve(*doc, from, &f, err);
    if (rc) goto out;
    cJSON *src = ref_get(*doc, &f);
    if (!src) {
      rc = kb_k8s_error_set(err, 422, "Invalid", "json patch: %s from missing path %s", name,
                            from);
    } else {
      cJSON *v = !strcmp(name, "copy") ? cJSON_Duplicate(src, 1) : ref_detach(doc, &f);
      if (!strcmp(name, "move")) {
        /* the target's parent may have shifted: resolve again */
        free(r.token);
        rc = resolve(*doc, path, &r, err);
      }
      rc = rc ? (cJSON_Delete(v), rc) : ref_add(doc, &r, v, path, err);
    }
    free(f.token);
  } else {
    rc = kb_k8s_error_set(err, 400, "BadRequest", "json patch: unknown operation \"%s\"", name);
  }
out:
  free(r.token);
  return rc;
}

int kb_k8s_json_patch(cJSON **doc, const cJSON *ops, kb_k8s_error *err) {
  if (!cJSON_IsArray(ops))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "json patch: the patch must be an array of operations");
  cJSON *work = cJSON_Duplicate(*doc, 1);
  if (!work) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  for (const cJSON *op = ops->child; op; op = op->next) {
    int rc = apply_op(&work, op, err);
    if (rc) {
      cJSON_Delete(work);
      return rc;
    }
  }
  cJSON_Delete(*doc);
  *doc = work;
  return 0;
}

/* ---- strategic merge patch ---------------------------------------------- */

static const struct {
  const char *field, *key;
} merge_keys[] = {
    {"containers", "name"},        {"initContainers", "name"},
    {"ephemeralContainers", "name"}, {"env", "name"},
    {"volumeMounts", "mountPath"}, {"volumeDevices", "devicePath"},
    {"volumes", "name"},           {"ports", "containerPort"},
    {"conditions", "type"},        {"ownerReferences", "uid"},
    {"imagePullSecrets", "name"},  {"hostAliases", "ip"},
    {"resourceClaims", "name"},    {"schedulingGates", "name"},
    {"topologySpreadConstraints", "topologyKey"},
    {"podIPs", "ip"},              {"hostIPs", "ip"},
    {"addresses", "type"},         {"resourceClaimStatuses", "name"},
    {"allocatedResourcesStatus", "name"},
    {"finalizers", ""},            {"podCIDRs", ""},
};

const char *kb_k8s_smp_merge_key(const char *field) {
  for (size_t i = 0; i < sizeof merge_keys / sizeof merge_keys[0]; i++)
    if (!strcmp(merge_keys[i].field, field)) return merge_keys[i].key;
  return NULL;
}

static int smp_map(cJSON *target, const cJSON *patch, kb_k8s_error *err);
static int oom(kb_k8s_error *err);

/* target[key] = v (consumed), replacing any member of that name. */
static int set_member(cJSON *target, const char *key, cJSON *v, kb_k8s_error *err) {
  if (cJSON_GetObjectItemCaseSensitive(target, key)) {
    if (!cJSON_ReplaceItemInObjectCaseSensitive(target, key, v)) return cJSON_Delete(v), oom(err);
  } else if (!cJSON_AddItemToObject(target, key, v)) {
    cJSON_Delete(v);
    return oom(err);
  }
  return 0;
}

static const char *directive(const cJSON *obj) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "$patch"));
}

/* A copy of a patch value with every directive key removed (what a
 * replaced or newly added element becomes). */
static cJSON *strip_directives(const cJSON *v) {
  if (cJSON_IsArray(v)) {
    cJSON *s = cJSON_CreateArray();
    for (const cJSON *x = v->child; s && x; x = x->next) {
      if (cJSON_IsObject(x) && directive(x) && cJSON_GetArraySize(x) == 1) continue;
      cJSON *sx = strip_directives(x);
      if (!sx || !cJSON_AddItemToArray(s, sx)) {
        cJSON_Delete(sx);
        cJSON_Delete(s);
        s = NULL;
      }
    }
    return s;
  }
  cJSON *c = cJSON_Duplicate(v, 1);
  if (!c) return NULL;
  if (!cJSON_IsObject(c)) return c;
  cJSON *e = c->child;
  while (e) {
    cJSON *next = e->next;
    if (e->string && e->string[0] == '$') {
      cJSON_Delete(cJSON_DetachItemViaPointer(c, e));
    } else if (cJSON_IsObject(e) || cJSON_IsArray(e)) {
      cJSON *s = strip_directives(e);
      if (!s) {
        cJSON_Delete(c);
        return NULL;
      }
      cJSON_ReplaceItemInObjectCaseSensitive(c, e->string, s);
    }
    e = next;
  }
  return c;
}

static cJSON *find_keyed(cJSON *list, const char *key, const cJSON *val) {
  for (cJSON *e = list->child; e; e = e->next) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, key);
    if (k && cJSON_Compare(k, val, 1)) return e;
  }
  return NULL;
}

static int oom(kb_k8s_error *err) {
  return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
}

/* Merges a patch list into a keyed list (elements matched by key). */
static int smp_keyed_list(cJSON *target, const cJSON *patch, const char *field, const char *key,
                          kb_k8s_error *err) {
  for (const cJSON *p = patch->child; p; p = p->next) {
    if (!cJSON_IsObject(p))
      return kb_k8s_error_set(err, 400, "BadRequest",
                              "strategic merge patch: %s: elements must be objects", field);
    const char *d = directive(p);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(p, key);
    if (d && !strcmp(d, "replace")) continue; /* handled by the caller */
    if (!k)
      return kb_k8s_error_set(err, 400, "BadRequest",
                              "strategic merge patch: %s: map has no merge key %s", field, key);
    cJSON *cur = find_keyed(target, key, k);
    if (d && !strcmp(d, "delete")) {
      if (cur) cJSON_Delete(cJSON_DetachItemViaPointer(target, cur));
    } else if (cur) {
      int rc = smp_map(cur, p, err);
      if (rc) return rc;
    } else {
      cJSON *add = strip_directives(p);
      if (!add || !cJSON_AddItemToArray(target, add)) {
        cJSON_Delete(add);
        return oom(err);
      }
    }
  }
  return 0;
}

static int smp_primitive_list(cJSON *target, const cJSON *patch, kb_k8s_error *err) {
  for (const cJSON *p = patch->child; p; p = p->next) {
    int found = 0;
    for (const cJSON *e = target->child; e && !found; e = e->next) found = cJSON_Compare(e, p, 1);
    if (found) continue;
    cJSON *c = cJSON_Duplicate(p, 1);
    if (!c || !cJSON_AddItemToArray(target, c)) {
      cJSON_Delete(c);
      return oom(err);
    }
  }
  return 0;
}

static int list_has_replace(const cJSON *patch) {
  for (const cJSON *p = patch->child; p; p = p->next) {
    const char *d = cJSON_IsObject(p) ? directive(p) : NULL;
    if (d && !strcmp(d, "replace")) return 1;
  }
  return 0;
}

/* Sets target[field] from a patch list. */
static int smp_list(cJSON *target, const char *field, const cJSON *patch, kb_k8s_error *err) {
  const char *key = kb_k8s_smp_merge_key(field);
  cJSON *cur = cJSON_GetObjectItemCaseSensitive(target, field);
  if (!key || !cJSON_IsArray(cur) || list_has_replace(patch)) {
    cJSON *v = strip_directives(patch);
    if (!v) return oom(err);
    return set_member(target, field, v, err);
  }
  return *key ? smp_keyed_list(cur, patch, field, key, err) : smp_primitive_list(cur, patch, err);
}

/* Reorders target[field] after $setElementOrder/<field>: the listed
 * elements first in that order, the others after, in their order. */
static int smp_order(cJSON *target, const char *field, const cJSON *order, kb_k8s_error *err) {
  cJSON *list = cJSON_GetObjectItemCaseSensitive(target, field);
  if (!cJSON_IsArray(list) || !cJSON_IsArray(order)) return 0;
  const char *key = kb_k8s_smp_merge_key(field);
  cJSON *sorted = cJSON_CreateArray();
  if (!sorted) return oom(err);
  for (const cJSON *o = order->child; o; o = o->next) {
    cJSON *e = NULL;
    if (key && *key && cJSON_IsObject(o)) {
      const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, key);
      e = k ? find_keyed(list, key, k) : NULL;
    } else {
      for (cJSON *x = list->child; x && !e; x = x->next)
        if (cJSON_Compare(x, o, 1)) e = x;
    }
    if (e) cJSON_AddItemToArray(sorted, cJSON_DetachItemViaPointer(list, e));
  }
  while (list->child) cJSON_AddItemToArray(sorted, cJSON_DetachItemViaPointer(list, list->child));
  cJSON_ReplaceItemInObjectCaseSensitive(target, field, sorted);
  return 0;
}

static int smp_delete_primitives(cJSON *target, const char *field, const cJSON *vals) {
  cJSON *list = cJSON_GetObjectItemCaseSensitive(target, field);
  if (!cJSON_IsArray(list) || !cJSON_IsArray(vals)) return 0;
  for (const cJSON *v = vals->child; v; v = v->next) {
    cJSON *e = list->child;
    while (e) {
      cJSON *next = e->next;
      if (cJSON_Compare(e, v, 1)) cJSON_Delete(cJSON_DetachItemViaPointer(list, e));
      e = next;
    }
  }
  return 0;
}

static int smp_retain(cJSON *target, const cJSON *keys) {
  if (!cJSON_IsArray(keys)) return 0;
  cJSON *e = target->child;
  while (e) {
    cJSON *next = e->next;
    int keep = 0;
    for (const cJSON *k = keys->child; k && !keep; k = k->next)
      keep = cJSON_IsString(k) && !strcmp(k->valuestring, e->string);
    if (!keep) cJSON_Delete(cJSON_DetachItemViaPointer(target, e));
    e = next;
  }
  return 0;
}

static int smp_map(cJSON *target, const cJSON *patch, kb_k8s_error *err) {
  const char *d = directive(patch);
  if (d && !strcmp(d, "replace")) {
    cJSON *v = strip_directives(patch);
    if (!v) return oom(err);
    while (target->child) cJSON_Delete(cJSON_DetachItemViaPointer(target, target->child));
    while (v->child) cJSON_AddItemToObject(target, v->child->string,
                                           cJSON_DetachItemViaPointer(v, v->child));
    cJSON_Delete(v);
    return 0;
  }
  if (d && strcmp(d, "merge") && strcmp(d, "delete"))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "strategic merge patch: unknown patch type: %s", d);
  for (const cJSON *p = patch->child; p; p = p->next) {
    const char *k = p->string;
    if (k[0] == '$') continue; /* directives after the merge */
    cJSON *cur = cJSON_GetObjectItemCaseSensitive(target, k);
    int rc = 0;
    if (cJSON_IsNull(p)) {
      if (cur) cJSON_Delete(cJSON_DetachItemViaPointer(target, cur));
    } else if (cJSON_IsObject(p)) {
      const char *pd = directive(p);
      if (pd && !strcmp(pd, "delete")) {
        if (cur) cJSON_Delete(cJSON_DetachItemViaPointer(target, cur));
      } else if (cJSON_IsObject(cur) && !(pd && !strcmp(pd, "replace"))) {
        rc = smp_map(cur, p, err);
      } else {
        cJSON *v = strip_directives(p);
        if (!v) return oom(err);
        rc = set_member(target, k, v, err);
      }
    } else if (cJSON_IsArray(p)) {
      rc = smp_list(target, k, p, err);
    } else {
      cJSON *v = cJSON_Duplicate(p, 1);
      if (!v) return oom(err);
      rc = set_member(target, k, v, err);
    }
    if (rc) return rc;
  }
  static const char order[] = "$setElementOrder/", delprim[] = "$deleteFromPrimitiveList/";
  for (const cJSON *p = patch->child; p; p = p->next) {
    const char *k = p->string;
    if (!strncmp(k, order, sizeof order - 1)) {
      int rc = smp_order(target, k + sizeof order - 1, p, err);
      if (rc) return rc;
    } else if (!strncmp(k, delprim, sizeof delprim - 1)) {
      smp_delete_primitives(target, k + sizeof delprim - 1, p);
    } else if (!strcmp(k, "$retainKeys")) {
      smp_retain(target, p);
    }
  }
  return 0;
}

int kb_k8s_strategic_patch(cJSON **doc, const cJSON *patch, kb_k8s_error *err) {
  if (!cJSON_IsObject(patch))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "strategic merge patch: the patch must be a JSON object");
  cJSON *work = cJSON_IsObject(*doc) ? cJSON_Duplicate(*doc, 1) : cJSON_CreateObject();
  if (!work) return oom(err);
  int rc = smp_map(work, patch, err);
  if (rc) {
    cJSON_Delete(work);
    return rc;
  }
  cJSON_Delete(*doc);
  *doc = work;
  return 0;
}
