/* Request bodies as the KFP server reads them: protojson with
 * DiscardUnknown=false behind grpc-gateway. A SAX pass over the text
 * checks every key and value against the message schema (proto names
 * and their lowerCamelCase JSON names are both accepted), so the error
 * can name the field and its position as protojson does:
 *   proto: (line 1:2): unknown field "foo"
 * then cJSON builds the tree the handlers read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/json.h"
#include "kfp_internal.h"

typedef enum ftype { F_STR, F_BOOL, F_I32, F_I64, F_DBL, F_ENUM, F_MSG, F_ANY, F_MAP, F_TIME } ftype;

typedef struct field {
  const char *name;
  ftype type;
  int repeated;
  const kfp_schema *msg;
  const char *const *enums;
} field;

struct kfp_schema {
  const field *fields;
  size_t n;
};

#define SCHEMA(var, ...)                                                         \
  static const field var##_f[] = {__VA_ARGS__};                                   \
  const kfp_schema var = {var##_f, sizeof var##_f / sizeof var##_f[0]}
#define LSCHEMA(var, ...)                                                        \
  static const field var##_f[] = {__VA_ARGS__};                                   \
  static const kfp_schema var = {var##_f, sizeof var##_f / sizeof var##_f[0]}
#define S(n) {n, F_STR, 0, NULL, NULL}
#define B(n) {n, F_BOOL, 0, NULL, NULL}
#define I32(n) {n, F_I32, 0, NULL, NULL}
#define I64(n) {n, F_I64, 0, NULL, NULL}
#define DBL(n) {n, F_DBL, 0, NULL, NULL}
#define T(n) {n, F_TIME, 0, NULL, NULL}
#define A(n) {n, F_ANY, 0, NULL, NULL}
#define MAP(n) {n, F_MAP, 0, NULL, NULL}
#define E(n, e) {n, F_ENUM, 0, NULL, e}
#define M(n, m) {n, F_MSG, 0, &m, NULL}
#define RM(n, m) {n, F_MSG, 1, &m, NULL}
#define RS(n) {n, F_STR, 1, NULL, NULL}
#define RI32(n) {n, F_I32, 1, NULL, NULL}
#define RI64(n) {n, F_I64, 1, NULL, NULL}

static const char *const e_storage2[] = {"STORAGE_STATE_UNSPECIFIED", "AVAILABLE", "ARCHIVED", NULL};
static const char *const e_runtime[] = {"RUNTIME_STATE_UNSPECIFIED", "PENDING", "RUNNING",
                                        "SUCCEEDED", "SKIPPED", "FAILED", "CANCELING",
                                        "CANCELED", "PAUSED", NULL};
static const char *const e_mode2[] = {"MODE_UNSPECIFIED", "ENABLE", "DISABLE", NULL};
static const char *const e_status2[] = {"STATUS_UNSPECIFIED", "ENABLED", "DISABLED", NULL};
static const char *const e_op2[] = {"OPERATION_UNSPECIFIED", "EQUALS", "NOT_EQUALS",
                                    "GREATER_THAN", "GREATER_THAN_EQUALS", "LESS_THAN",
                                    "LESS_THAN_EQUALS", "IN", "IS_SUBSTRING", NULL};
static const char *const e_op1[] = {"UNKNOWN", "EQUALS", "NOT_EQUALS", "GREATER_THAN",
                                    "GREATER_THAN_EQUALS", "LESS_THAN", "LESS_THAN_EQUALS",
                                    "IN", "IS_SUBSTRING", NULL};
static const char *const e_rtype[] = {"UNKNOWN_RESOURCE_TYPE", "EXPERIMENT", "JOB", "PIPELINE",
                                      "PIPELINE_VERSION", "NAMESPACE", NULL};
static const char *const e_rel[] = {"UNKNOWN_RELATIONSHIP", "OWNER", "CREATOR", NULL};
static const char *const e_storage1e[] = {"STORAGESTATE_UNSPECIFIED", "STORAGESTATE_AVAILABLE",
                                          "STORAGESTATE_ARCHIVED", NULL};
static const char *const e_storage1r[] = {"STORAGESTATE_AVAILABLE", "STORAGESTATE_ARCHIVED", NULL};
static const char *const e_mode1[] = {"UNKNOWN_MODE", "ENABLED", "DISABLED", NULL};
static const char *const e_fmt[] = {"UNSPECIFIED", "RAW", "PERCENTAGE", NULL};

/* ---- v2beta1 ---- */
LSCHEMA(s2_url, S("pipeline_url"));
SCHEMA(kb_kfp_s_v2_pipeline, S("pipeline_id"), S("display_name"), S("name"), S("description"),
       T("created_at"), S("namespace"), A("error"), MAP("tags"));
SCHEMA(kb_kfp_s_v2_version, S("pipeline_id"), S("pipeline_version_id"), S("display_name"),
       S("name"), S("description"), T("created_at"), M("package_url", s2_url),
       S("code_source_url"), A("pipeline_spec"), A("error"), MAP("tags"));
SCHEMA(kb_kfp_s_v2_create_pv, M("pipeline", kb_kfp_s_v2_pipeline),
       M("pipeline_version", kb_kfp_s_v2_version));
SCHEMA(kb_kfp_s_v2_experiment, S("experiment_id"), S("display_name"), S("description"),
       T("created_at"), S("namespace"), E("storage_state", e_storage2),
       T("last_run_created_at"));
LSCHEMA(s2_pvref, S("pipeline_id"), S("pipeline_version_id"));
LSCHEMA(s2_rtconf, A("parameters"), S("pipeline_root"));
SCHEMA(kb_kfp_s_v2_run, S("experiment_id"), S("run_id"), S("display_name"),
       E("storage_state", e_storage2), S("description"), S("pipeline_version_id"),
       A("pipeline_spec"), M("pipeline_version_reference", s2_pvref),
       M("runtime_config", s2_rtconf), S("service_account"), T("created_at"),
       T("scheduled_at"), T("finished_at"), E("state", e_runtime), A("error"),
       A("run_details"), S("recurring_run_id"), A("state_history"), A("plugins_input"),
       A("plugins_output"));
LSCHEMA(s_cron, T("start_time"), T("end_time"), S("cron"));
LSCHEMA(s_periodic, T("start_time"), T("end_time"), I64("interval_second"));
LSCHEMA(s_trigger, M("cron_schedule", s_cron), M("periodic_schedule", s_periodic));
SCHEMA(kb_kfp_s_v2_recurring, S("recurring_run_id"), S("display_name"), S("description"),
       S("pipeline_version_id"), A("pipeline_spec"),
       M("pipeline_version_reference", s2_pvref), M("runtime_config", s2_rtconf),
       S("service_account"), I64("max_concurrency"), M("trigger", s_trigger),
       E("mode", e_mode2), T("created_at"), T("updated_at"), E("status", e_status2),
       A("error"), B("no_catchup"), S("namespace"), S("experiment_id"), A("plugins_input"));
LSCHEMA(s_ints, RI32("values"));
LSCHEMA(s_longs, RI64("values"));
LSCHEMA(s_strs, RS("values"));
LSCHEMA(s2_pred, E("operation", e_op2), S("key"), I32("int_value"), I64("long_value"),
        S("string_value"), T("timestamp_value"), M("int_values", s_ints),
        M("long_values", s_longs), M("string_values", s_strs));
SCHEMA(kb_kfp_s_v2_filter, RM("predicates", s2_pred));

/* ---- v1beta1 ---- */
LSCHEMA(s1_key, E("type", e_rtype), S("id"));
LSCHEMA(s1_ref, M("key", s1_key), S("name"), E("relationship", e_rel));
LSCHEMA(s1_param, S("name"), S("value"));
SCHEMA(kb_kfp_s_v1_version, S("id"), S("name"), T("created_at"), RM("parameters", s1_param),
       S("code_source_url"), M("package_url", s2_url), RM("resource_references", s1_ref),
       S("description"));
SCHEMA(kb_kfp_s_v1_pipeline, S("id"), T("created_at"), S("name"), S("description"),
       RM("parameters", s1_param), M("url", s2_url), S("error"),
       M("default_version", kb_kfp_s_v1_version), RM("resource_references", s1_ref));
SCHEMA(kb_kfp_s_v1_experiment, S("id"), S("name"), S("description"), T("created_at"),
       RM("resource_references", s1_ref), E("storage_state", e_storage1e));
LSCHEMA(s1_spec, S("pipeline_id"), S("pipeline_name"), S("workflow_manifest"),
        S("pipeline_manifest"), RM("parameters", s1_param), M("runtime_config", s2_rtconf));
LSCHEMA(s1_metric, S("name"), S("node_id"), DBL("number_value"), E("format", e_fmt));
SCHEMA(kb_kfp_s_v1_run, S("id"), S("name"), E("storage_state", e_storage1r), S("description"),
       M("pipeline_spec", s1_spec), RM("resource_references", s1_ref), S("service_account"),
       T("created_at"), T("scheduled_at"), T("finished_at"), S("status"), S("error"),
       RM("metrics", s1_metric));
SCHEMA(kb_kfp_s_v1_job, S("id"), S("name"), S("description"), M("pipeline_spec", s1_spec),
       RM("resource_references", s1_ref), S("service_account"), I64("max_concurrency"),
       M("trigger", s_trigger), E("mode", e_mode1), T("created_at"), T("updated_at"),
       S("status"), S("error"), B("enabled"), B("no_catchup"));
LSCHEMA(s1_pred, E("op", e_op1), S("key"), I32("int_value"), I64("long_value"),
        S("string_value"), T("timestamp_value"), M("int_values", s_ints),
        M("long_values", s_longs), M("string_values", s_strs));
SCHEMA(kb_kfp_s_v1_filter, RM("predicates", s1_pred));

/* ---- the validating pass ---- */

typedef struct frame {
  const kfp_schema *msg;  /* message frame */
  const field *elem;      /* array frame: the repeated field */
  int map;                /* map<string,string> frame */
} frame;

typedef struct vstate {
  frame st[48];
  int depth;            /* frames in use */
  int any;              /* nesting inside a free-form (Struct/Value) value */
  const field *pending; /* field whose value comes next */
  int pending_map;      /* a map value comes next */
  const kfp_schema *top;
  char msg[256];
  int key_error;        /* the error points at a key */
} vstate;

/* name == key, or key is name's lowerCamelCase. */
static int name_matches(const char *name, const char *key, size_t len) {
  if (strlen(name) == len && !memcmp(name, key, len)) return 1;
  size_t i = 0;
  for (const char *p = name; *p; p++) {
    char c = *p;
    if (c == '_' && p[1]) c = (char)(p[1] >= 'a' && p[1] <= 'z' ? p[1] - 32 : p[1]), p++;
    if (i >= len || key[i] != c) return 0;
    i++;
  }
  return i == len;
}

static void json_name(const char *name, char *out, size_t n) {
  size_t i = 0;
  for (const char *p = name; *p && i + 1 < n; p++) {
    char c = *p;
    if (c == '_' && p[1]) c = (char)(p[1] >= 'a' && p[1] <= 'z' ? p[1] - 32 : p[1]), p++;
    out[i++] = c;
  }
  out[i] = 0;
}

static const char *kind_name(ftype t) {
  switch (t) {
  case F_STR: return "string";
  case F_BOOL: return "bool";
  case F_I32: return "int32";
  case F_I64: return "int64";
  case F_DBL: return "double";
  case F_ENUM: return "enum";
  default: return "message";
  }
}

static int type_error(vstate *v, const field *f, const char *raw, size_t len) {
  char jn[64];
  json_name(f->name, jn, sizeof jn);
  snprintf(v->msg, sizeof v->msg, "invalid value for %s field %s: %.*s", kind_name(f->type),
           jn, (int)(len > 80 ? 80 : len), raw);
  return 1;
}

/* The field the next value belongs to (NULL: a free-form or map value). */
static const field *expect(vstate *v, int *is_elem) {
  *is_elem = 0;
  if (v->depth > 0 && v->st[v->depth - 1].elem) {
    *is_elem = 1;
    return v->st[v->depth - 1].elem;
  }
  return v->pending;
}

static void value_done(vstate *v) {
  v->pending = NULL;
  v->pending_map = 0;
}

static int push(vstate *v, frame f) {
  if (v->depth >= (int)(sizeof v->st / sizeof v->st[0])) {
    snprintf(v->msg, sizeof v->msg, "exceeded max recursion depth");
    return 1;
  }
  v->st[v->depth++] = f;
  return 0;
}

static int scalar(vstate *v, int kind, const char *raw, size_t len) {
  /* kind: 's' string, 'n' number, 'b' bool, 'z' null */
  if (v->any) return 0;
  if (v->depth == 0) {
    snprintf(v->msg, sizeof v->msg, "unexpected token %.*s", (int)(len > 40 ? 40 : len), raw);
    return 1;
  }
  if (v->pending_map) {
    value_done(v);
    if (kind != 's' && kind != 'z') {
      snprintf(v->msg, sizeof v->msg, "invalid value for string type: %.*s",
               (int)(len > 40 ? 40 : len), raw);
      return 1;
    }
    return 0;
  }
  int elem;
  const field *f = expect(v, &elem);
  if (!f) return 0;
  if (!elem) value_done(v);
  if (kind == 'z' && !elem) return 0; /* null: field unset */
  if (f->repeated && !elem) return type_error(v, f, raw, len);
  switch (f->type) {
  case F_ANY: return 0;
  case F_STR: case F_TIME: return kind == 's' ? 0 : type_error(v, f, raw, len);
  case F_BOOL: return kind == 'b' ? 0 : type_error(v, f, raw, len);
  case F_I32: case F_I64: case F_DBL:
    if (kind == 'n') return 0;
    if (kind == 's') {
      /* protojson accepts numbers in strings; check they are numbers */
      const char *s = raw + 1;
      size_t n = len - 2;
      int64_t x;
      if (f->type != F_DBL && !kb_json_number_int64(s, n, &x)) return 0;
      if (f->type == F_DBL && n > 0) return 0;
    }
    return type_error(v, f, raw, len);
  case F_ENUM:
    if (kind == 'n') return 0;
    if (kind == 's') {
      for (const char *const *e = f->enums; *e; e++)
        if (strlen(*e) == len - 2 && !memcmp(*e, raw + 1, len - 2)) return 0;
    }
    return type_error(v, f, raw, len);
  default:
    return type_error(v, f, raw, len);
  }
}

static int on_begin_object(void *ud) {
  vstate *v = ud;
  if (v->any) return v->any++, 0;
  if (v->depth == 0 && !v->pending) return push(v, (frame){v->top, NULL, 0});
  if (v->pending_map) {
    value_done(v);
    snprintf(v->msg, sizeof v->msg, "invalid value for string type: {");
    return 1;
  }
  int elem;
  const field *f = expect(v, &elem);
  if (!f) return v->any = 1, 0;
  if (!elem) value_done(v);
  if (f->repeated && !elem) return type_error(v, f, "{", 1);
  if (f->type == F_ANY) return v->any = 1, 0;
  if (f->type == F_MSG) return push(v, (frame){f->msg, NULL, 0});
  if (f->type == F_MAP) return push(v, (frame){NULL, NULL, 1});
  return type_error(v, f, "{", 1);
}

static int on_end(void *ud) {
  vstate *v = ud;
  if (v->any) return v->any--, 0;
  v->depth--;
  return 0;
}

static int on_begin_array(void *ud) {
  vstate *v = ud;
  if (v->any) return v->any++, 0;
  if (v->depth == 0) {
    snprintf(v->msg, sizeof v->msg, "unexpected token [");
    return 1;
  }
  if (v->pending_map) {
    value_done(v);
    snprintf(v->msg, sizeof v->msg, "invalid value for string type: [");
    return 1;
  }
  int elem;
  const field *f = expect(v, &elem);
  if (!f) return v->any = 1, 0;
  if (!elem) value_done(v);
  if (f->type == F_ANY && !f->repeated) return v->any = 1, 0;
  if (!f->repeated || elem) return type_error(v, f, "[", 1);
  return push(v, (frame){NULL, f, 0});
}

static int on_key(void *ud, const char *s, size_t len) {
  vstate *v = ud;
  if (v->any) return 0;
  frame *fr = &v->st[v->depth - 1];
  if (fr->map) {
    v->pending_map = 1;
    return 0;
  }
  for (size_t i = 0; i < fr->msg->n; i++)
    if (name_matches(fr->msg->fields[i].name, s, len)) {
      v->pending = &fr->msg->fields[i];
      return 0;
    }
  snprintf(v->msg, sizeof v->msg, "unknown field \"%.*s\"", (int)(len > 100 ? 100 : len), s);
  v->key_error = 1;
  return 1;
}

static int on_string(void *ud, const char *s, size_t len) {
  vstate *v = ud;
  if (v->any) return 0;
  char buf[96];
  size_t n = len > 90 ? 90 : len;
  buf[0] = '"';
  memcpy(buf + 1, s, n);
  buf[n + 1] = '"';
  return scalar(v, 's', buf, n + 2);
}

static int on_number(void *ud, const char *s, size_t len, kb_json_numkind k) {
  (void)k;
  return scalar(ud, 'n', s, len);
}

static int on_bool(void *ud, int b) {
  return scalar(ud, 'b', b ? "true" : "false", b ? 4 : 5);
}

static int on_null(void *ud) {
  return scalar(ud, 'z', "null", 4);
}

/* protojson positions: 1-based line, column in runes. */
static void position(const char *text, size_t off, size_t *line, size_t *col) {
  *line = 1;
  size_t start = 0;
  for (size_t i = 0; i < off; i++)
    if (text[i] == '\n') (*line)++, start = i + 1;
  *col = 1;
  for (size_t i = start; i < off; i++)
    if (((unsigned char)text[i] & 0xc0) != 0x80) (*col)++;
}

/* The parser stops just after the offending token; step back to its start. */
static size_t token_start(const char *text, size_t off) {
  if (off == 0) return 0;
  size_t i = off;
  if (text[i - 1] == '"') {
    i--;
    while (i > 0) {
      i--;
      if (text[i] == '"') {
        size_t bs = 0;
        while (i >= bs + 1 && text[i - bs - 1] == '\\') bs++;
        if (bs % 2 == 0) return i;
      }
    }
    return 0;
  }
  if (text[i] == '{' || text[i] == '[') return i;
  while (i > 0 && strchr("+-.0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", text[i - 1]))
    i--;
  return i;
}

cJSON *kb_kfp_parse_body(const char *text, size_t len, const kfp_schema *schema, int *bad,
                      char *err, size_t errlen) {
  *bad = 0;
  size_t i = 0;
  while (i < len && strchr(" \t\r\n", text[i])) i++;
  if (i == len) return NULL; /* an empty body is an empty message */
  vstate v;
  memset(&v, 0, sizeof v);
  v.top = schema;
  kb_json_handler h = {0};
  h.on_null = on_null;
  h.on_bool = on_bool;
  h.on_number = on_number;
  h.on_string = on_string;
  h.on_begin_object = on_begin_object;
  h.on_end_object = on_end;
  h.on_key = on_key;
  h.on_begin_array = on_begin_array;
  h.on_end_array = on_end;
  kb_json_error je;
  int rc = kb_json_parse(text, len, &h, &v, &je);
  if (rc) {
    *bad = 1;
    size_t line, col;
    if (rc == KB_JSON_EABORT) {
      position(text, token_start(text, je.offset), &line, &col);
      snprintf(err, errlen, "proto: (line %zu:%zu): %s", line, col, v.msg);
    } else {
      position(text, je.offset, &line, &col);
      snprintf(err, errlen, "proto: syntax error (line %zu:%zu): %s", line, col, je.message);
    }
    return NULL;
  }
  cJSON *tree = cJSON_ParseWithLength(text, len);
  if (!tree) {
    *bad = 1;
    snprintf(err, errlen, "proto: syntax error (line 1:1): out of memory");
  }
  return tree;
}
