/* Label and field selectors, and the dotted paths they (and printer
 * columns) read.
 *
 * Labels: "a=b", "a==b", "a!=b", "a in (x,y)", "a notin (x)", "a", "!a",
 * "a>3", "a<3", comma-separated (commas inside parentheses belong to the
 * value list). A "!=" or "notin" requirement also matches objects without
 * the label, as in Kubernetes. Fields: "path=v", "path==v", "path!=v" on
 * metadata.name, metadata.namespace and the type's field labels. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"

typedef enum op { OP_EQ, OP_NE, OP_IN, OP_NOTIN, OP_EXISTS, OP_NOT_EXISTS, OP_GT, OP_LT } op;

typedef struct req {
  op op;
  int field; /* 1: a field requirement */
  char *key;
  char **values;
  size_t n_values;
} req;

struct kb_k8s_selector {
  req *reqs;
  size_t n;
};

void kb_k8s_selector_free(kb_k8s_selector *sel) {
  if (!sel) return;
  for (size_t i = 0; i < sel->n; i++) {
    free(sel->reqs[i].key);
    for (size_t j = 0; j < sel->reqs[i].n_values; j++) free(sel->reqs[i].values[j]);
    free(sel->reqs[i].values);
  }
  free(sel->reqs);
  free(sel);
}

static char *trimmed(const char *s, size_t n) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  char *r = malloc(n + 1);
  if (r) {
    memcpy(r, s, n);
    r[n] = '\0';
  }
  return r;
}

static int add_value(req *r, const char *s, size_t n) {
  char **v = realloc(r->values, (r->n_values + 1) * sizeof *v);
  if (!v) return -1;
  r->values = v;
  if (!(v[r->n_values] = trimmed(s, n))) return -1;
  r->n_values++;
  return 0;
}

static req *new_req(kb_k8s_selector *sel) {
  req *v = realloc(sel->reqs, (sel->n + 1) * sizeof *v);
  if (!v) return NULL;
  sel->reqs = v;
  memset(&v[sel->n], 0, sizeof *v);
  return &v[sel->n++];
}

static int valid_key(const char *k) {
  if (!*k) return 0;
  for (const char *p = k; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr("-_./", *p))) return 0;
  return 1;
}

/* A label value: empty, or at most 63 of [-A-Za-z0-9_.] starting and
 * ending with an alphanumeric (the apiserver's regex). */
static int valid_value(const char *v) {
  size_t n = strlen(v);
  if (n == 0) return 1;
  if (n > 63 || !isalnum((unsigned char)v[0]) || !isalnum((unsigned char)v[n - 1])) return 0;
  for (const char *p = v; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr("-_.", *p))) return 0;
  return 1;
}

static int bad_value(kb_k8s_error *err, const char *key, const char *value) {
  return kb_k8s_error_set(err, 400, "BadRequest",
                          "unable to parse requirement: values[0][%s]: Invalid value: \"%s\": a valid "
                          "label must be an empty string or consist of alphanumeric characters, '-', "
                          "'_' or '.', and must start and end with an alphanumeric character (e.g. "
                          "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                          "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')", key, value);
}

static int bad(kb_k8s_error *err, const char *what, const char *text) {
  return kb_k8s_error_set(err, 400, "BadRequest", "unable to parse requirement: %s: \"%s\"", what,
                          text);
}

/* One label requirement from text[0..n). */
static int parse_label(kb_k8s_selector *sel, const char *text, size_t n, kb_k8s_error *err) {
  char *t = trimmed(text, n);
  req *r = t ? new_req(sel) : NULL;
  if (!r) return free(t), kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  int rc = 0;
  char *p;
  if (t[0] == '!') {
    r->op = OP_NOT_EXISTS;
    r->key = trimmed(t + 1, strlen(t + 1));
  } else if ((p = strstr(t, "!=")) != NULL) {
    r->op = OP_NE;
    r->key = trimmed(t, (size_t)(p - t));
    rc = add_value(r, p + 2, strlen(p + 2));
  } else if ((p = strstr(t, "==")) != NULL || (p = strchr(t, '=')) != NULL) {
    r->op = OP_EQ;
    size_t skip = p[1] == '=' ? 2 : 1;
    r->key = trimmed(t, (size_t)(p - t));
    rc = add_value(r, p + skip, strlen(p + skip));
  } else if ((p = strchr(t, '>')) != NULL || (p = strchr(t, '<')) != NULL) {
    r->op = *p == '>' ? OP_GT : OP_LT;
    r->key = trimmed(t, (size_t)(p - t));
    rc = add_value(r, p + 1, strlen(p + 1));
  } else if ((p = strchr(t, '(')) != NULL) {
    char *close = strrchr(t, ')');
    char *sp = t;
    while (*sp && !isspace((unsigned char)*sp)) sp++;
    char *word = sp;
    while (isspace((unsigned char)*word)) word++;
    if (!close || close[1] || !strncmp(word, "(", 1)) {
      rc = bad(err, "expected in or notin", t);
    } else {
      r->key = trimmed(t, (size_t)(sp - t));
      if (!strncmp(word, "notin", 5) && (isspace((unsigned char)word[5]) || word[5] == '('))
        r->op = OP_NOTIN;
      else if (!strncmp(word, "in", 2) && (isspace((unsigned char)word[2]) || word[2] == '('))
        r->op = OP_IN;
      else
        rc = bad(err, "expected in or notin", t);
      for (char *v = p + 1; !rc && v < close;) {
        char *c = memchr(v, ',', (size_t)(close - v));
        char *e = c ? c : close;
        rc = add_value(r, v, (size_t)(e - v)) ? -500 : 0;
        v = e + 1;
      }
    }
  } else {
    r->op = OP_EXISTS;
    r->key = trimmed(t, strlen(t));
  }
  if (!rc && (!r->key || !valid_key(r->key))) rc = bad(err, "invalid label key", t);
  if (!rc && r->op != OP_GT && r->op != OP_LT)
    for (size_t i = 0; i < r->n_values && !rc; i++)
      if (!valid_value(r->values[i])) rc = bad_value(err, r->key, r->values[i]);
  free(t);
  return rc < 0 ? rc : 0;
}

static int field_allowed(const kb_k8s_res *res, const char *key) {
  if (!strcmp(key, "metadata.name") || !strcmp(key, "metadata.namespace")) return 1;
  if (!res) return 1;
  size_t n = strlen(key);
  for (const char *p = res->field_labels; p && *p;) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == n && !strncmp(p, key, n)) return 1;
    p = c ? c + 1 : NULL;
  }
  return 0;
}

static int parse_field(kb_k8s_selector *sel, const char *text, size_t n, const kb_k8s_res *res,
                       kb_k8s_error *err) {
  char *t = trimmed(text, n);
  req *r = t ? new_req(sel) : NULL;
  if (!r) return free(t), kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  r->field = 1;
  char *p;
  int rc = 0;
  if ((p = strstr(t, "!=")) != NULL) {
    r->op = OP_NE;
    r->key = trimmed(t, (size_t)(p - t));
    rc = add_value(r, p + 2, strlen(p + 2));
  } else if ((p = strchr(t, '=')) != NULL) {
    size_t skip = p[1] == '=' ? 2 : 1;
    r->op = OP_EQ;
    r->key = trimmed(t, (size_t)(p - t));
    rc = add_value(r, p + skip, strlen(p + skip));
  } else {
    rc = kb_k8s_error_set(err, 400, "BadRequest", "invalid selector: '%s'; can't understand '%s'",
                          t, t);
  }
  if (!rc && !r->key) rc = kb_k8s_error_set(err, 500, "InternalError", "out of memory");
  if (!rc && !field_allowed(res, r->key))
    rc = kb_k8s_error_set(err, 400, "BadRequest", "field label not supported: %s", r->key);
  free(t);
  return rc < 0 ? rc : 0;
}

/* Splits on commas outside parentheses. */
static int parse_list(kb_k8s_selector *sel, const char *s, int fields, const kb_k8s_res *res,
                      kb_k8s_error *err) {
  if (!s) return 0;
  const char *start = s;
  int depth = 0;
  for (const char *p = s;; p++) {
    if (*p == '(') depth++;
    if (*p == ')') depth--;
    if ((*p == ',' && depth == 0) || !*p) {
      size_t n = (size_t)(p - start);
      const char *q = start;
      while (q < p && isspace((unsigned char)*q)) q++;
      if (q < p) {
        int rc = fields ? parse_field(sel, start, n, res, err) : parse_label(sel, start, n, err);
        if (rc) return rc;
      }
      if (!*p) break;
      start = p + 1;
    }
  }
  return 0;
}

kb_k8s_selector *kb_k8s_selector_parse(const char *labels, const char *fields,
                                       const kb_k8s_res *res, kb_k8s_error *err) {
  kb_k8s_selector *sel = calloc(1, sizeof *sel);
  if (!sel) {
    kb_k8s_error_set(err, 500, "InternalError", "out of memory");
    return NULL;
  }
  if (parse_list(sel, labels, 0, res, err) || parse_list(sel, fields, 1, res, err)) {
    kb_k8s_selector_free(sel);
    return NULL;
  }
  return sel;
}

/* ---- paths ------------------------------------------------------------------ */

/* Segment "name", "name[3]" or "name[-1:]". */
static const cJSON *step(const cJSON *node, const char *seg, size_t n) {
  const char *br = memchr(seg, '[', n);
  size_t klen = br ? (size_t)(br - seg) : n;
  char key[256];
  if (klen >= sizeof key) return NULL;
  memcpy(key, seg, klen);
  key[klen] = '\0';
  if (klen) node = cJSON_GetObjectItemCaseSensitive(node, key);
  while (node && br) {
    long idx = strtol(br + 1, NULL, 10);
    int size = cJSON_GetArraySize(node);
    if (!cJSON_IsArray(node)) return NULL;
    if (idx < 0) idx += size;
    if (idx < 0 || idx >= size) return NULL;
    node = cJSON_GetArrayItem(node, (int)idx);
    br = memchr(br + 1, '[', n - (size_t)(br + 1 - seg));
  }
  return node;
}

const cJSON *kb_k8s_path(const cJSON *obj, const char *path) {
  const cJSON *node = obj;
  const char *p = path;
  if (*p == '.') p++;
  while (node && *p) {
    const char *dot = p;
    int depth = 0;
    while (*dot && (depth || *dot != '.')) {
      if (*dot == '[') depth++;
      if (*dot == ']') depth--;
      dot++;
    }
    node = step(node, p, (size_t)(dot - p));
    p = *dot ? dot + 1 : dot;
  }
  return node;
}

static const char *label_of(const cJSON *obj, const char *key) {
  const cJSON *labels =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "labels");
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(labels, key));
}

/* A field's value as text ("" when absent, as the apiserver's field sets). */
static void field_text(const cJSON *obj, const char *key, char *out, size_t n) {
  const cJSON *v = kb_k8s_path(obj, key);
  if (cJSON_IsString(v)) snprintf(out, n, "%s", v->valuestring);
  else if (cJSON_IsBool(v)) snprintf(out, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
  else if (cJSON_IsNumber(v)) snprintf(out, n, "%.17g", v->valuedouble);
  else out[0] = '\0';
}

static int req_match(const req *r, const cJSON *obj) {
  char buf[512];
  const char *v;
  if (r->field) {
    field_text(obj, r->key, buf, sizeof buf);
    v = buf;
  } else {
    v = label_of(obj, r->key);
  }
  switch (r->op) {
  case OP_EXISTS: return v != NULL;
  case OP_NOT_EXISTS: return v == NULL;
  case OP_EQ: return v && !strcmp(v, r->values[0]);
  case OP_NE: return !v || strcmp(v, r->values[0]);
  case OP_GT:
  case OP_LT: {
    if (!v) return 0;
    char *e1, *e2;
    double a = strtod(v, &e1), b = strtod(r->values[0], &e2);
    if (*e1 || *e2) return 0;
    return r->op == OP_GT ? a > b : a < b;
  }
  case OP_IN:
  case OP_NOTIN: {
    int in = 0;
    for (size_t i = 0; v && i < r->n_values && !in; i++) in = !strcmp(v, r->values[i]);
    return r->op == OP_IN ? in : !in;
  }
  }
  return 0;
}

int kb_k8s_selector_match(const kb_k8s_selector *sel, const cJSON *obj) {
  for (size_t i = 0; sel && i < sel->n; i++)
    if (!req_match(&sel->reqs[i], obj)) return 0;
  return 1;
}

static int append(char *out, size_t n, size_t *at, const char *fmt, const char *a, const char *b) {
  int w = snprintf(out + *at, n - *at, fmt, *at ? "," : "", a, b);
  if (w < 0 || (size_t)w >= n - *at) return -1;
  *at += (size_t)w;
  return 0;
}

int kb_k8s_selector_text(const cJSON *sel, char *out, size_t n) {
  size_t at = 0;
  out[0] = 0;
  const cJSON *kv, *e;
  cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(sel, "matchLabels")) {
    if (!cJSON_IsString(kv) || append(out, n, &at, "%s%s=%s", kv->string, kv->valuestring))
      return -1;
  }
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(sel, "matchExpressions")) {
    const char *key = kb_k8s_path_str(e, "key"), *oper = kb_k8s_path_str(e, "operator");
    if (!key || !oper) return -1;
    char vals[512];
    size_t vn = 0;
    vals[0] = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(e, "values")) {
      if (!cJSON_IsString(v) || append(vals, sizeof vals, &vn, "%s%s%s", v->valuestring, ""))
        return -1;
    }
    int rc = !strcmp(oper, "In")       ? append(out, n, &at, "%s%s in (%s)", key, vals)
             : !strcmp(oper, "NotIn")  ? append(out, n, &at, "%s%s notin (%s)", key, vals)
             : !strcmp(oper, "Exists") ? append(out, n, &at, "%s%s%s", key, "")
             : !strcmp(oper, "DoesNotExist") ? append(out, n, &at, "%s!%s%s", key, "")
                                           : -1;
    if (rc) return -1;
  }
  return 0;
}

double kb_k8s_path_num(const cJSON *obj, const char *path, double dflt) {
  const cJSON *v = kb_k8s_path(obj, path);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *kb_k8s_path_str(const cJSON *obj, const char *path) {
  return cJSON_GetStringValue(kb_k8s_path(obj, path));
}
