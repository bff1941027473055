/* JSON to a protobuf-c message, the reverse of pb_json.c: the same
 * descriptors, the same Kubernetes mapping (include/kb/k8s_proto.h). Used
 * to answer clients that ask for application/vnd.kubernetes.protobuf; any
 * value the schema cannot hold fails the whole encoding, and the caller
 * answers JSON instead. JSON members the schema does not know are dropped,
 * as the apiserver's typed encoding drops them. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "k8s_pb_internal.h"
#include "kb/base64.h"
#include "k8s_pb_tables.h"

#define META "k8s.io.apimachinery.pkg.apis.meta.v1."
#define MAX_DEPTH 64

static int is_inline(const char *msg, const char *field) {
  return kb_pb_in_table(kb_k8s_pb_inline, kb_k8s_pb_n_inline, msg, field);
}

static int is_slice(const char *msg) {
  return kb_pb_in_table(kb_k8s_pb_slice, kb_k8s_pb_n_slice, msg, NULL);
}

static int is_time(const char *name) {
  return !strcmp(name, META "Time") || !strcmp(name, META "MicroTime");
}

static ProtobufCMessage *new_msg(const ProtobufCMessageDescriptor *d) {
  ProtobufCMessage *m = malloc(d->sizeof_message);
  if (m) protobuf_c_message_init(d, m);
  return m;
}

/* ---- scalars --------------------------------------------------------------------- */

static int unb64(pb_ctx *c, const char *s, ProtobufCBinaryData *out) {
  size_t n = strlen(s);
  uint8_t *buf = malloc(n / 4 * 3 + 3), *o = buf;
  if (!buf) return kb_pb_fail(c, "out of memory");
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < n && s[i] != '='; i++) {
    int d = kb_base64_value((unsigned char)s[i]);
    if (d < 0) break;
    acc = acc << 6 | (uint32_t)d;
    if ((bits += 6) >= 8) *o++ = (uint8_t)(acc >> (bits -= 8));
  }
  while (i < n && s[i] == '=') i++;
  if (i != n || (n % 4)) {
    free(buf);
    return kb_pb_fail(c, "not base64");
  }
  out->data = buf;
  out->len = (size_t)(o - buf);
  return 0;
}

static int integral(pb_ctx *c, const cJSON *v, const char *name, double lo, double hi, double *d) {
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
      v->valuedouble > hi)
    return kb_pb_fail(c, "%s: an integer expected", name);
  *d = v->valuedouble;
  return 0;
}

/* Writes the value v of field fd's type at p (an element or the field). */
static int put_scalar(pb_ctx *c, const ProtobufCFieldDescriptor *fd, const cJSON *v, void *p) {
  double d = 0;
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_ENUM:
    if (integral(c, v, fd->name, -2147483648.0, 2147483647.0, &d)) return -1;
    *(int32_t *)p = (int32_t)d;
    return 0;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    if (integral(c, v, fd->name, 0, 4294967295.0, &d)) return -1;
    *(uint32_t *)p = (uint32_t)d;
    return 0;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    if (integral(c, v, fd->name, -KB_PB_JSON_INT_MAX, KB_PB_JSON_INT_MAX, &d)) return -1;
    *(int64_t *)p = (int64_t)d;
    return 0;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    if (integral(c, v, fd->name, 0, KB_PB_JSON_INT_MAX, &d)) return -1;
    *(uint64_t *)p = (uint64_t)d;
    return 0;
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE:
    if (!cJSON_IsNumber(v)) return kb_pb_fail(c, "%s: a number expected", fd->name);
    if (fd->type == PROTOBUF_C_TYPE_FLOAT) *(float *)p = (float)v->valuedouble;
    else *(double *)p = v->valuedouble;
    return 0;
  case PROTOBUF_C_TYPE_BOOL:
    if (!cJSON_IsBool(v)) return kb_pb_fail(c, "%s: a boolean expected", fd->name);
    *(protobuf_c_boolean *)p = cJSON_IsTrue(v);
    return 0;
  case PROTOBUF_C_TYPE_STRING:
    if (!cJSON_IsString(v)) return kb_pb_fail(c, "%s: a string expected", fd->name);
    if (!(*(char **)p = strdup(v->valuestring))) return kb_pb_fail(c, "out of memory");
    return 0;
  case PROTOBUF_C_TYPE_BYTES:
    if (!cJSON_IsString(v)) return kb_pb_fail(c, "%s: a base64 string expected", fd->name);
    return unb64(c, v->valuestring, p);
  case PROTOBUF_C_TYPE_MESSAGE: break;
  }
  return kb_pb_fail(c, "%s: unexpected type", fd->name);
}

/* ---- the messages with a JSON form of their own ------------------------------------ */

static const ProtobufCFieldDescriptor *fd_of(const ProtobufCMessage *m, const char *name) {
  return protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
}

static void set_has(ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd) {
  if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->type != PROTOBUF_C_TYPE_STRING &&
      fd->type != PROTOBUF_C_TYPE_MESSAGE)
    *(protobuf_c_boolean *)((char *)m + fd->quantifier_offset) = 1;
}

static void set_int(ProtobufCMessage *m, const char *name, int64_t v) {
  const ProtobufCFieldDescriptor *fd = fd_of(m, name);
  if (!fd) return;
  if (fd->type == PROTOBUF_C_TYPE_INT32) *(int32_t *)((char *)m + fd->offset) = (int32_t)v;
  else *(int64_t *)((char *)m + fd->offset) = v;
  set_has(m, fd);
}

static int set_str(pb_ctx *c, ProtobufCMessage *m, const char *name, const char *s) {
  const ProtobufCFieldDescriptor *fd = fd_of(m, name);
  if (!fd) return 0;
  char **p = (char **)((char *)m + fd->offset);
  if (!(*p = strdup(s))) return kb_pb_fail(c, "out of memory");
  return 0;
}

static int set_bytes(pb_ctx *c, ProtobufCMessage *m, const char *text) {
  const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(m->descriptor, 1);
  if (!fd || fd->type != PROTOBUF_C_TYPE_BYTES) return kb_pb_fail(c, "no bytes field");
  ProtobufCBinaryData *b = (ProtobufCBinaryData *)((char *)m + fd->offset);
  if (!(b->data = (uint8_t *)strdup(text))) return kb_pb_fail(c, "out of memory");
  b->len = strlen(text);
  set_has(m, fd);
  return 0;
}

static int digits(const char *s, int n, int *out) {
  *out = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    *out = *out * 10 + (s[i] - '0');
  }
  return 0;
}

/* RFC 3339 ("2026-01-02T03:04:05Z", fraction and offset allowed). */
static int parse_time(const char *s, int64_t *sec, int32_t *nanos) {
  int y, mo, d, h, mi, se;
  if (strlen(s) < 20 || digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) || s[7] != '-' ||
      digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') || digits(s + 11, 2, &h) ||
      s[13] != ':' || digits(s + 14, 2, &mi) || s[16] != ':' || digits(s + 17, 2, &se))
    return -1;
  const char *p = s + 19;
  int32_t ns = 0;
  if (*p == '.') {
    int n = 0;
    for (p++; isdigit((unsigned char)*p); p++, n++)
      if (n < 9) ns = ns * 10 + (*p - '0');
    if (!n) return -1;
    for (; n < 9; n++) ns *= 10;
  }
  int off = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int oh, om;
    if (digits(p + 1, 2, &oh) || p[3] != ':' || digits(p + 4, 2, &om)) return -1;
    off = (*p == '-' ? -1 : 1) * (oh * 3600 + om * 60);
    p += 6;
  } else {
    return -1;
  }
  if (*p || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return -1;
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                  .tm_min = mi, .tm_sec = se};
  *sec = (int64_t)timegm(&tm) - off;
  *nanos = ns;
  return 0;
}

/* Go's time.ParseDuration: [-]( number unit )+, units ns us µs ms s m h. */
static int parse_duration(const char *s, int64_t *out) {
  static const struct { const char *u; double ns; } units[] = {
      {"ns", 1}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3}, {"ms", 1e6},
      {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
  int neg = *s == '-';
  if (*s == '-' || *s == '+') s++;
  if (!strcmp(s, "0")) return *out = 0, 0;
  double total = 0;
  if (!*s) return -1;
  while (*s) {
    char *end;
    if (!isdigit((unsigned char)*s) && *s != '.') return -1;
    double v = strtod(s, &end);
    if (end == s) return -1;
    s = end;
    size_t best = 0, bl = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      size_t l = strlen(units[i].u);
      if (!strncmp(s, units[i].u, l) && l > bl) best = i, bl = l;
    }
    if (!bl) return -1;
    total += v * units[best].ns;
    s += bl;
  }
  if (total > 9.2e18) return -1;
  *out = (int64_t)(neg ? -total : total);
  return 0;
}

/* Fills m (a message with a JSON form of its own) from v; *handled 0 when
 * m has none. */
static int special(pb_ctx *c, ProtobufCMessage *m, const cJSON *v, int *handled) {
  const char *name = m->descriptor->name;
  *handled = 1;
  if (!strcmp(name, "k8s.io.apimachinery.pkg.api.resource.Quantity") ||
      !strcmp(name, "k8s.io.apimachinery.pkg.api.resource.QuantityValue")) {
    char num[64];
    if (cJSON_IsNumber(v)) snprintf(num, sizeof num, "%.17g", v->valuedouble);
    else if (!cJSON_IsString(v)) return kb_pb_fail(c, "a quantity expected");
    return set_str(c, m, "string", cJSON_IsString(v) ? v->valuestring : num);
  }
  if (is_time(name)) {
    int64_t s;
    int32_t ns;
    if (!cJSON_IsString(v) || parse_time(v->valuestring, &s, &ns))
      return kb_pb_fail(c, "an RFC 3339 time expected");
    set_int(m, "seconds", s);
    if (ns) set_int(m, "nanos", ns);
    return 0;
  }
  if (!strcmp(name, META "Duration")) {
    int64_t d;
    if (!cJSON_IsString(v) || parse_duration(v->valuestring, &d)) return kb_pb_fail(c, "a duration expected");
    set_int(m, "duration", d);
    return 0;
  }
  if (!strcmp(name, "k8s.io.apimachinery.pkg.util.intstr.IntOrString")) {
    double d = 0;
    if (cJSON_IsString(v)) {
      set_int(m, "type", 1);
      return set_str(c, m, "strVal", v->valuestring);
    }
    if (integral(c, v, "IntOrString", -2147483648.0, 2147483647.0, &d)) return -1;
    set_int(m, "type", 0);
    set_int(m, "intVal", (int64_t)d);
    return 0;
  }
  if (!strcmp(name, "k8s.io.apimachinery.pkg.runtime.RawExtension") ||
      !strcmp(name, META "FieldsV1")) {
    char *text = cJSON_PrintUnformatted(v);
    int rc = text ? set_bytes(c, m, text) : kb_pb_fail(c, "out of memory");
    free(text);
    return rc;
  }
  *handled = 0;
  return 0;
}

/* ---- messages ------------------------------------------------------------------ */

static int fill(pb_ctx *c, ProtobufCMessage *m, const cJSON *v, int depth);

static int is_map_entry(const ProtobufCMessageDescriptor *parent, const ProtobufCMessageDescriptor *d) {
  size_t pl = strlen(parent->name), sl = strlen(d->short_name);
  return d->n_fields == 2 && sl > 5 && !strcmp(d->short_name + sl - 5, "Entry") &&
         !strncmp(d->name, parent->name, pl) && d->name[pl] == '.' && d->fields[0].id == 1 &&
         d->fields[1].id == 2;
}

/* One value of field fd (an element when repeated) at p. */
static int put_value(pb_ctx *c, const ProtobufCFieldDescriptor *fd, const cJSON *v, void *p,
                     int depth) {
  if (fd->type != PROTOBUF_C_TYPE_MESSAGE) return put_scalar(c, fd, v, p);
  ProtobufCMessage *sub = new_msg(fd->descriptor);
  if (!sub) return kb_pb_fail(c, "out of memory");
  *(ProtobufCMessage **)p = sub; /* owned by the parent from here on */
  return fill(c, sub, v, depth + 1);
}

static int put_map(pb_ctx *c, const ProtobufCFieldDescriptor *fd, const cJSON *v, char *base,
                   int depth) {
  if (!cJSON_IsObject(v)) return kb_pb_fail(c, "%s: an object expected", fd->name);
  size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
  ProtobufCMessage **arr = calloc(n ? n : 1, sizeof *arr);
  if (!arr) return kb_pb_fail(c, "out of memory");
  *(ProtobufCMessage ***)(base + fd->offset) = arr;
  const ProtobufCMessageDescriptor *d = fd->descriptor;
  for (const cJSON *it = v->child; it; it = it->next) {
    ProtobufCMessage *e = new_msg(d);
    if (!e) return kb_pb_fail(c, "out of memory");
    arr[i++] = e;
    *(size_t *)(base + fd->quantifier_offset) = i;
    cJSON key = {.type = cJSON_String, .valuestring = it->string};
    if (put_value(c, &d->fields[0], &key, (char *)e + d->fields[0].offset, depth) ||
        put_value(c, &d->fields[1], it, (char *)e + d->fields[1].offset, depth))
      return -1;
    set_has(e, &d->fields[0]);
    set_has(e, &d->fields[1]);
  }
  return 0;
}

static int put_repeated(pb_ctx *c, const ProtobufCMessageDescriptor *md,
                        const ProtobufCFieldDescriptor *fd, const cJSON *v, char *base, int depth) {
  if (fd->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(md, fd->descriptor))
    return put_map(c, fd, v, base, depth);
  if (!cJSON_IsArray(v)) return kb_pb_fail(c, "%s: an array expected", fd->name);
  size_t n = (size_t)cJSON_GetArraySize(v), sz, i = 0;
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: sz = 8; break;
  case PROTOBUF_C_TYPE_DOUBLE: sz = sizeof(double); break;
  case PROTOBUF_C_TYPE_BOOL: sz = sizeof(protobuf_c_boolean); break;
  case PROTOBUF_C_TYPE_STRING: sz = sizeof(char *); break;
  case PROTOBUF_C_TYPE_BYTES: sz = sizeof(ProtobufCBinaryData); break;
  case PROTOBUF_C_TYPE_MESSAGE: sz = sizeof(ProtobufCMessage *); break;
  default: sz = 4; break;
  }
  char *arr = calloc(n ? n : 1, sz);
  if (!arr) return kb_pb_fail(c, "out of memory");
  *(char **)(base + fd->offset) = arr;
  for (const cJSON *it = v->child; it; it = it->next) {
    /* count first: a failure leaves only what was written for the free */
    *(size_t *)(base + fd->quantifier_offset) = i + 1;
    if (put_value(c, fd, it, arr + i++ * sz, depth)) return -1;
  }
  return 0;
}

static int fill(pb_ctx *c, ProtobufCMessage *m, const cJSON *v, int depth) {
  if (depth > MAX_DEPTH) return kb_pb_fail(c, "nested deeper than %d", MAX_DEPTH);
  int handled;
  if (special(c, m, v, &handled) || handled) return c->err[0] ? -1 : 0;
  const ProtobufCMessageDescriptor *md = m->descriptor;
  char *base = (char *)m;
  if (is_slice(md->name) && md->n_fields == 1)
    return put_repeated(c, md, &md->fields[0], v, base, depth);
  if (!cJSON_IsObject(v)) return kb_pb_fail(c, "%s: an object expected", md->short_name);
  for (unsigned i = 0; i < md->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &md->fields[i];
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE && fd->label != PROTOBUF_C_LABEL_REPEATED &&
        is_inline(md->name, fd->name)) {
      if (put_value(c, fd, v, base + fd->offset, depth)) return -1; /* from the same object */
      continue;
    }
    const cJSON *fv = cJSON_GetObjectItemCaseSensitive(v, fd->name);
    if (!fv) continue;
    if (cJSON_IsNull(fv)) {
      /* a zero time is null in JSON and an empty message on the wire (Go's
       * non-pointer Time); other nulls are absent */
      if (fd->type == PROTOBUF_C_TYPE_MESSAGE && fd->label != PROTOBUF_C_LABEL_REPEATED &&
          is_time(((const ProtobufCMessageDescriptor *)fd->descriptor)->name) &&
          !(*(ProtobufCMessage **)(base + fd->offset) = new_msg(fd->descriptor)))
        return kb_pb_fail(c, "out of memory");
      continue;
    }
    int rc = fd->label == PROTOBUF_C_LABEL_REPEATED ? put_repeated(c, md, fd, fv, base, depth)
                                                    : put_value(c, fd, fv, base + fd->offset, depth);
    if (rc) return -1;
    set_has(m, fd);
  }
  return 0;
}

ProtobufCMessage *kb_pb_message_from_json(pb_ctx *c, const ProtobufCMessageDescriptor *d,
                                          const cJSON *v) {
  ProtobufCMessage *m = new_msg(d);
  if (!m) {
    kb_pb_fail(c, "out of memory");
    return NULL;
  }
  if (fill(c, m, v, 0)) {
    protobuf_c_message_free_unpacked(m, NULL);
    return NULL;
  }
  return m;
}
