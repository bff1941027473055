/* Listing as KFP's list package does it: page_size (0 -> 20, capped at
 * 200), sort_by "field [asc|desc]" with the id as the tie-break, a JSON
 * filter of predicates on API field names (mapped to model fields), and
 * an opaque next_page_token: base64 JSON holding the sort field, the
 * cursor (sort value + id of the first row of the next page), the order
 * and the filter, which a token request reuses instead of its own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfp_internal.h"

static const char *const ops[] = {"UNSPECIFIED", "EQUALS", "NOT_EQUALS", "GREATER_THAN",
                                  "GREATER_THAN_EQUALS", "LESS_THAN", "LESS_THAN_EQUALS",
                                  "IN", "IS_SUBSTRING", NULL};

typedef struct opts {
  char sort_field[48];
  int desc;
  cJSON *filter;   /* normalized: [{key, op, value | values}] (owned) */
  cJSON *cursor_v; /* borrowed from the token tree */
  const char *cursor_k;
  cJSON *token;    /* owned */
} opts;

/* ---- base64 (standard alphabet, padded) ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const char *s, size_t n) {
  char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned char)s[i] << 16;
    if (i + 1 < n) v |= (unsigned char)s[i + 1] << 8;
    if (i + 2 < n) v |= (unsigned char)s[i + 2];
    *o++ = b64[v >> 18 & 63];
    *o++ = b64[v >> 12 & 63];
    *o++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
    *o++ = i + 2 < n ? b64[v & 63] : '=';
  }
  *o = 0;
  return out;
}

static char *b64_decode(const char *s, size_t *len) {
  size_t n = strlen(s);
  if (n % 4) return NULL;
  char *out = malloc(n / 4 * 3 + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    unsigned v = 0;
    int pad = 0;
    for (int j = 0; j < 4; j++) {
      const char *p = s[i + j] ? strchr(b64, s[i + j]) : NULL;
      if (s[i + j] == '=' && i + 4 == n && j >= 2) {
        pad++;
        v <<= 6;
        continue;
      }
      if (!p || pad) {
        free(out);
        return NULL;
      }
      v = v << 6 | (unsigned)(p - b64);
    }
    out[o++] = (char)(v >> 16);
    if (pad < 2) out[o++] = (char)(v >> 8 & 255);
    if (pad < 1) out[o++] = (char)(v & 255);
  }
  out[o] = 0;
  *len = o;
  return out;
}

/* ---- fields ---- */

static const char *model_field(const kfp_listable *l, const char *api) {
  for (const char *const *m = l->api_map; *m; m += 2)
    if (!strcmp(m[0], api)) return m[1];
  return NULL;
}

static int op_index(const cJSON *op) {
  if (cJSON_IsNumber(op)) return op->valueint >= 0 && op->valueint <= 8 ? op->valueint : 0;
  if (!cJSON_IsString(op)) return 0;
  for (int i = 1; ops[i]; i++)
    if (!strcmp(op->valuestring, ops[i])) return i;
  return 0;
}

/* A predicate's value as a cJSON number or string (timestamps -> seconds). */
static cJSON *pred_value(const cJSON *p) {
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(p, "string_value")) ||
      (v = cJSON_GetObjectItemCaseSensitive(p, "stringValue")))
    return cJSON_CreateString(cJSON_IsString(v) ? v->valuestring : "");
  if ((v = cJSON_GetObjectItemCaseSensitive(p, "timestamp_value")) ||
      (v = cJSON_GetObjectItemCaseSensitive(p, "timestampValue")))
    return cJSON_CreateNumber((double)kb_kfp_time_parse(cJSON_IsString(v) ? v->valuestring : ""));
  if ((v = cJSON_GetObjectItemCaseSensitive(p, "int_value")) ||
      (v = cJSON_GetObjectItemCaseSensitive(p, "intValue")) ||
      (v = cJSON_GetObjectItemCaseSensitive(p, "long_value")) ||
      (v = cJSON_GetObjectItemCaseSensitive(p, "longValue")))
    return cJSON_CreateNumber(cJSON_IsString(v) ? strtod(v->valuestring, NULL) : v->valuedouble);
  return NULL;
}

static cJSON *pred_values(const cJSON *p) {
  static const char *const keys[] = {"string_values", "stringValues", "int_values", "intValues",
                                     "long_values", "longValues", NULL};
  for (int i = 0; keys[i]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, keys[i]);
    if (!v) continue;
    cJSON *out = cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(v, "values")) {
      if (i < 2) cJSON_AddItemToArray(out, cJSON_CreateString(it->valuestring ? it->valuestring : ""));
      else
        cJSON_AddItemToArray(out, cJSON_CreateNumber(cJSON_IsString(it) ? strtod(it->valuestring, NULL)
                                                                        : it->valuedouble));
    }
    return out;
  }
  return NULL;
}

/* Parses and normalizes the filter query parameter. Replies on error. */
static int parse_filter(kfp_req *r, const kfp_listable *l, const char *text, const char *wrap,
                        cJSON **out) {
  char err[300];
  int bad;
  cJSON *f = kb_kfp_parse_body(text, strlen(text), r->ver == 1 ? &kb_kfp_s_v1_filter : &kb_kfp_s_v2_filter,
                            &bad, err, sizeof err);
  if (bad) {
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, NULL, "%s", err);
    return -1;
  }
  cJSON *norm = cJSON_CreateArray();
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(f, "predicates")) {
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(p, "key");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(p, r->ver == 1 ? "op" : "operation");
    const char *k = cJSON_IsString(key) ? key->valuestring : "";
    const char *mf = model_field(l, k);
    if (!mf) {
      /* k points into f: the message is built before f goes */
      char ext[200];
      snprintf(ext, sizeof ext, "no support for filtering on unrecognized field \"%s\"", k);
      cJSON_Delete(norm), cJSON_Delete(f);
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
      return -1;
    }
    int oi = op_index(op);
    cJSON *val = oi == 7 ? pred_values(p) : pred_value(p);
    if (!oi || !val) {
      char ext[200];
      snprintf(ext, sizeof ext, "invalid predicate operation: %s",
               cJSON_IsString(op) ? op->valuestring : "OPERATION_UNSPECIFIED");
      cJSON_Delete(val), cJSON_Delete(norm), cJSON_Delete(f);
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
      return -1;
    }
    cJSON *np = cJSON_CreateObject();
    cJSON_AddStringToObject(np, "key", mf);
    cJSON_AddStringToObject(np, "op", ops[oi]);
    cJSON_AddItemToObject(np, oi == 7 ? "values" : "value", val);
    cJSON_AddItemToArray(norm, np);
  }
  cJSON_Delete(f);
  *out = norm;
  return 0;
}

static int parse_opts(kfp_req *r, const kfp_listable *l, const char *wrap, opts *o) {
  const char *tok = kb_kfp_query(r, "page_token");
  if (tok && *tok) {
    size_t n;
    char *raw = b64_decode(tok, &n);
    o->token = raw ? cJSON_ParseWithLength(raw, n) : NULL;
    free(raw);
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(o->token, "SortByFieldName");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(o->token, "KeyFieldValue");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(o->token, "ModelName");
    if (!cJSON_IsString(sf) || !cJSON_IsString(kv) || !cJSON_IsString(mn) ||
        strcmp(mn->valuestring, l->model_name) || strlen(sf->valuestring) >= sizeof o->sort_field) {
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, "Invalid page token",
                "%s: InvalidInputError: Invalid page token: invalid character looking for "
                "beginning of value",
                wrap);
      return -1;
    }
    snprintf(o->sort_field, sizeof o->sort_field, "%s", sf->valuestring);
    o->desc = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o->token, "IsDesc"));
    o->cursor_v = cJSON_GetObjectItemCaseSensitive(o->token, "SortByFieldValue");
    o->cursor_k = kv->valuestring;
    cJSON *f = cJSON_GetObjectItemCaseSensitive(o->token, "Filter");
    if (cJSON_IsArray(f)) o->filter = cJSON_Duplicate(f, 1);
    return 0;
  }
  snprintf(o->sort_field, sizeof o->sort_field, "CreatedAtInSec");
  const char *sort = kb_kfp_query(r, "sort_by");
  if (sort && *sort) {
    char a[64] = "", b[64] = "", c[8] = "";
    char low[200];
    size_t i = 0;
    for (; sort[i] && i + 1 < sizeof low; i++)
      low[i] = (char)(sort[i] >= 'A' && sort[i] <= 'Z' ? sort[i] + 32 : sort[i]);
    low[i] = 0;
    int n = sscanf(low, "%63s %63s %7s", a, b, c);
    if (n > 2 || (n == 2 && strcmp(b, "desc") && strcmp(b, "asc"))) {
      char ext[300];
      snprintf(ext, sizeof ext,
               "Received invalid sort by format \"%s\". Supported format: \"field_name\", "
               "\"field_name desc\", or \"field_name asc\"",
               sort);
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
      return -1;
    }
    if (n >= 1) {
      const char *mf = model_field(l, a);
      if (!mf) {
        char ext[200];
        snprintf(ext, sizeof ext, "Invalid sorting field: \"%s\" on listable type %s", a,
                 l->type_name);
        kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
        return -1;
      }
      snprintf(o->sort_field, sizeof o->sort_field, "%s", mf);
    }
    o->desc = n == 2 && !strcmp(b, "desc");
  }
  const char *filter = kb_kfp_query(r, "filter");
  if (filter && *filter) return parse_filter(r, l, filter, wrap, &o->filter);
  return 0;
}

/* ---- evaluation ---- */

static int cmp_val(const kfp_fval *a, const cJSON *b) {
  if (a->is_num) {
    double x = cJSON_IsNumber(b) ? b->valuedouble
               : cJSON_IsString(b) ? strtod(b->valuestring, NULL)
                                   : 0;
    return a->num < x ? -1 : a->num > x;
  }
  char buf[32];
  const char *y = cJSON_IsString(b) ? b->valuestring : NULL;
  if (!y) {
    snprintf(buf, sizeof buf, "%.17g", cJSON_IsNumber(b) ? b->valuedouble : 0);
    y = buf;
  }
  /* storage states: v1 names their values STORAGESTATE_X */
  if (!strncmp(y, "STORAGESTATE_", 13)) y += 13;
  int c = strcmp(a->str ? a->str : "", y);
  return c < 0 ? -1 : c > 0;
}

static int matches(const kb_sim_kfp *kfp, const kfp_listable *l, const void *obj,
                   const cJSON *filter) {
  const cJSON *p;
  cJSON_ArrayForEach(p, filter) {
    const char *key = cJSON_GetObjectItemCaseSensitive(p, "key")->valuestring;
    const char *op = cJSON_GetObjectItemCaseSensitive(p, "op")->valuestring;
    kfp_fval fv;
    if (l->field(kfp, obj, key, &fv)) return 0;
    if (!strcmp(op, "IN")) {
      int any = 0;
      const cJSON *v;
      cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(p, "values")) any |= !cmp_val(&fv, v);
      if (!any) return 0;
      continue;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
    if (!strcmp(op, "IS_SUBSTRING")) {
      if (fv.is_num || !cJSON_IsString(v) || !strstr(fv.str ? fv.str : "", v->valuestring))
        return 0;
      continue;
    }
    int c = cmp_val(&fv, v);
    int ok = !strcmp(op, "EQUALS")                ? c == 0
             : !strcmp(op, "NOT_EQUALS")          ? c != 0
             : !strcmp(op, "GREATER_THAN")        ? c > 0
             : !strcmp(op, "GREATER_THAN_EQUALS") ? c >= 0
             : !strcmp(op, "LESS_THAN")           ? c < 0
                                                  : c <= 0;
    if (!ok) return 0;
  }
  return 1;
}

typedef struct row {
  void *obj;
  kfp_fval v;
  const char *id;
} row;

static int cmp_fval(const kfp_fval *a, const kfp_fval *b) {
  if (a->is_num) return a->num < b->num ? -1 : a->num > b->num;
  int c = strcmp(a->str ? a->str : "", b->str ? b->str : "");
  return c < 0 ? -1 : c > 0;
}

static int cmp_rows(const void *pa, const void *pb, void *desc) {
  const row *a = pa, *b = pb;
  int c = cmp_fval(&a->v, &b->v);
  if (!c) c = strcmp(a->id, b->id);
  return *(int *)desc ? -c : c;
}

static cJSON *fval_json(const kfp_fval *v) {
  return v->is_num ? cJSON_CreateNumber(v->num) : cJSON_CreateString(v->str ? v->str : "");
}

int kb_kfp_list(kfp_req *r, const kfp_listable *l, void **cand, size_t n, const char *wrap,
             kfp_vec *page, size_t *total, char **next_token) {
  *total = 0;
  *next_token = NULL;
  memset(page, 0, sizeof *page);
  long size = 0;
  const char *ps = kb_kfp_query(r, "page_size");
  if (ps && *ps) {
    char *end;
    size = strtol(ps, &end, 10);
    if (*end) {
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, NULL,
                "type mismatch, parameter: page_size, error: strconv.ParseInt: parsing \"%s\": "
                "invalid syntax",
                ps);
      return -1;
    }
  }
  if (size < 0) {
    char ext[100];
    snprintf(ext, sizeof ext, "The page size should be greater than 0. Got %ld", size);
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
    return -1;
  }
  if (size == 0) size = 20;
  if (size > 200) size = 200;
  opts o;
  memset(&o, 0, sizeof o);
  if (parse_opts(r, l, wrap, &o)) {
    cJSON_Delete(o.filter), cJSON_Delete(o.token);
    return -1;
  }
  row *rows = malloc((n ? n : 1) * sizeof *rows);
  size_t m = 0;
  for (size_t i = 0; rows && i < n; i++) {
    if (o.filter && !matches(r->kfp, l, cand[i], o.filter)) continue;
    row rw = {cand[i], {0, 0, NULL}, NULL};
    kfp_fval id;
    l->field(r->kfp, cand[i], "UUID", &id);
    rw.id = id.str ? id.str : "";
    if (l->field(r->kfp, cand[i], o.sort_field, &rw.v)) rw.v = (kfp_fval){1, 0, NULL};
    rows[m++] = rw;
  }
  *total = m;
  if (m) qsort_r(rows, m, sizeof *rows, cmp_rows, &o.desc);
  size_t start = 0;
  if (o.cursor_k) {
    /* first row not before the cursor */
    for (; start < m; start++) {
      int c = o.cursor_v ? -cmp_val(&rows[start].v, o.cursor_v) : 0;
      if (!c) c = strcmp(o.cursor_k, rows[start].id);
      if (o.desc ? c >= 0 : c <= 0) break;
    }
  }
  for (size_t i = start; i < m && i < start + (size_t)size; i++) kb_kfp_vec_push(page, rows[i].obj);
  if (start + (size_t)size < m) {
    const row *nx = &rows[start + (size_t)size];
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "SortByFieldName", o.sort_field);
    cJSON_AddItemToObject(t, "SortByFieldValue", fval_json(&nx->v));
    cJSON_AddStringToObject(t, "KeyFieldName", "UUID");
    cJSON_AddStringToObject(t, "KeyFieldValue", nx->id);
    cJSON_AddBoolToObject(t, "IsDesc", o.desc);
    cJSON_AddStringToObject(t, "ModelName", l->model_name);
    if (o.filter) cJSON_AddItemToObject(t, "Filter", cJSON_Duplicate(o.filter, 1));
    char *s = cJSON_PrintUnformatted(t);
    if (s) *next_token = b64_encode(s, strlen(s));
    cJSON_free(s);
    cJSON_Delete(t);
  }
  free(rows);
  cJSON_Delete(o.filter);
  cJSON_Delete(o.token);
  return 0;
}

/* ---- the listable types ---- */

static int f_str(kfp_fval *out, const char *s) {
  *out = (kfp_fval){0, 0, s ? s : ""};
  return 0;
}

static int f_num(kfp_fval *out, double v) {
  *out = (kfp_fval){1, v, NULL};
  return 0;
}

static int run_field(const kb_sim_kfp *kfp, const void *obj, const char *m, kfp_fval *out) {
  const kfp_run *run = obj;
  if (!strcmp(m, "UUID")) return f_str(out, run->id);
  if (!strcmp(m, "DisplayName")) return f_str(out, run->display_name);
  if (!strcmp(m, "CreatedAtInSec") || !strcmp(m, "ScheduledAtInSec"))
    return f_num(out, (double)run->created_at);
  if (!strcmp(m, "Description")) return f_str(out, run->description);
  if (!strcmp(m, "StorageState")) return f_str(out, run->archived ? "ARCHIVED" : "AVAILABLE");
  if (!strcmp(m, "Namespace")) return f_str(out, "");
  if (!strcmp(m, "ExperimentUUID")) return f_str(out, run->experiment_id);
  if (!strcmp(m, "JobUUID")) return f_str(out, run->recurring_run_id);
  kb_sim_run_info ri;
  memset(&ri, 0, sizeof ri);
  ri.finished_at = -1;
  kb_sim_run_get(kfp->sim, run->sim_run, &ri);
  if (!strcmp(m, "FinishedAtInSec"))
    return f_num(out, ri.finished_at < 0 ? 0 : (double)kb_kfp_sim_time(kfp, ri.finished_at));
  if (!strcmp(m, "State"))
    return f_str(out, ri.state == KB_SIM_RUN_UNSPECIFIED ? "RUNTIME_STATE_UNSPECIFIED"
                                                         : kb_sim_run_state_name(ri.state));
  if (!strcmp(m, "Conditions")) return f_str(out, kb_kfp_v1_status(ri.state));
  return -1;
}

static int pipeline_field(const kb_sim_kfp *kfp, const void *obj, const char *m, kfp_fval *out) {
  (void)kfp;
  const kfp_pipeline *p = obj;
  if (!strcmp(m, "UUID")) return f_str(out, p->id);
  if (!strcmp(m, "Name")) return f_str(out, p->name);
  if (!strcmp(m, "DisplayName")) return f_str(out, p->display_name);
  if (!strcmp(m, "CreatedAtInSec")) return f_num(out, (double)p->created_at);
  if (!strcmp(m, "Description")) return f_str(out, p->description);
  if (!strcmp(m, "Namespace")) return f_str(out, p->namespace_);
  return -1;
}

static int version_field(const kb_sim_kfp *kfp, const void *obj, const char *m, kfp_fval *out) {
  (void)kfp;
  const kfp_version *v = obj;
  if (!strcmp(m, "UUID")) return f_str(out, v->id);
  if (!strcmp(m, "Name")) return f_str(out, v->name);
  if (!strcmp(m, "DisplayName")) return f_str(out, v->display_name);
  if (!strcmp(m, "CreatedAtInSec")) return f_num(out, (double)v->created_at);
  if (!strcmp(m, "Description")) return f_str(out, v->description);
  if (!strcmp(m, "PipelineId")) return f_str(out, v->pipeline_id);
  return -1;
}

static int experiment_field(const kb_sim_kfp *kfp, const void *obj, const char *m,
                            kfp_fval *out) {
  (void)kfp;
  const kfp_experiment *e = obj;
  if (!strcmp(m, "UUID")) return f_str(out, e->id);
  if (!strcmp(m, "Name")) return f_str(out, e->name);
  if (!strcmp(m, "CreatedAtInSec")) return f_num(out, (double)e->created_at);
  if (!strcmp(m, "LastRunCreatedAtInSec")) return f_num(out, (double)e->last_run_created_at);
  if (!strcmp(m, "Description")) return f_str(out, e->description);
  if (!strcmp(m, "Namespace")) return f_str(out, e->namespace_);
  if (!strcmp(m, "StorageState")) return f_str(out, e->archived ? "ARCHIVED" : "AVAILABLE");
  return -1;
}

static int recurring_field(const kb_sim_kfp *kfp, const void *obj, const char *m,
                           kfp_fval *out) {
  (void)kfp;
  const kfp_recurring *rr = obj;
  if (!strcmp(m, "UUID")) return f_str(out, rr->id);
  if (!strcmp(m, "DisplayName")) return f_str(out, rr->display_name);
  if (!strcmp(m, "CreatedAtInSec")) return f_num(out, (double)rr->created_at);
  if (!strcmp(m, "UpdatedAtInSec")) return f_num(out, (double)rr->updated_at);
  if (!strcmp(m, "Description")) return f_str(out, rr->description);
  if (!strcmp(m, "Enabled")) return f_str(out, rr->enabled ? "true" : "false");
  if (!strcmp(m, "ExperimentId")) return f_str(out, rr->experiment_id);
  if (!strcmp(m, "Namespace")) return f_str(out, "");
  return -1;
}

static const char *const run_map[] = {
    "run_id", "UUID", "id", "UUID", "display_name", "DisplayName", "name", "DisplayName",
    "created_at", "CreatedAtInSec", "finished_at", "FinishedAtInSec", "description",
    "Description", "scheduled_at", "ScheduledAtInSec", "storage_state", "StorageState",
    "status", "Conditions", "namespace", "Namespace", "experiment_id", "ExperimentUUID",
    "state", "State", "recurring_run_id", "JobUUID", NULL};
static const char *const pipeline_map[] = {
    "id", "UUID", "pipeline_id", "UUID", "name", "Name", "display_name", "DisplayName",
    "created_at", "CreatedAtInSec", "description", "Description", "namespace", "Namespace",
    NULL};
static const char *const version_map[] = {
    "id", "UUID", "pipeline_version_id", "UUID", "name", "Name", "display_name", "DisplayName",
    "created_at", "CreatedAtInSec", "description", "Description", "pipeline_id", "PipelineId",
    NULL};
static const char *const experiment_map[] = {
    "id", "UUID", "experiment_id", "UUID", "name", "Name", "display_name", "Name",
    "created_at", "CreatedAtInSec", "last_run_created_at", "LastRunCreatedAtInSec",
    "description", "Description", "namespace", "Namespace", "storage_state", "StorageState",
    NULL};
static const char *const recurring_map[] = {
    "id", "UUID", "recurring_run_id", "UUID", "name", "DisplayName", "display_name",
    "DisplayName", "created_at", "CreatedAtInSec", "updated_at", "UpdatedAtInSec",
    "description", "Description", "enabled", "Enabled", "experiment_id", "ExperimentId",
    "namespace", "Namespace", NULL};

const kfp_listable kb_kfp_list_runs = {"run_details", "Run", run_map, run_field};
const kfp_listable kb_kfp_list_pipelines = {"pipelines", "Pipeline", pipeline_map, pipeline_field};
const kfp_listable kb_kfp_list_versions = {"pipeline_versions", "PipelineVersion", version_map,
                                        version_field};
const kfp_listable kb_kfp_list_experiments = {"experiments", "Experiment", experiment_map,
                                           experiment_field};
const kfp_listable kb_kfp_list_recurring = {"jobs", "Job", recurring_map, recurring_field};

void kb_kfp_reply_list(kfp_req *r, const kfp_listable *l, kfp_vec *cand, const char *wrap,
                       const char *key, kfp_render_fn *render) {
  kfp_vec page;
  size_t total;
  char *next;
  int rc = kb_kfp_list(r, l, cand->items, cand->n, wrap, &page, &total, &next);
  free(cand->items);
  *cand = (kfp_vec){0};
  if (rc) return;
  cJSON *o = cJSON_CreateObject();
  if (page.n) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (size_t i = 0; i < page.n; i++) cJSON_AddItemToArray(a, render(r->kfp, page.items[i]));
  }
  if (total) cJSON_AddNumberToObject(o, "total_size", (double)total);
  if (next) cJSON_AddStringToObject(o, "next_page_token", next);
  r->items = page.n;
  free(next);
  free(page.items);
  kb_kfp_reply(r, o);
}
