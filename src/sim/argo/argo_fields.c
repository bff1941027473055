/* argo-server's fields= parameter on list and get: a comma-separated list
 * of dotted paths ("items.metadata.name,items.status.phase") keeps only
 * those paths (and what leads to them); a leading '-' removes them and
 * keeps the rest. A path matches by plain string prefix, as argo's
 * util/fields does ("items.status.ph" keeps items.status), and arrays are
 * walked through, their elements judged by the array's own path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argo_internal.h"

#define MAX_FIELDS 64

typedef struct cleaner {
  int exclude;
  const char *fields[MAX_FIELDS];
  size_t n;
} cleaner;

static int listed(const cleaner *c, const char *path) {
  for (size_t i = 0; i < c->n; i++)
    if (!strcmp(c->fields[i], path)) return 1;
  return 0;
}

static int leads_to_listed(const cleaner *c, const char *path) {
  size_t n = strlen(path);
  for (size_t i = 0; i < c->n; i++)
    if (!strncmp(c->fields[i], path, n)) return 1;
  return 0;
}

static void clean(const cleaner *c, const char *path, cJSON *item) {
  if (cJSON_IsArray(item)) {
    cJSON *e;
    cJSON_ArrayForEach(e, item) clean(c, path, e);
    return;
  }
  if (!cJSON_IsObject(item)) return;
  for (cJSON *k = item->child, *next; k; k = next) {
    next = k->next;
    size_t len = strlen(path) + strlen(k->string) + 2;
    char *p = malloc(len);
    if (!p) return;
    snprintf(p, len, "%s%s%s", path, *path ? "." : "", k->string);
    int in = listed(c, p), keep = c->exclude ? !in : (in || leads_to_listed(c, p));
    if (!keep) cJSON_Delete(cJSON_DetachItemViaPointer(item, k));
    else if (!in) clean(c, p, k);
    free(p);
  }
}

void kb_argo_fields_prune(cJSON *doc, const char *fields) {
  if (!fields || !*fields) return;
  cleaner c = {0};
  if (*fields == '-') c.exclude = 1, fields++;
  char *copy = strdup(fields);
  if (!copy) return;
  char *save = NULL;
  for (char *f = strtok_r(copy, ",", &save); f && c.n < MAX_FIELDS; f = strtok_r(NULL, ",", &save))
    c.fields[c.n++] = f;
  if (c.n) clean(&c, "", doc);
  free(copy);
}

char *kb_argo_fields_without_prefix(const char *fields, const char *prefix) {
  size_t plen = strlen(prefix), n = strlen(fields);
  char *out = malloc(n + 1);
  if (!out) return NULL;
  size_t o = 0;
  const char *p = fields;
  if (*p == '-') out[o++] = *p++;
  while (*p) {
    if (!strncmp(p, prefix, plen)) p += plen;
    while (*p && *p != ',') out[o++] = *p++;
    if (*p == ',') out[o++] = *p++;
  }
  out[o] = 0;
  return out;
}
