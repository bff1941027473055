/* A decoded protobuf-c message as the JSON Kubernetes gives the same Go
 * object, walked by its descriptor alone (include/kb/k8s_proto.h): no
 * field tables of our own, only the generated descriptors and the Go facts
 * of gojson.txt. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "k8s_pb_internal.h"
#include "kb/base64.h"
#include "k8s_pb_tables.h"
#include "kb/json.h"

#define META "k8s.io.apimachinery.pkg.apis.meta.v1."
#define MAX_DEPTH 64 /* nested messages (and RawExtensions holding bodies) */

int kb_pb_fail(pb_ctx *c, const char *fmt, ...) {
  if (c->err[0]) return -1; /* the first (innermost) message wins */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return -1;
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int kb_pb_in_table(const char *const *tab, size_t n, const char *msg, const char *field) {
  char key[512];
  if (field) snprintf(key, sizeof key, "%s.%s", msg, field);
  else snprintf(key, sizeof key, "%s", msg);
  const char *k = key;
  return n && bsearch(&k, tab, n, sizeof *tab, str_cmp) != NULL;
}

/* ---- scalars ------------------------------------------------------------------ */

static cJSON *b64(const uint8_t *p, size_t n) {
  char *out = malloc(KB_BASE64_LEN(n) + 1);
  if (!out) return NULL;
  kb_base64_encode(p, n, out);
  cJSON *s = cJSON_CreateString(out);
  free(out);
  return s;
}

/* A protobuf string: JSON holds only UTF-8 (the body check of the other
 * media types, here field by field). */
static cJSON *utf8_string(pb_ctx *c, const char *s, const char *field) {
  size_t n = strlen(s), bad = kb_json_utf8_bad(s, n);
  if (bad < n) {
    kb_pb_fail(c, "field %s is not valid UTF-8 (byte %zu)", field, bad);
    return NULL;
  }
  return cJSON_CreateString(s);
}

#define JSON_INT_MAX ((int64_t)KB_PB_JSON_INT_MAX)

/* A 64-bit integer JSON cannot hold exactly is refused, not rounded. */
static cJSON *beyond_json(pb_ctx *c, const ProtobufCFieldDescriptor *fd, int negative,
                          uint64_t v) {
  uint64_t magnitude = negative ? (uint64_t)0 - v : v;
  kb_pb_fail(c, "field %s: %s%" PRIu64 " is beyond 2^53, more than a JSON number holds exactly",
             fd->name, negative ? "-" : "", magnitude);
  return NULL;
}

/* The value at p of a field of type fd->type; *zero says whether it is the
 * Go zero value. */
static cJSON *scalar(pb_ctx *c, const ProtobufCFieldDescriptor *fd, const void *p, int *zero) {
  double d = 0;
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32: d = *(const int32_t *)p; break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: {
    int64_t v = *(const int64_t *)p;
    if (v > JSON_INT_MAX || v < -JSON_INT_MAX) return beyond_json(c, fd, v < 0, (uint64_t)v);
    d = (double)v;
    break;
  }
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32: d = *(const uint32_t *)p; break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    uint64_t v = *(const uint64_t *)p;
    if (v > JSON_INT_MAX) return beyond_json(c, fd, 0, v);
    d = (double)v;
    break;
  }
  case PROTOBUF_C_TYPE_FLOAT: d = *(const float *)p; break;
  case PROTOBUF_C_TYPE_DOUBLE: d = *(const double *)p; break;
  case PROTOBUF_C_TYPE_ENUM: d = *(const int *)p; break;
  case PROTOBUF_C_TYPE_BOOL:
    *zero = !*(const protobuf_c_boolean *)p;
    return cJSON_CreateBool(!*zero);
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;
    *zero = !s || !*s;
    return utf8_string(c, s ? s : "", fd->name);
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    *zero = b->len == 0;
    return b64(b->data, b->len);
  }
  case PROTOBUF_C_TYPE_MESSAGE: break;
  }
  *zero = d == 0;
  return cJSON_CreateNumber(d);
}

static size_t elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: return 8;
  case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
  case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_ENUM: return sizeof(int);
  case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
  default: return 4;
  }
}

/* ---- the messages with a JSON form of their own -------------------------------- */

/* fd of m when present (proto2 presence), its value's address in *val. */
static const ProtobufCFieldDescriptor *present(const ProtobufCMessage *m,
                                               const ProtobufCFieldDescriptor *fd,
                                               const void **val) {
  const char *base = (const char *)m;
  *val = base + fd->offset;
  if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) /* none in Kubernetes' protos, but generic */
    return *(const uint32_t *)(base + fd->quantifier_offset) == fd->id ? fd : NULL;
  if (fd->label == PROTOBUF_C_LABEL_OPTIONAL) {
    if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_MESSAGE)
      return *(void *const *)*val ? fd : NULL;
    return *(const protobuf_c_boolean *)(base + fd->quantifier_offset) ? fd : NULL;
  }
  return fd;
}

static const ProtobufCFieldDescriptor *field(const ProtobufCMessage *m, const char *name,
                                             const void **val) {
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
  return fd ? present(m, fd, val) : NULL;
}

static int64_t int_field(const ProtobufCMessage *m, const char *name, int *has) {
  const void *v;
  const ProtobufCFieldDescriptor *fd = field(m, name, &v);
  if (has) *has = fd != NULL;
  if (!fd) return 0;
  return fd->type == PROTOBUF_C_TYPE_INT32 ? *(const int32_t *)v : *(const int64_t *)v;
}

static const char *str_field(const ProtobufCMessage *m, const char *name) {
  const void *v;
  return field(m, name, &v) ? *(char *const *)v : NULL;
}

/* by number: FieldsV1 names its bytes "Raw", RawExtension "raw" (both 1) */
static const ProtobufCBinaryData *bytes_field(const ProtobufCMessage *m, unsigned id) {
  const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(m->descriptor, id);
  const void *v;
  return fd && fd->type == PROTOBUF_C_TYPE_BYTES && present(m, fd, &v) ? v : NULL;
}

/* meta/v1 Time and MicroTime: RFC 3339 in UTC, as metav1 marshals them
 * (seconds; MicroTime with 6 fractional digits). An empty message is the
 * zero time, which Go writes as null. */
static cJSON *time_json(pb_ctx *c, const ProtobufCMessage *m, int micro) {
  int hs, hn;
  int64_t s = int_field(m, "seconds", &hs), ns = int_field(m, "nanos", &hn);
  if (!hs && !hn) return cJSON_CreateNull();
  /* years 0001-9999, as Go's RFC 3339 formatting; checked before the
   * nanoseconds (|ns| < 2.2 s) carry into s, so nothing overflows */
  int in_range = s >= -62135596800LL - 3 && s <= 253402300799LL + 3;
  if (in_range) {
    s += ns / 1000000000;
    ns %= 1000000000;
    if (ns < 0) ns += 1000000000, s--;
  }
  time_t t = (time_t)s;
  struct tm tm;
  if (!in_range || s < -62135596800LL || s > 253402300799LL || !gmtime_r(&t, &tm)) {
    kb_pb_fail(c, "%s seconds %" PRId64 " is outside years 0001-9999", m->descriptor->short_name, s);
    return NULL;
  }
  char out[48];
  int n = snprintf(out, sizeof out, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (micro) n += snprintf(out + n, sizeof out - (size_t)n, ".%06d", (int)(ns / 1000));
  snprintf(out + n, sizeof out - (size_t)n, "Z");
  return cJSON_CreateString(out);
}

/* Digits of v / 10^scale with the fraction's trailing zeros dropped. */
static int fmt_frac(char *out, size_t n, uint64_t v, int scale) {
  uint64_t p = 1;
  for (int i = 0; i < scale; i++) p *= 10;
  uint64_t frac = v % p;
  if (!frac) return snprintf(out, n, "%" PRIu64, v / p);
  int digits = scale;
  while (frac % 10 == 0) frac /= 10, digits--;
  return snprintf(out, n, "%" PRIu64 ".%0*" PRIu64, v / p, digits, frac);
}

/* meta/v1 Duration: Go's time.Duration.String() ("1h2m3.5s", "150ms"). */
static cJSON *duration_json(const ProtobufCMessage *m) {
  int64_t d = int_field(m, "duration", NULL);
  if (d == 0) return cJSON_CreateString("0s");
  char out[64];
  size_t n = 0;
  uint64_t u = d < 0 ? (uint64_t)0 - (uint64_t)d : (uint64_t)d;
  if (d < 0) out[n++] = '-';
  if (u < 1000) {
    snprintf(out + n, sizeof out - n, "%" PRIu64 "ns", u);
  } else if (u < 1000000000) {
    int scale = u < 1000000 ? 3 : 6;
    n += (size_t)fmt_frac(out + n, sizeof out - n, u, scale);
    snprintf(out + n, sizeof out - n, "%s", scale == 3 ? "\xc2\xb5s" : "ms");
  } else {
    uint64_t h = u / 3600000000000ULL, mi = u / 60000000000ULL % 60;
    uint64_t sec = u % 60000000000ULL;
    if (h) n += (size_t)snprintf(out + n, sizeof out - n, "%" PRIu64 "h", h);
    if (h || mi) n += (size_t)snprintf(out + n, sizeof out - n, "%" PRIu64 "m", mi);
    n += (size_t)fmt_frac(out + n, sizeof out - n, sec, 9);
    snprintf(out + n, sizeof out - n, "s");
  }
  return cJSON_CreateString(out);
}

static cJSON *intstr_json(pb_ctx *c, const ProtobufCMessage *m) {
  int64_t type = int_field(m, "type", NULL);
  if (type == 0) return cJSON_CreateNumber((double)int_field(m, "intVal", NULL));
  if (type == 1) {
    const char *s = str_field(m, "strVal");
    return utf8_string(c, s ? s : "", "strVal");
  }
  kb_pb_fail(c, "IntOrString type %" PRId64 " is neither 0 (int) nor 1 (string)", type);
  return NULL;
}

/* RawExtension and FieldsV1 hold JSON (a RawExtension may hold a whole
 * protobuf body instead); empty is null, as Go marshals it. */
static cJSON *raw_json(pb_ctx *c, const ProtobufCMessage *m, int allow_pb, int depth) {
  const ProtobufCBinaryData *raw = bytes_field(m, 1);
  if (!raw || !raw->len) return cJSON_CreateNull();
  if (allow_pb && raw->len >= 4 && !memcmp(raw->data, "k8s\0", 4))
    return kb_pb_body_json(c, raw->data, raw->len, depth + 1);
  cJSON *doc = cJSON_ParseWithLength((const char *)raw->data, raw->len);
  if (!doc) kb_pb_fail(c, "%s.%s is not JSON", m->descriptor->short_name, m->descriptor->fields[0].name);
  return doc;
}

/* The JSON of a message with a form of its own; *handled 0 when it has none. */
static cJSON *special_json(pb_ctx *c, const ProtobufCMessage *m, int depth, int *handled) {
  const char *name = m->descriptor->name;
  *handled = 1;
  if (!strcmp(name, "k8s.io.apimachinery.pkg.api.resource.Quantity") ||
      !strcmp(name, "k8s.io.apimachinery.pkg.api.resource.QuantityValue")) {
    const char *s = str_field(m, "string");
    return utf8_string(c, s && *s ? s : "0", "Quantity");
  }
  if (!strcmp(name, META "Time")) return time_json(c, m, 0);
  if (!strcmp(name, META "MicroTime")) return time_json(c, m, 1);
  if (!strcmp(name, META "Duration")) return duration_json(m);
  if (!strcmp(name, "k8s.io.apimachinery.pkg.util.intstr.IntOrString")) return intstr_json(c, m);
  if (!strcmp(name, "k8s.io.apimachinery.pkg.runtime.RawExtension")) return raw_json(c, m, 1, depth);
  if (!strcmp(name, META "FieldsV1")) return raw_json(c, m, 0, depth);
  *handled = 0;
  return NULL;
}

/* ---- messages ------------------------------------------------------------------ */

/* protoc-c gives map<K,V> as a repeated nested "<Field>Entry" {key = 1, value = 2}. */
static int is_map_entry(const ProtobufCMessageDescriptor *parent, const ProtobufCMessageDescriptor *d) {
  size_t pl = strlen(parent->name), sl = strlen(d->short_name);
  return d->n_fields == 2 && sl > 5 && !strcmp(d->short_name + sl - 5, "Entry") &&
         !strncmp(d->name, parent->name, pl) && d->name[pl] == '.' &&
         d->fields[0].id == 1 && !strcmp(d->fields[0].name, "key") && d->fields[1].id == 2 &&
         !strcmp(d->fields[1].name, "value");
}

static cJSON *value_json(pb_ctx *c, const ProtobufCFieldDescriptor *fd, const void *p, int depth,
                         int *zero) {
  if (fd->type != PROTOBUF_C_TYPE_MESSAGE) return scalar(c, fd, p, zero);
  *zero = 0;
  return kb_pb_message_json(c, *(ProtobufCMessage *const *)p, depth + 1);
}

static cJSON *empty_json(pb_ctx *c, const ProtobufCMessageDescriptor *d, int depth) {
  ProtobufCMessage *m = malloc(d->sizeof_message);
  if (!m) {
    kb_pb_fail(c, "out of memory");
    return NULL;
  }
  protobuf_c_message_init(d, m);
  cJSON *v = kb_pb_message_json(c, m, depth + 1);
  free(m); /* init allocates nothing */
  return v;
}

static cJSON *map_json(pb_ctx *c, const ProtobufCFieldDescriptor *fd, ProtobufCMessage *const *e,
                       size_t n, int depth) {
  cJSON *o = cJSON_CreateObject();
  const ProtobufCMessageDescriptor *d = fd->descriptor;
  for (size_t i = 0; o && i < n; i++) {
    const char *base = (const char *)e[i];
    int zero;
    cJSON *k = scalar(c, &d->fields[0], base + d->fields[0].offset, &zero);
    if (!k) goto fail;
    cJSON *v = NULL;
    const ProtobufCFieldDescriptor *vf = &d->fields[1];
    if (vf->type == PROTOBUF_C_TYPE_MESSAGE && !*(ProtobufCMessage *const *)(base + vf->offset))
      v = empty_json(c, vf->descriptor, depth); /* an entry without its value: Go's zero */
    else
      v = value_json(c, vf, base + vf->offset, depth, &zero);
    const char *key = cJSON_IsString(k) ? k->valuestring : NULL;
    char num[32];
    if (!key) snprintf(num, sizeof num, "%.17g", k->valuedouble), key = num;
    if (!v) {
      cJSON_Delete(k);
      goto fail;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(o, key); /* a repeated key: the last wins, as in Go */
    cJSON_AddItemToObject(o, key, v);
    cJSON_Delete(k);
  }
  return o;
fail:
  cJSON_Delete(o);
  return NULL;
}

static cJSON *repeated_json(pb_ctx *c, const ProtobufCMessageDescriptor *md,
                            const ProtobufCFieldDescriptor *fd, const char *base, int depth) {
  size_t n = *(const size_t *)(base + fd->quantifier_offset);
  const char *arr = *(char *const *)(base + fd->offset);
  if (fd->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(md, fd->descriptor))
    return map_json(c, fd, (ProtobufCMessage *const *)arr, n, depth);
  cJSON *a = cJSON_CreateArray();
  size_t sz = elem_size(fd->type);
  for (size_t i = 0; a && i < n; i++) {
    int zero;
    cJSON *v = value_json(c, fd, arr + i * sz, depth, &zero);
    if (!v) {
      cJSON_Delete(a);
      return NULL;
    }
    cJSON_AddItemToArray(a, v);
  }
  return a;
}

/* Moves the members of from into to (an inlined struct). */
static void merge_into(cJSON *to, cJSON *from) {
  while (from && from->child) {
    cJSON *it = cJSON_DetachItemViaPointer(from, from->child);
    cJSON_DeleteItemFromObjectCaseSensitive(to, it->string);
    cJSON_AddItemToObject(to, it->string, it); /* copies the key, frees the old */
  }
  cJSON_Delete(from);
}

cJSON *kb_pb_message_json(pb_ctx *c, const ProtobufCMessage *m, int depth) {
  if (depth > MAX_DEPTH) {
    kb_pb_fail(c, "messages nested deeper than %d", MAX_DEPTH);
    return NULL;
  }
  int handled;
  cJSON *sp = special_json(c, m, depth, &handled);
  if (handled) return sp;
  const ProtobufCMessageDescriptor *md = m->descriptor;
  const char *base = (const char *)m;
  if (kb_pb_in_table(kb_k8s_pb_slice, kb_k8s_pb_n_slice, md->name, NULL) && md->n_fields == 1 &&
      md->fields[0].label == PROTOBUF_C_LABEL_REPEATED)
    return repeated_json(c, md, &md->fields[0], base, depth);
  cJSON *o = cJSON_CreateObject();
  for (unsigned i = 0; o && i < md->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &md->fields[i];
    cJSON *v;
    int zero = 0;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      if (!*(const size_t *)(base + fd->quantifier_offset)) continue;
      v = repeated_json(c, md, fd, base, depth);
    } else {
      const void *p;
      if (!present(m, fd, &p)) continue; /* absent: proto2 presence */
      v = value_json(c, fd, p, depth, &zero);
      if (v && zero && kb_pb_in_table(kb_k8s_pb_omitempty, kb_k8s_pb_n_omitempty, md->name, fd->name)) {
        cJSON_Delete(v); /* a zero Go's JSON omits */
        continue;
      }
    }
    if (!v) goto fail;
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE && cJSON_IsObject(v) &&
        kb_pb_in_table(kb_k8s_pb_inline, kb_k8s_pb_n_inline, md->name, fd->name)) {
      merge_into(o, v);
      continue;
    }
    cJSON_AddItemToObject(o, fd->name, v);
  }
  if (!o) kb_pb_fail(c, "out of memory");
  return o;
fail:
  cJSON_Delete(o);
  return NULL;
}
