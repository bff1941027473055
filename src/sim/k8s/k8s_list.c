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

/* ---- lists in slices ------------------------------------------------------ */

struct kb_k8s_list_snap {
  kb_k8s_store *st;
  kb_k8s_selector *sel;
  size_t limit;
  k8s_obj **v;      /* candidates (then matches, in place), one reference each */
  size_t n, matched, scanned, taken, remaining;
  size_t written;
  uint64_t rv;
  cJSON *list;      /* the list without items, until the cut is known */
  char *head;       /* then its text up to and including "items":[ */
  char *last_ns, *last_name; /* the last item taken while a limit cuts */
};

void kb_k8s_list_snap_free(kb_k8s_list_snap *s) {
  if (!s) return;
  /* mid-match, v[matched..scanned) hold nothing */
  size_t held = s->scanned < s->n ? s->matched : s->n;
  for (size_t i = 0; i < held; i++) kb_k8s_obj_unref(s->v[i]);
  for (size_t i = s->scanned; held != s->n && i < s->n; i++) kb_k8s_obj_unref(s->v[i]);
  free(s->v);
  kb_k8s_selector_free(s->sel);
  cJSON_Delete(s->list);
  free(s->head);
  free(s->last_ns);
  free(s->last_name);
  free(s);
}

static int keep_last(kb_k8s_list_snap *s, const char *ns, const char *name) {
  free(s->last_ns);
  free(s->last_name);
  s->last_ns = strdup(ns ? ns : "");
  s->last_name = strdup(name ? name : "");
  return s->last_ns && s->last_name ? 0 : -1;
}

kb_k8s_list_snap *kb_k8s_list_snapshot(kb_k8s_store *st, const kb_k8s_res *res,
                                       const kb_k8s_list_opts *opts, kb_k8s_error *err) {
  k8s_bucket *b = kb_k8s_bucket_of(st, res);
  if (!b) {
    kb_k8s_error_set(err, 404, "NotFound", "unknown resource");
    return NULL;
  }
  kb_k8s_list_opts o = {0};
  if (opts) o = *opts;
  const char *ns = res->namespaced && o.ns && *o.ns ? o.ns : NULL;
  kb_k8s_list_snap *s = calloc(1, sizeof *s);
  if (!s) return kb_k8s_oom(err), NULL;
  s->st = st;
  s->limit = o.limit;
  s->rv = st->rv;
  if ((o.label_selector && *o.label_selector) || (o.field_selector && *o.field_selector)) {
    s->sel = kb_k8s_selector_parse(o.label_selector, o.field_selector, res, err);
    if (!s->sel) return kb_k8s_list_snap_free(s), NULL;
  }
  size_t i = ns ? kb_k8s_bucket_search(b, ns, "", NULL) : 0;
  if (o.continue_token && *o.continue_token) {
    char cns[300], cname[300];
    if (decode_continue(o.continue_token, cns, cname, sizeof cns, err))
      return kb_k8s_list_snap_free(s), NULL;
    int found;
    size_t j = kb_k8s_bucket_search(b, cns, cname, &found);
    if (found) j++;
    if (j > i) i = j;
  }
  size_t end = i;
  while (end < b->n && (!ns || !strcmp(b->v[end].ns, ns))) end++;
  s->v = malloc((end > i ? end - i : 1) * sizeof *s->v);
  if (!s->v) return kb_k8s_list_snap_free(s), kb_k8s_oom(err), NULL;
  for (size_t k = i; k < end; k++) {
    kb_k8s_obj_ref(b->v[k].o);
    s->v[s->n++] = b->v[k].o;
  }
  /* without a selector every candidate matches: the cut is known now */
  if (!s->sel) {
    s->matched = s->scanned = s->n;
    s->taken = s->limit && s->n > s->limit ? s->limit : s->n;
    s->remaining = s->n - s->taken;
    if (s->remaining && keep_last(s, b->v[i + s->taken - 1].ns, b->v[i + s->taken - 1].name))
      return kb_k8s_list_snap_free(s), kb_k8s_oom(err), NULL;
  }
  /* kb_k8s_list's members, in its order */
  char rv[24];
  snprintf(rv, sizeof rv, "%llu", (unsigned long long)s->rv);
  cJSON *list = s->list = cJSON_CreateObject();
  cJSON *meta = NULL;
  if (!list || !cJSON_AddStringToObject(list, "kind", res->list_kind) ||
      !cJSON_AddStringToObject(list, "apiVersion", res->api_version) ||
      !(meta = cJSON_AddObjectToObject(list, "metadata")) ||
      !cJSON_AddStringToObject(meta, "resourceVersion", rv))
    return kb_k8s_list_snap_free(s), kb_k8s_oom(err), NULL;
  return s;
}

/* The head's text, once the cut is known: metadata.continue and
 * remainingItemCount as kb_k8s_list writes them. */
static int finish_head(kb_k8s_list_snap *s) {
  cJSON *list = s->list;
  cJSON *m = cJSON_GetObjectItemCaseSensitive(list, "metadata");
  int bad = 0;
  if (s->remaining && s->last_name) {
    char *tok = encode_continue(s->rv, s->last_ns, s->last_name);
    bad = !tok || !cJSON_AddStringToObject(m, "continue", tok) ||
          !cJSON_AddNumberToObject(m, "remainingItemCount", (double)s->remaining);
    free(tok);
  }
  cJSON *items = bad ? NULL : cJSON_AddArrayToObject(list, "items");
  char *text = items ? cJSON_PrintUnformatted(list) : NULL;
  cJSON_Delete(list);
  s->list = NULL;
  size_t n = text ? strlen(text) : 0;
  if (!text || n < 3 || strcmp(text + n - 3, "[]}")) {
    free(text);
    return -1;
  }
  text[n - 2] = '\0'; /* ends with "items":[ */
  s->head = text;
  return 0;
}

int kb_k8s_list_snap_match(kb_k8s_list_snap *s, size_t budget) {
  if (s->head) return 1;
  if (!s->list) return -1;
  if (s->scanned < s->n) {
    size_t stop = s->n - s->scanned > budget ? s->scanned + budget : s->n;
    while (s->scanned < stop) {
      k8s_obj *o = s->v[s->scanned++];
      if (!kb_k8s_obj_match(o, s->sel)) {
        kb_k8s_obj_unref(o);
        continue;
      }
      s->v[s->matched++] = o;
      if (s->limit && s->matched == s->limit) {
        cJSON *t = kb_k8s_obj_copy(o);
        int bad = !t || keep_last(s, kb_k8s_meta_str(t, "namespace"), kb_k8s_meta_str(t, "name"));
        cJSON_Delete(t);
        if (bad) return -1;
      }
    }
    if (s->scanned < s->n) return 0;
    size_t unref_from = s->matched;
    s->taken = s->limit && s->matched > s->limit ? s->limit : s->matched;
    s->remaining = s->matched - s->taken;
    for (size_t k = s->taken; k < unref_from; k++) kb_k8s_obj_unref(s->v[k]); /* counted only */
    s->n = s->taken; /* v[0..taken) hold references from here */
  } else if (s->n > s->taken) {
    for (size_t k = s->taken; k < s->n; k++) kb_k8s_obj_unref(s->v[k]);
    s->n = s->taken;
  }
  return finish_head(s) ? -1 : 1;
}

size_t kb_k8s_list_snap_items(const kb_k8s_list_snap *s) { return s->taken; }

int kb_k8s_list_snap_write(kb_k8s_list_snap *s, kb_buf *out, size_t budget) {
  if (!s->head || s->n != s->taken) return -1; /* kb_k8s_list_snap_match first */
  if (s->written == 0 && kb_buf_append(out, s->head, strlen(s->head))) return -1;
  size_t stop = s->taken - s->written > budget ? s->written + budget : s->taken;
  for (; s->written < stop; s->written++) {
    if ((s->written && kb_buf_append(out, ",", 1)) || kb_k8s_obj_append(s->v[s->written], out))
      return -1;
  }
  if (s->written < s->taken) return 0;
  return kb_buf_append(out, "]}", 2) ? -1 : 1;
}
