/* Lists with label/field selectors and limit/continue paging. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "k8s_internal.h"
#include "kb/base64.h"

/* ---- lists ---------------------------------------------------------------- */

/* Continue tokens are base64 of {"v":"meta.k8s.io/v1","rv":N,"start":"ns/name"},
 * as the apiserver's; paging resumes after that key in the current state. */
static char *encode_continue(uint64_t rv, const char *ns, const char *name) {
  cJSON *t = cJSON_CreateObject();
  char key[600];
  snprintf(key, sizeof key, "%s/%s", ns, name);
  cJSON_AddStringToObject(t, "v", "meta.k8s.io/v1");
  cJSON_AddNumberToObject(t, "rv", (double)rv);
  cJSON_AddStringToObject(t, "start", key);
  char *js = cJSON_PrintUnformatted(t);
  cJSON_Delete(t);
  if (!js) return NULL;
  size_t n = strlen(js);
  char *out = malloc(4 * ((n + 2) / 3) + 1);
  if (out) kb_k8s_base64_encode(js, n, out);
  free(js);
  return out;
}

static int decode_continue(const char *tok, char *ns, char *name, size_t cap, kb_k8s_error *err) {
  char raw[1024];
  size_t n;
  cJSON *t = NULL;
  if (!kb_k8s_base64_decode(tok, raw, sizeof raw - 1, &n)) {
    raw[n] = '\0';
    t = cJSON_Parse(raw);
  }
  const char *start = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "start"));
  const char *slash = start ? strchr(start, '/') : NULL;
  if (!slash || (size_t)(slash - start) >= cap || strlen(slash + 1) >= cap) {
    cJSON_Delete(t);
    return kb_k8s_error_set(err, 400, "BadRequest", "continue key is not valid: %s",
                            "invalid continue token");
  }
  memcpy(ns, start, (size_t)(slash - start));
  ns[slash - start] = '\0';
  strcpy(name, slash + 1);
  cJSON_Delete(t);
  return 0;
}

int kb_k8s_list(kb_k8s_store *st, const kb_k8s_res *res, const kb_k8s_list_opts *opts,
                cJSON **out, kb_k8s_error *err) {
  *out = NULL;
  k8s_bucket *b = kb_k8s_bucket_of(st, res);
  if (!b) return kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
  kb_k8s_list_opts o = {0};
  if (opts) o = *opts;
  const char *ns = res->namespaced && o.ns && *o.ns ? o.ns : NULL;
  kb_k8s_selector *sel = NULL;
  if ((o.label_selector && *o.label_selector) || (o.field_selector && *o.field_selector)) {
    sel = kb_k8s_selector_parse(o.label_selector, o.field_selector, res, err);
    if (!sel) return err ? -err->code : -400;
  }
  size_t i = ns ? kb_k8s_bucket_search(b, ns, "", NULL) : 0;
  if (o.continue_token && *o.continue_token) {
    char cns[300], cname[300];
    int rc = decode_continue(o.continue_token, cns, cname, sizeof cns, err);
    if (rc) {
      kb_k8s_selector_free(sel);
      return rc;
    }
    int found;
    size_t j = kb_k8s_bucket_search(b, cns, cname, &found);
    if (found) j++;
    if (j > i) i = j;
  }
  cJSON *list = cJSON_CreateObject();
  cJSON *meta = cJSON_CreateObject();
  cJSON *items = cJSON_CreateArray();
  char rv[24];
  snprintf(rv, sizeof rv, "%llu", (unsigned long long)st->rv);
  int bad = !list || !meta || !items;
  if (!bad) {
    cJSON_AddStringToObject(list, "kind", res->list_kind);
    cJSON_AddStringToObject(list, "apiVersion", res->api_version);
    cJSON_AddItemToObject(list, "metadata", meta);
    cJSON_AddItemToObject(list, "items", items);
    meta = NULL;
    items = NULL;
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(list, "metadata"),
                            "resourceVersion", rv);
  }
  cJSON_Delete(meta);
  cJSON_Delete(items);
  items = cJSON_GetObjectItemCaseSensitive(list, "items");
  size_t taken = 0, remaining = 0;
  const k8s_entry *last = NULL;
  for (; !bad && i < b->n; i++) {
    const k8s_entry *e = &b->v[i];
    if (ns && strcmp(e->ns, ns)) break;
    if (sel && !kb_k8s_obj_match(e->o, sel)) continue;
    if (o.limit && taken == o.limit) {
      remaining++;
      continue;
    }
    cJSON *c = kb_k8s_obj_copy(e->o);
    if (!c || !cJSON_AddItemToArray(items, c)) {
      cJSON_Delete(c);
      bad = 1;
    }
    taken++;
    last = e;
  }
  kb_k8s_selector_free(sel);
  if (!bad && remaining && last) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(list, "metadata");
    char *tok = encode_continue(st->rv, last->ns, last->name);
    bad = !tok || !cJSON_AddStringToObject(m, "continue", tok) ||
          !cJSON_AddNumberToObject(m, "remainingItemCount", (double)remaining);
    free(tok);
  }
  if (bad) {
    cJSON_Delete(list);
    return kb_k8s_oom(err);
  }
  *out = list;
  return 0;
}
