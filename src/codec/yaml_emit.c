/* cJSON trees -> YAML text through libyaml's emitter.
 *
 * libyaml chooses a safe style from the characters of a scalar but knows
 * nothing of types, so the strings a reader would re-type ("true", "123",
 * "yes") are marked double-quoted here before libyaml sees them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "kb/buf.h"
#include "kb/json.h"
#include "kb/yaml.h"
#include "yaml_scalar.h"

typedef struct emitter {
  yaml_emitter_t y;
  kb_buf out;
  int out_failed;
  kb_yaml_error *err;
  int depth; /* path[0..depth] are the nodes from the root to the current one */
  const cJSON *path[KB_YAML_MAX_DEPTH + 2];
} emitter;

static int write_out(void *data, unsigned char *bytes, size_t size) {
  emitter *e = data;
  if (kb_buf_append(&e->out, bytes, size)) {
    e->out_failed = 1;
    return 0;
  }
  return 1;
}

/* JSON Pointer (RFC 6901) of the current node, for error messages. */
static void format_path(const emitter *e, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 1; i <= e->depth && used + 1 < n; i++) {
    const cJSON *parent = e->path[i - 1], *node = e->path[i];
    if (cJSON_IsArray(parent)) {
      int index = 0;
      for (const cJSON *c = parent->child; c && c != node; c = c->next) index++;
      used += (size_t)snprintf(buf + used, n - used, "/%d", index);
      continue;
    }
    buf[used++] = '/';
    for (const char *k = node->string ? node->string : ""; *k && used + 2 < n; k++) {
      if (*k == '~' || *k == '/') {
        buf[used++] = '~';
        buf[used++] = *k == '~' ? '0' : '1';
      } else {
        buf[used++] = *k;
      }
    }
    buf[used] = '\0';
  }
  if (used >= n) buf[n - 1] = '\0';
  if (!buf[0]) snprintf(buf, n, "/");
}

static int fail(emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(emitter *e, const char *fmt, ...) {
  char what[128], where[112];
  e->err->code = KB_YAML_EINVALID;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  format_path(e, where, sizeof where);
  snprintf(e->err->message, sizeof e->err->message, "%s at %s", what, where);
  return -1;
}

static int fail_oom(emitter *e) {
  e->err->code = KB_YAML_ENOMEM;
  snprintf(e->err->message, sizeof e->err->message, "out of memory");
  return -1;
}

static int emit(emitter *e, yaml_event_t *ev, int initialized) {
  if (!initialized) return fail_oom(e);
  if (yaml_emitter_emit(&e->y, ev)) return 0;
  if (e->out_failed || e->y.error == YAML_MEMORY_ERROR) return fail_oom(e);
  return fail(e, "%s", e->y.problem ? e->y.problem : "libyaml emitter error");
}

static int emit_scalar(emitter *e, const char *s, size_t len, yaml_scalar_style_t style) {
  yaml_event_t ev;
  int ok = yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)len, 1, 1,
                                        style);
  return emit(e, &ev, ok);
}

static int emit_string(emitter *e, const char *s) {
  if (!s) s = "";
  size_t len = strlen(s);
  if (kb_json_utf8_bad(s, len) != len) return fail(e, "invalid UTF-8 in string");
  yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
  if (memchr(s, '\n', len)) {
    style = YAML_LITERAL_SCALAR_STYLE; /* libyaml falls back to quotes if it must */
  } else if (kb_yaml_resolve(s, len) != KB_YAML_STR || kb_yaml_retypes_in_yaml11(s, len)) {
    style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
  }
  return emit_scalar(e, s, len, style);
}

/* Integral values within +-2^53 as integers; others in the shortest %g form
 * that reads back as the same double. */
static void format_number(double d, char buf[32]) {
  if (isnan(d)) {
    strcpy(buf, ".nan");
  } else if (isinf(d)) {
    strcpy(buf, d < 0 ? "-.inf" : ".inf");
  } else if (d == floor(d) && fabs(d) <= 9007199254740992.0) {
    snprintf(buf, 32, "%lld", (long long)d);
  } else {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(buf, 32, "%.*g", prec, d);
      if (strtod(buf, NULL) == d) break;
    }
    /* %g may have written a locale's decimal comma. */
    for (char *p = buf; *p; p++) {
      if (*p == ',') *p = '.';
    }
  }
}

static int emit_node(emitter *e, const cJSON *node);

static int by_key(const void *a, const void *b) {
  const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
  return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

static int emit_child(emitter *e, const cJSON *child) {
  e->path[++e->depth] = child;
  int rc = emit_node(e, child);
  if (rc == 0) e->depth--;
  return rc; /* on failure the path stays, naming the culprit */
}

static int emit_object(emitter *e, const cJSON *obj) {
  yaml_event_t ev;
  if (emit(e, &ev, yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                        YAML_BLOCK_MAPPING_STYLE))) {
    return -1;
  }
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n++;
  const cJSON **sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!sorted) return fail_oom(e);
  n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) sorted[n++] = c;
  qsort(sorted, n, sizeof *sorted, by_key);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    e->path[++e->depth] = sorted[i];
    rc = emit_string(e, sorted[i]->string);
    if (rc == 0) {
      e->depth--;
      rc = emit_child(e, sorted[i]);
    }
  }
  free(sorted);
  if (rc) return rc;
  return emit(e, &ev, yaml_mapping_end_event_initialize(&ev));
}

static int emit_array(emitter *e, const cJSON *arr) {
  yaml_event_t ev;
  if (emit(e, &ev, yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                         YAML_BLOCK_SEQUENCE_STYLE))) {
    return -1;
  }
  for (const cJSON *c = arr->child; c; c = c->next) {
    if (emit_child(e, c)) return -1;
  }
  return emit(e, &ev, yaml_sequence_end_event_initialize(&ev));
}

static int emit_node(emitter *e, const cJSON *node) {
  char num[32];
  switch (node->type & 0xFF) {
  case cJSON_NULL:
    return emit_scalar(e, "null", 4, YAML_PLAIN_SCALAR_STYLE);
  case cJSON_True:
    return emit_scalar(e, "true", 4, YAML_PLAIN_SCALAR_STYLE);
  case cJSON_False:
    return emit_scalar(e, "false", 5, YAML_PLAIN_SCALAR_STYLE);
  case cJSON_Number:
    format_number(node->valuedouble, num);
    return emit_scalar(e, num, strlen(num), YAML_PLAIN_SCALAR_STYLE);
  case cJSON_String:
    return emit_string(e, node->valuestring);
  case cJSON_Raw: {
    const char *s = node->valuestring ? node->valuestring : "";
    size_t len = strlen(s);
    if (!kb_yaml_is_int(s, len) && !kb_yaml_is_float(s, len)) {
      return fail(e, "raw node \"%.40s\" is not a number", s);
    }
    return emit_scalar(e, s, len, YAML_PLAIN_SCALAR_STYLE);
  }
  case cJSON_Object:
  case cJSON_Array:
    if (e->depth >= KB_YAML_MAX_DEPTH) {
      return fail(e, "nesting deeper than %d levels", KB_YAML_MAX_DEPTH);
    }
    return cJSON_IsObject(node) ? emit_object(e, node) : emit_array(e, node);
  default:
    return fail(e, "invalid cJSON node (type %d)", node->type);
  }
}

static int emit_document(emitter *e, const cJSON *doc, int explicit_start) {
  yaml_event_t ev;
  e->depth = 0;
  e->path[0] = doc;
  if (emit(e, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL,
                                                         !explicit_start))) {
    return -1;
  }
  if (emit_node(e, doc)) return -1;
  return emit(e, &ev, yaml_document_end_event_initialize(&ev, 1));
}

/* Emits docs (an array) or the single document doc. */
static char *emit_stream(const cJSON *doc, const cJSON *docs, kb_yaml_error *err) {
  kb_yaml_error scratch;
  if (!err) err = &scratch;
  err->code = err->line = err->column = 0;
  err->message[0] = '\0';
  emitter *e = calloc(1, sizeof *e);
  if (!e) {
    err->code = KB_YAML_ENOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
    return NULL;
  }
  e->err = err;
  kb_buf_init(&e->out);
  char *text = NULL;
  if (!yaml_emitter_initialize(&e->y)) {
    err->code = KB_YAML_ENOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
    free(e);
    return NULL;
  }
  yaml_emitter_set_output(&e->y, write_out, e);
  yaml_emitter_set_indent(&e->y, 2);
  yaml_emitter_set_width(&e->y, -1); /* never fold long scalars */
  yaml_emitter_set_unicode(&e->y, 1);
  yaml_emitter_set_break(&e->y, YAML_LN_BREAK);

  yaml_event_t ev;
  int rc = emit(e, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
  if (rc == 0 && docs) {
    for (const cJSON *d = docs->child; d && rc == 0; d = d->next) rc = emit_document(e, d, 1);
  } else if (rc == 0) {
    rc = emit_document(e, doc, 0);
  }
  if (rc == 0) rc = emit(e, &ev, yaml_stream_end_event_initialize(&ev));
  if (rc == 0 && !yaml_emitter_flush(&e->y)) rc = fail_oom(e);
  if (rc == 0) {
    text = kb_buf_detach(&e->out, NULL);
    if (!text) text = strdup("");
    if (!text) {
      err->code = KB_YAML_ENOMEM;
      snprintf(err->message, sizeof err->message, "out of memory");
    }
  }
  yaml_emitter_delete(&e->y);
  kb_buf_free(&e->out);
  free(e);
  return text;
}

static char *refuse(kb_yaml_error *err, const char *why) {
  if (err) {
    err->code = KB_YAML_EINVALID;
    err->line = err->column = 0;
    snprintf(err->message, sizeof err->message, "%s", why);
  }
  return NULL;
}

char *kb_yaml_emit(const cJSON *doc, kb_yaml_error *err) {
  if (!doc) return refuse(err, "no document (NULL)");
  return emit_stream(doc, NULL, err);
}

char *kb_yaml_emit_all(const cJSON *docs, kb_yaml_error *err) {
  if (!cJSON_IsArray(docs)) return refuse(err, "the documents must be a cJSON array");
  return emit_stream(NULL, docs, err);
}
