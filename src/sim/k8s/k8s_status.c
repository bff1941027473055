/* Errors, Status objects, metadata helpers and timestamps of the object
 * store (k8s_internal.h). */
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

/* ---- small helpers -------------------------------------------------- */

int kb_k8s_error_set(kb_k8s_error *err, int code, const char *reason, const char *fmt, ...) {
  if (err) {
    err->code = code;
    snprintf(err->reason, sizeof err->reason, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->name[0] = '\0';
    err->n_causes = 0;
  }
  return -code;
}

void kb_k8s_error_cause(kb_k8s_error *err, const char *reason, const char *message,
                        const char *field) {
  if (!err || err->n_causes >= (int)(sizeof err->causes / sizeof err->causes[0])) return;
  int i = err->n_causes++;
  snprintf(err->causes[i].reason, sizeof err->causes[i].reason, "%s", reason);
  snprintf(err->causes[i].message, sizeof err->causes[i].message, "%s", message);
  snprintf(err->causes[i].field, sizeof err->causes[i].field, "%s", field);
}

int kb_k8s_err_named(kb_k8s_error *err, const char *name, int rc) {
  if (err && name) snprintf(err->name, sizeof err->name, "%.*s", (int)sizeof err->name - 1, name);
  return rc;
}

int kb_k8s_oom(kb_k8s_error *err) {
  return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
}

void kb_k8s_qualified(const kb_k8s_res *res, char *out, size_t n) {
  if (res->group[0]) snprintf(out, n, "%s.%s", res->resource, res->group);
  else snprintf(out, n, "%s", res->resource);
}

const char *kb_k8s_event_name(kb_k8s_event_type t) {
  static const char *names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
  return (unsigned)t < 5 ? names[t] : "ERROR";
}

const char *kb_k8s_meta_str(const cJSON *obj, const char *field) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, field));
}

const char *kb_k8s_annotation(const cJSON *obj, const char *key) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  return cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "annotations"), key));
}

void kb_k8s_set_meta(cJSON *md, const char *map, const char *key, const char *value) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(md, map);
  if (!cJSON_IsObject(m)) {
    cJSON_DeleteItemFromObjectCaseSensitive(md, map);
    m = cJSON_AddObjectToObject(md, map);
  }
  cJSON_DeleteItemFromObjectCaseSensitive(m, key);
  cJSON_AddStringToObject(m, key, value);
}

cJSON *kb_k8s_meta(cJSON *obj) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  if (cJSON_IsObject(m)) return m;
  if (m) cJSON_DeleteItemFromObjectCaseSensitive(obj, "metadata");
  return cJSON_AddObjectToObject(obj, "metadata");
}

int kb_k8s_set_str(cJSON *obj, const char *key, const char *v) {
  cJSON *s = cJSON_CreateString(v);
  if (!s) return -1;
  if (cJSON_GetObjectItemCaseSensitive(obj, key))
    return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, s) ? 0 : (cJSON_Delete(s), -1);
  return cJSON_AddItemToObject(obj, key, s) ? 0 : (cJSON_Delete(s), -1);
}

int kb_k8s_set_item(cJSON *obj, const char *key, cJSON *v) {
  if (!v) return -1;
  if (cJSON_GetObjectItemCaseSensitive(obj, key))
    return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v) ? 0 : (cJSON_Delete(v), -1);
  return cJSON_AddItemToObject(obj, key, v) ? 0 : (cJSON_Delete(v), -1);
}


void kb_k8s_format_time(double t, char out[32]) {
  time_t s = (time_t)t;
  struct tm tm;
  gmtime_r(&s, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

double kb_k8s_parse_time(const char *s) {
  if (!s) return -1;
  struct tm tm = {0};
  int n = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
             &tm.tm_min, &tm.tm_sec, &n) != 6)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double t = (double)timegm(&tm);
  const char *p = s + n;
  if (*p == '.') {
    double f = 0.1;
    for (p++; isdigit((unsigned char)*p); p++, f /= 10) t += (*p - '0') * f;
  }
  if (*p == '+' || *p == '-') {
    int hh = 0, mm = 0;
    if (sscanf(p + 1, "%2d:%2d", &hh, &mm) < 1) return -1;
    t -= (*p == '+' ? 1 : -1) * (hh * 3600.0 + mm * 60.0);
  } else if (*p != 'Z' && *p != 'z') {
    return -1;
  }
  return t;
}

double kb_k8s_store_now(const kb_k8s_store *st) {
  if (st->cfg.now) return st->cfg.now(st->cfg.now_ud);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}



/* A 422 worded as the apiserver words it ('Kind "name" is invalid: FIELD:
 * DETAIL') carries its cause in details.causes, as the real one does:
 * kubectl prints "* FIELD: DETAIL" from it, and only "is invalid" without. */
static void add_cause(cJSON *details, const char *message) {
  const char *p = strstr(message, "\" is invalid: ");
  if (!p) return;
  p += strlen("\" is invalid: ");
  const char *colon = strstr(p, ": ");
  if (!colon || colon == p || (size_t)(colon - p) > 200) return;
  const char *detail = colon + 2;
  static const struct { const char *prefix, *reason; } kinds[] = {
    {"Required value", "FieldValueRequired"},   {"Unsupported value", "FieldValueNotSupported"},
    {"Forbidden", "FieldValueForbidden"},       {"Duplicate value", "FieldValueDuplicate"},
    {"Too long", "FieldValueTooLong"},          {"Not found", "FieldValueNotFound"},
  };
  const char *reason = "FieldValueInvalid";
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (!strncmp(detail, kinds[i].prefix, strlen(kinds[i].prefix))) reason = kinds[i].reason;
  char field[256];
  snprintf(field, sizeof field, "%.*s", (int)(colon - p), p);
  cJSON *causes = cJSON_AddArrayToObject(details, "causes");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", detail);
  cJSON_AddStringToObject(c, "field", field);
  cJSON_AddItemToArray(causes, c);
}

cJSON *kb_k8s_status_json(const kb_k8s_error *err, const kb_k8s_res *res) {
  cJSON *s = cJSON_CreateObject();
  if (!s) return NULL;
  cJSON_AddStringToObject(s, "kind", "Status");
  cJSON_AddStringToObject(s, "apiVersion", "v1");
  cJSON_AddObjectToObject(s, "metadata");
  cJSON_AddStringToObject(s, "status", "Failure");
  cJSON_AddStringToObject(s, "message", err->message);
  cJSON_AddStringToObject(s, "reason", err->reason);
  if (err->name[0] || res || err->n_causes) {
    cJSON *d = cJSON_AddObjectToObject(s, "details");
    if (err->name[0]) cJSON_AddStringToObject(d, "name", err->name);
    if (res) {
      if (res->group[0]) cJSON_AddStringToObject(d, "group", res->group);
      /* NewInvalid names the kind (kubectl: `The CronJob "x" is invalid`),
       * the others the resource */
      cJSON_AddStringToObject(d, "kind", err->code == 422 ? res->kind : res->resource);
    }
    if (err->n_causes) {
      cJSON *causes = cJSON_AddArrayToObject(d, "causes");
      for (int i = 0; i < err->n_causes; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "reason", err->causes[i].reason);
        cJSON_AddStringToObject(c, "message", err->causes[i].message);
        cJSON_AddStringToObject(c, "field", err->causes[i].field);
        cJSON_AddItemToArray(causes, c);
      }
    } else if (err->code == 422) {
      add_cause(d, err->message);
    }
  }
  cJSON_AddNumberToObject(s, "code", err->code);
  return s;
}

/* ---- base64 (continue tokens) ---------------------------------------------- */

size_t kb_k8s_base64_encode(const char *in, size_t n, char *out) {
  return kb_base64_encode((const uint8_t *)in, n, out);
}

int kb_k8s_base64_decode(const char *in, char *out, size_t cap, size_t *n) {
  unsigned v = 0;
  int bits = 0;
  *n = 0;
  for (const char *p = in; *p && *p != '='; p++) {
    int d = kb_base64_value((unsigned char)*p);
    if (d < 0) return -1;
    v = v << 6 | (unsigned)d;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (*n >= cap) return -1;
      out[(*n)++] = (char)((v >> bits) & 0xff);
    }
  }
  return 0;
}
