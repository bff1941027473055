/* Server-side apply and managed fields (application/apply-patch+yaml,
 * `kubectl apply --server-side`), as the apiserver's structured-merge-diff
 * does it, on the kinds' real schemas (k8s_schema.c):
 *
 * - A field set is the wire form of metadata.managedFields[].fieldsV1: an
 *   object whose keys are "f:<field>", "k:{<list-map keys>}" (an element
 *   of a list keyed by x-kubernetes-list-map-keys), "v:<json>" (an element
 *   of a set) and "." (the element itself); a leaf is {}. Lists without a
 *   list type, and atomic maps, are one leaf.
 * - An apply by manager M of config C: C's field set F; a field of F that
 *   another manager owns with a different value is a conflict (409, unless
 *   force=true, which takes it over); fields M applied before and left out
 *   of C are removed unless someone else owns them; C is merged into the
 *   object (maps by key, list-maps by their keys, the rest replaced); M's
 *   Apply entry becomes F.
 * - Any other write through the API (create, update, patch) records the
 *   fields it changed under its manager's Update entry, taking them from
 *   the others (the store's `manager`, set by the REST layer per request).
 * Writes of the simulator's own controllers record nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"

/* ---- field sets ---------------------------------------------------------------------- */

static int is_leaf(const cJSON *set) { return cJSON_IsObject(set) && !set->child; }

static const char *list_type(const cJSON *s) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "x-kubernetes-list-type"));
}

static int atomic_map(const cJSON *s) {
  const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "x-kubernetes-map-type"));
  return t && !strcmp(t, "atomic");
}

/* "k:{"name":"c"}" of a list-map element: its key fields, in schema order. */
static int element_key(const cJSON *s, const cJSON *item, char *out, size_t n) {
  const cJSON *keys = cJSON_GetObjectItemCaseSensitive(s, "x-kubernetes-list-map-keys"), *k;
  cJSON *kv = cJSON_CreateObject();
  cJSON_ArrayForEach(k, keys) {
    const cJSON *v = cJSON_IsString(k) ? cJSON_GetObjectItemCaseSensitive(item, k->valuestring) : NULL;
    if (v) cJSON_AddItemToObject(kv, k->valuestring, cJSON_Duplicate(v, 1));
  }
  char *text = cJSON_PrintUnformatted(kv);
  cJSON_Delete(kv);
  int ok = text && snprintf(out, n, "k:%s", text) < (int)n;
  free(text);
  return ok;
}

static int value_key(const cJSON *item, char *out, size_t n) {
  char *text = cJSON_PrintUnformatted(item);
  int ok = text && snprintf(out, n, "v:%s", text) < (int)n;
  free(text);
  return ok;
}

/* The field set of value v under schema s (NULL: no schema, lists atomic). */
static cJSON *fields_of(const cJSON *v, const cJSON *s) {
  cJSON *set = cJSON_CreateObject();
  if (!set) return NULL;
  s = kb_k8s_schema_resolve(s);
  if (cJSON_IsObject(v) && v->child && !atomic_map(s) &&
      !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "x-kubernetes-preserve-unknown-fields"))) {
    char key[300];
    for (const cJSON *c = v->child; c; c = c->next) {
      snprintf(key, sizeof key, "f:%s", c->string);
      cJSON_AddItemToObject(set, key, fields_of(c, kb_k8s_schema_child(s, c->string)));
    }
  } else if (cJSON_IsArray(v) && list_type(s) && strcmp(list_type(s), "atomic")) {
    const cJSON *items = kb_k8s_schema_resolve(cJSON_GetObjectItemCaseSensitive(s, "items"));
    int map = !strcmp(list_type(s), "map");
    char key[600];
    for (const cJSON *c = v->child; c; c = c->next) {
      if (!(map ? element_key(s, c, key, sizeof key) : value_key(c, key, sizeof key))) continue;
      cJSON *el = map ? fields_of(c, items) : cJSON_CreateObject();
      if (map) cJSON_AddItemToObject(el, ".", cJSON_CreateObject());
      if (!cJSON_GetObjectItemCaseSensitive(set, key)) cJSON_AddItemToObject(set, key, el);
      else cJSON_Delete(el);
    }
  }
  return set;
}

/* Adds every leaf of src to dst. */
static void set_union(cJSON *dst, const cJSON *src) {
  for (const cJSON *c = src->child; c; c = c->next) {
    cJSON *d = cJSON_GetObjectItemCaseSensitive(dst, c->string);
    if (!d) cJSON_AddItemToObject(dst, c->string, cJSON_Duplicate(c, 1));
    else if (is_leaf(d) && !is_leaf(c)) cJSON_ReplaceItemInObjectCaseSensitive(dst, c->string, cJSON_Duplicate(c, 1));
    else set_union(d, c);
  }
}

/* Removes from dst every leaf of src; a node left with no leaf goes too. */
static void set_subtract(cJSON *dst, const cJSON *src) {
  for (const cJSON *c = src->child; c; c = c->next) {
    cJSON *d = cJSON_GetObjectItemCaseSensitive(dst, c->string);
    if (!d) continue;
    if (is_leaf(c) || is_leaf(d)) {
      if (is_leaf(c) == is_leaf(d)) cJSON_DeleteItemFromObjectCaseSensitive(dst, c->string);
      continue;
    }
    set_subtract(d, c);
    if (!d->child) cJSON_DeleteItemFromObjectCaseSensitive(dst, c->string);
  }
}

/* ---- values at a path ---------------------------------------------------------------- */

/* The child of value v that set key `key` names, or NULL. */
static cJSON *value_at(const cJSON *v, const char *key, const cJSON *s) {
  if (!strncmp(key, "f:", 2)) return cJSON_GetObjectItemCaseSensitive(v, key + 2);
  if (!cJSON_IsArray(v)) return NULL;
  char k[600];
  for (cJSON *c = v->child; c; c = c->next) {
    int ok = key[0] == 'k' ? element_key(s, c, k, sizeof k) : value_key(c, k, sizeof k);
    if (ok && !strcmp(k, key)) return c;
  }
  return NULL;
}

static const cJSON *schema_at(const cJSON *s, const char *key) {
  s = kb_k8s_schema_resolve(s);
  if (!strncmp(key, "f:", 2)) return kb_k8s_schema_child(s, key + 2);
  return kb_k8s_schema_resolve(cJSON_GetObjectItemCaseSensitive(s, "items"));
}

/* A set path as the apiserver prints it in a conflict:
 * .spec.containers[name="c"].image */
static void path_text(char *out, size_t n, const char *key) {
  size_t len = strlen(out);
  if (!strncmp(key, "f:", 2)) {
    snprintf(out + len, n - len, ".%s", key + 2);
  } else if (!strncmp(key, "k:", 2)) {
    cJSON *kv = cJSON_Parse(key + 2);
    snprintf(out + len, n - len, "[");
    for (const cJSON *c = kv ? kv->child : NULL; c; c = c->next) {
      char *v = cJSON_PrintUnformatted(c);
      len = strlen(out);
      snprintf(out + len, n - len, "%s%s=%s", c == kv->child ? "" : ",", c->string, v ? v : "");
      free(v);
    }
    len = strlen(out);
    snprintf(out + len, n - len, "]");
    cJSON_Delete(kv);
  } else if (!strncmp(key, "v:", 2)) {
    snprintf(out + len, n - len, "[%s]", key + 2);
  }
}

/* The conflicts of one apply, as the apiserver lists them. */
typedef struct {
  int count;
  struct { char manager[128], version[64], path[300]; } c[16];
} conflicts;

/* Leaves of `mine` that `theirs` owns with a value in `live` other than in
 * `config`. */
static void find_conflicts(const cJSON *mine, const cJSON *theirs, const cJSON *live,
                           const cJSON *config, const cJSON *s, const char *manager,
                           const char *api_version, char *path, size_t pcap, conflicts *cf) {
  size_t plen = strlen(path);
  for (const cJSON *c = mine->child; c; c = c->next) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(theirs, c->string);
    if (!t || !strcmp(c->string, ".")) continue;
    const cJSON *lv = value_at(live, c->string, s), *cv = value_at(config, c->string, s);
    path_text(path, pcap, c->string);
    /* an empty object applied sets none of the fields they own in it */
    if (is_leaf(c) && !is_leaf(t) && cJSON_IsObject(cv)) {
      path[plen] = '\0';
      continue;
    }
    if (is_leaf(c) || is_leaf(t)) {
      if (lv && cv && !cJSON_Compare(lv, cv, 1) && cf->count < 16) {
        int i = cf->count++;
        snprintf(cf->c[i].manager, sizeof cf->c[i].manager, "%s", manager);
        snprintf(cf->c[i].version, sizeof cf->c[i].version, "%s", api_version);
        snprintf(cf->c[i].path, sizeof cf->c[i].path, "%s", path);
      }
    } else if (lv && cv) {
      find_conflicts(c, t, lv, cv, schema_at(s, c->string), manager, api_version, path, pcap, cf);
    }
    path[plen] = '\0';
  }
}

/* The 409: "Apply failed with 1 conflict: conflict with "m" using apps/v1:
 * .spec.replicas", or for several, one "conflicts with" line per manager
 * and a "- path" line per field; a cause per field. */
static size_t appendf(char *buf, size_t cap, size_t n, const char *fmt, const char *a,
                      const char *b, const char *c) {
  if (n >= cap) return n;
  int w = snprintf(buf + n, cap - n, fmt, a, b, c);
  return w < 0 ? cap : n + (size_t)w;
}

static int conflict_error(const conflicts *cf, kb_k8s_error *err) {
  char msg[1024], count[32];
  size_t n = 0;
  snprintf(count, sizeof count, "%d", cf->count);
  if (cf->count == 1) {
    n = appendf(msg, sizeof msg, n, "Apply failed with %s conflict: ", count, "", "");
    appendf(msg, sizeof msg, n, "conflict with \"%s\" using %s: %s", cf->c[0].manager,
            cf->c[0].version, cf->c[0].path);
  } else {
    n = appendf(msg, sizeof msg, n, "Apply failed with %s conflicts: ", count, "", "");
    for (int i = 0; i < cf->count; i++) {
      if (i == 0 || strcmp(cf->c[i].manager, cf->c[i - 1].manager))
        n = appendf(msg, sizeof msg, n, "%sconflicts with \"%s\" using %s:", i ? "\n" : "",
                    cf->c[i].manager, cf->c[i].version);
      n = appendf(msg, sizeof msg, n, "\n- %s%s%s", cf->c[i].path, "", "");
    }
  }
  kb_k8s_error_set(err, 409, "Conflict", "%s", msg);
  for (int i = 0; i < cf->count; i++) {
    char cause[256];
    snprintf(cause, sizeof cause, "conflict with \"%s\" using %s", cf->c[i].manager,
             cf->c[i].version);
    kb_k8s_error_cause(err, "FieldManagerConflict", cause, cf->c[i].path);
  }
  return -409;
}

/* Deletes from v the leaves of `gone` (fields no manager owns any more). */
static void remove_fields(cJSON *v, const cJSON *gone, const cJSON *s) {
  for (const cJSON *c = gone->child; c; c = c->next) {
    if (!strcmp(c->string, ".")) continue;
    cJSON *child = value_at(v, c->string, s);
    if (!child) continue;
    int whole = is_leaf(c) || cJSON_GetObjectItemCaseSensitive(c, ".") != NULL;
    if (!whole) {
      int had = child->child != NULL;
      remove_fields(child, c, schema_at(s, c->string));
      /* a map or struct emptied by the removal goes with its last field */
      whole = had && !child->child && cJSON_IsObject(child);
      if (!whole) continue;
    }
    if (!strncmp(c->string, "f:", 2)) cJSON_DeleteItemFromObjectCaseSensitive(v, c->string + 2);
    else cJSON_Delete(cJSON_DetachItemViaPointer(v, child));
  }
}

/* Merges config into live: maps by key, list-maps by their keys, sets by
 * value; anything else is replaced. */
static void merge_into(cJSON *live, const cJSON *config, const cJSON *s) {
  s = kb_k8s_schema_resolve(s);
  for (const cJSON *c = config->child; c; c = c->next) {
    const cJSON *cs = kb_k8s_schema_resolve(kb_k8s_schema_child(s, c->string));
    cJSON *lv = cJSON_GetObjectItemCaseSensitive(live, c->string);
    const char *lt = list_type(cs);
    if (lv && cJSON_IsObject(lv) && cJSON_IsObject(c) && !atomic_map(cs)) {
      merge_into(lv, c, cs);
    } else if (lv && cJSON_IsArray(lv) && cJSON_IsArray(c) && lt && strcmp(lt, "atomic")) {
      const cJSON *items = kb_k8s_schema_resolve(cJSON_GetObjectItemCaseSensitive(cs, "items"));
      int map = !strcmp(lt, "map");
      for (const cJSON *item = c->child; item; item = item->next) {
        char key[600];
        int ok = map ? element_key(cs, item, key, sizeof key) : value_key(item, key, sizeof key);
        cJSON *match = ok ? value_at(lv, key, cs) : NULL;
        if (match && map && cJSON_IsObject(match)) merge_into(match, item, items);
        else if (!match) cJSON_AddItemToArray(lv, cJSON_Duplicate(item, 1));
      }
    } else {
      cJSON *copy = cJSON_Duplicate(c, 1);
      if (lv) cJSON_ReplaceItemInObjectCaseSensitive(live, c->string, copy);
      else cJSON_AddItemToObject(live, c->string, copy);
    }
  }
}

/* ---- managedFields ---------------------------------------------------------------------- */

/* The fields a write owns: not the ones the server sets. */
static void drop_system_fields(cJSON *set) {
  cJSON *md = cJSON_GetObjectItemCaseSensitive(set, "f:metadata");
  static const char *sys[] = {"f:name", "f:namespace", "f:uid", "f:resourceVersion",
                              "f:creationTimestamp", "f:generation", "f:managedFields",
                              "f:deletionTimestamp", "f:deletionGracePeriodSeconds", "f:selfLink"};
  for (size_t i = 0; md && i < sizeof sys / sizeof sys[0]; i++)
    cJSON_DeleteItemFromObjectCaseSensitive(md, sys[i]);
  if (md && !md->child) cJSON_DeleteItemFromObjectCaseSensitive(set, "f:metadata");
  cJSON_DeleteItemFromObjectCaseSensitive(set, "f:apiVersion");
  cJSON_DeleteItemFromObjectCaseSensitive(set, "f:kind");
}

static cJSON *entry_of(cJSON *managed, const char *manager, const char *operation) {
  cJSON *e;
  cJSON_ArrayForEach(e, managed) {
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "manager"));
    const char *op = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "operation"));
    if (m && op && !strcmp(m, manager) && !strcmp(op, operation)) return e;
  }
  return NULL;
}

static cJSON *entry_set(cJSON *e) {
  cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "fieldsV1");
  if (!cJSON_IsObject(f)) {
    f = cJSON_CreateObject();
    if (cJSON_GetObjectItemCaseSensitive(e, "fieldsV1")) cJSON_ReplaceItemInObjectCaseSensitive(e, "fieldsV1", f);
    else cJSON_AddItemToObject(e, "fieldsV1", f);
  }
  return f;
}

/* metadata.managedFields of obj, created if missing. */
static cJSON *managed_of(cJSON *obj) {
  cJSON *md = kb_k8s_meta(obj);
  cJSON *mf = cJSON_GetObjectItemCaseSensitive(md, "managedFields");
  if (!cJSON_IsArray(mf)) {
    cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    mf = cJSON_AddArrayToObject(md, "managedFields");
  }
  return mf;
}

/* Gives `set` to manager's `operation` entry (replace: the entry becomes
 * set; else set is added to it) and takes it from every other entry;
 * entries left empty go. */
static void own(kb_k8s_store *st, cJSON *obj, const kb_k8s_res *res, const char *manager,
                const char *operation, const cJSON *set, int replace) {
  cJSON *mf = managed_of(obj);
  cJSON *mine = entry_of(mf, manager, operation);
  if (!mine) {
    mine = cJSON_CreateObject();
    cJSON_AddStringToObject(mine, "manager", manager);
    cJSON_AddStringToObject(mine, "operation", operation);
    cJSON_AddStringToObject(mine, "apiVersion", res->api_version);
    cJSON_AddStringToObject(mine, "time", "");
    cJSON_AddStringToObject(mine, "fieldsType", "FieldsV1");
    cJSON_AddItemToObject(mine, "fieldsV1", cJSON_CreateObject());
    cJSON_AddItemToArray(mf, mine);
  }
  char ts[32];
  kb_k8s_format_time(kb_k8s_store_now(st), ts);
  cJSON_ReplaceItemInObjectCaseSensitive(mine, "time", cJSON_CreateString(ts));
  if (replace) cJSON_ReplaceItemInObjectCaseSensitive(mine, "fieldsV1", cJSON_Duplicate(set, 1));
  else set_union(entry_set(mine), set);
  for (cJSON *e = mf->child, *next; e; e = next) {
    next = e->next;
    if (e != mine) set_subtract(entry_set(e), set);
    if (!entry_set(e)->child) cJSON_Delete(cJSON_DetachItemViaPointer(mf, e));
  }
  if (!mf->child) cJSON_DeleteItemFromObjectCaseSensitive(kb_k8s_meta(obj), "managedFields");
}

/* Leaves of `set` whose value differs between old and next (or that are
 * new): what an update changed. */
static cJSON *changed(const cJSON *set, const cJSON *old, const cJSON *next, const cJSON *s) {
  cJSON *out = cJSON_CreateObject();
  for (const cJSON *c = set->child; c; c = c->next) {
    if (!strcmp(c->string, ".")) {
      if (!old) cJSON_AddItemToObject(out, ".", cJSON_CreateObject());
      continue;
    }
    const cJSON *ov = old ? value_at(old, c->string, s) : NULL, *nv = value_at(next, c->string, s);
    if (is_leaf(c)) {
      if (!ov || !nv || !cJSON_Compare(ov, nv, 1)) cJSON_AddItemToObject(out, c->string, cJSON_CreateObject());
      continue;
    }
    cJSON *sub = changed(c, ov, nv, schema_at(s, c->string));
    if (sub->child) cJSON_AddItemToObject(out, c->string, sub);
    else cJSON_Delete(sub);
  }
  return out;
}

void kb_k8s_managed_record(kb_k8s_store *st, const kb_k8s_res *res, const cJSON *old, cJSON *next) {
  if (!st->manager || !next) return;
  cJSON *nm = kb_k8s_meta(next);
  /* an update that leaves managedFields out keeps them */
  if (old && !cJSON_GetObjectItemCaseSensitive(nm, "managedFields")) {
    const cJSON *om = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(old, "metadata"),
                                                       "managedFields");
    if (om) cJSON_AddItemToObject(nm, "managedFields", cJSON_Duplicate(om, 1));
  }
  const cJSON *s = kb_k8s_schema_of(res);
  cJSON *all = fields_of(next, s);
  drop_system_fields(all);
  if (res->status_subresource) cJSON_DeleteItemFromObjectCaseSensitive(all, "f:status");
  cJSON *delta = old ? changed(all, old, next, s) : all;
  if (delta->child) own(st, next, res, st->manager, "Update", delta, 0);
  if (delta != all) cJSON_Delete(delta);
  cJSON_Delete(all);
}

void kb_k8s_store_set_manager(kb_k8s_store *st, const char *manager) { st->manager = manager; }

/* ---- apply ------------------------------------------------------------------------------ */

int kb_k8s_apply(kb_k8s_store *st, const kb_k8s_res *res, const char *ns, const char *name,
                 const cJSON *config, const char *manager, int force, unsigned flags, cJSON **out,
                 int *created, kb_k8s_error *err) {
  if (out) *out = NULL;
  if (created) *created = 0;
  if (!manager || !*manager)
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "PATCH, application/apply-patch+yaml: fieldManager is required for "
                            "apply requests");
  if (!cJSON_IsObject(config))
    return kb_k8s_error_set(err, 400, "BadRequest", "the apply configuration must be an object");
  const char *cname = kb_k8s_meta_str(config, "name");
  if (!cname || strcmp(cname, name))
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "the name of the object (%s) does not match the name on the URL (%s)",
                            cname ? cname : "", name);
  const cJSON *s = kb_k8s_schema_of(res);
  cJSON *set = fields_of(config, s);
  drop_system_fields(set);
  if (res->status_subresource) cJSON_DeleteItemFromObjectCaseSensitive(set, "f:status");
  const char *saved = st->manager;
  st->manager = NULL; /* ownership is written here, not by the update path */
  int rc;
  cJSON *live = kb_k8s_get(st, res, ns, name, err);
  if (!live && err->code != 404) {
    rc = -err->code;
  } else if (!live) {
    /* apply creates: the manager owns what it applied */
    cJSON *obj = cJSON_Duplicate(config, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(kb_k8s_meta(obj), "managedFields");
    own(st, obj, res, manager, "Apply", set, 1);
    rc = kb_k8s_create(st, res, ns, obj, flags | K8S_KEEP_MANAGED, out, err);
    cJSON_Delete(obj);
    if (!rc && created) *created = 1;
  } else {
    cJSON *mf = managed_of(live);
    conflicts cf = {0};
    char path[600] = "";
    for (cJSON *e = mf->child; e && !force; e = e->next) {
      const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "manager"));
      const char *op = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "operation"));
      const char *av = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "apiVersion"));
      if (!m || (!strcmp(m, manager) && op && !strcmp(op, "Apply"))) continue;
      find_conflicts(set, entry_set(e), live, config, s, m, av ? av : res->api_version, path,
                     sizeof path, &cf);
    }
    if (cf.count) {
      rc = conflict_error(&cf, err);
    } else {
      /* fields this manager applied before and no longer does go, unless
       * another manager owns them */
      cJSON *before = entry_of(mf, manager, "Apply");
      cJSON *gone = before ? cJSON_Duplicate(entry_set(before), 1) : cJSON_CreateObject();
      set_subtract(gone, set);
      own(st, live, res, manager, "Apply", set, 1);
      cJSON *others = cJSON_CreateObject();
      cJSON *mf2 = cJSON_GetObjectItemCaseSensitive(kb_k8s_meta(live), "managedFields");
      for (cJSON *e = mf2 ? mf2->child : NULL; e; e = e->next) set_union(others, entry_set(e));
      set_subtract(gone, others);
      remove_fields(live, gone, s);
      cJSON_Delete(others);
      cJSON_Delete(gone);
      merge_into(live, config, s);
      rc = kb_k8s_update(st, res, ns, name, live, flags | K8S_KEEP_MANAGED, out, err);
    }
  }
  cJSON_Delete(live);
  cJSON_Delete(set);
  st->manager = saved;
  return rc;
}
