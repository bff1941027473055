/* Kubernetes protobuf bodies (include/kb/k8s_proto.h): the "k8s\0"
 * magic, the runtime.Unknown envelope, and the message its apiVersion and
 * kind name, found among every message protoc-c generated from the
 * vendored .proto files; pb_json.c turns the message into JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "k8s_pb_internal.h"
#include "k8s_pb_tables.h"
#include "k8s.io/apimachinery/pkg/runtime/generated.pb-c.h"
#include "kb/k8s_proto.h"

static const uint8_t MAGIC[4] = {'k', '8', 's', 0};

/* s for an error message: printable ASCII, the rest as '?' (a name cut at
 * 64 bytes, or not UTF-8, must not make the Status invalid JSON text). */
static const char *printable(const char *s, char out[65]) {
  size_t i = 0;
  for (; s[i] && i < 64; i++) out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  out[i] = '\0';
  return out;
}

static const ProtobufCMessageDescriptor *find_full(const char *full) {
  for (size_t i = 0; i < kb_k8s_pb_n_messages; i++)
    if (!strcmp(kb_k8s_pb_messages[i]->name, full)) return kb_k8s_pb_messages[i];
  return NULL;
}

/* The message of apiVersion + kind: k8s.io.api.<group>.<version>.<kind>
 * (the legacy group is "core"; "coordination.k8s.io" is "coordination"),
 * else meta/v1's (DeleteOptions, ListOptions, Status: every group version
 * carries them, as the apiserver's scheme registers them). */
static const ProtobufCMessageDescriptor *find_kind(const char *api_version, const char *kind) {
  for (const char *p = api_version; *p; p++)
    if (*p < 0x21 || *p > 0x7e) return NULL; /* API versions are ASCII names */
  const char *slash = strchr(api_version, '/');
  char group[64], version[32], full[256];
  if (slash) {
    size_t gl = strcspn(api_version, "./");
    if (gl >= sizeof group) return NULL;
    memcpy(group, api_version, gl);
    group[gl] = '\0';
    snprintf(version, sizeof version, "%s", slash + 1);
  } else {
    snprintf(group, sizeof group, "core");
    snprintf(version, sizeof version, "%s", api_version);
  }
  if (!*version || !*kind || strchr(version, '.') || strchr(kind, '.')) return NULL;
  snprintf(full, sizeof full, "k8s.io.api.%s.%s.%s", group, version, kind);
  const ProtobufCMessageDescriptor *d = find_full(full);
  if (d) return d;
  snprintf(full, sizeof full, "k8s.io.apimachinery.pkg.apis.meta.%s.%s", version, kind);
  return find_full(full);
}

int kb_k8s_proto_knows(const char *api_version, const char *kind) {
  return api_version && kind && find_kind(api_version, kind) != NULL;
}

int kb_k8s_proto_media(const char *ct) {
  if (!ct) return 0;
  while (*ct == ' ' || *ct == '\t') ct++;
  size_t n = strlen(KB_K8S_PROTO_MEDIA);
  return !strncasecmp(ct, KB_K8S_PROTO_MEDIA, n) &&
         (ct[n] == '\0' || ct[n] == ';' || ct[n] == ',' || ct[n] == ' ' || ct[n] == '\t');
}

static cJSON *typed_json(pb_ctx *c, const ProtobufCMessageDescriptor *d, const uint8_t *data,
                         size_t len, int depth) {
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, data);
  if (!m) {
    snprintf(c->err, sizeof c->err, "the %zu bytes of the object are not a valid %s message",
             len, d->name);
    return NULL;
  }
  cJSON *o = kb_pb_message_json(c, m, depth);
  protobuf_c_message_free_unpacked(m, NULL);
  return o;
}

/* o with apiVersion and kind first, as the apiserver writes them. */
static cJSON *with_type(pb_ctx *c, cJSON *o, const char *av, const char *kind) {
  cJSON *t = cJSON_CreateObject();
  if (!t || !cJSON_AddStringToObject(t, "apiVersion", av) ||
      !cJSON_AddStringToObject(t, "kind", kind)) {
    cJSON_Delete(t);
    cJSON_Delete(o);
    snprintf(c->err, sizeof c->err, "out of memory");
    return NULL;
  }
  while (o->child) {
    cJSON *it = cJSON_DetachItemViaPointer(o, o->child);
    if (!strcmp(it->string, "apiVersion") || !strcmp(it->string, "kind")) cJSON_Delete(it);
    else cJSON_AddItemToObject(t, it->string, it); /* the envelope's type wins */
  }
  cJSON_Delete(o);
  return t;
}

cJSON *kb_pb_body_json(pb_ctx *c, const uint8_t *body, size_t len, int depth) {
  if (len < sizeof MAGIC || memcmp(body, MAGIC, sizeof MAGIC)) {
    snprintf(c->err, sizeof c->err, "the body does not start with the Kubernetes protobuf "
             "prefix \"k8s\\x00\"");
    return NULL;
  }
  K8s__Io__Apimachinery__Pkg__Runtime__Unknown *u =
      k8s__io__apimachinery__pkg__runtime__unknown__unpack(NULL, len - 4, body + 4);
  if (!u) {
    snprintf(c->err, sizeof c->err, "the body is not a valid runtime.Unknown envelope");
    return NULL;
  }
  cJSON *o = NULL;
  const char *av = u->typemeta && u->typemeta->apiversion ? u->typemeta->apiversion : "";
  const char *kind = u->typemeta && u->typemeta->kind ? u->typemeta->kind : "";
  const ProtobufCMessageDescriptor *d = NULL;
  char p1[65], p2[65];
  if (u->contentencoding && *u->contentencoding) {
    snprintf(c->err, sizeof c->err, "content encoding \"%s\" is not supported",
             printable(u->contentencoding, p1));
  } else if (u->contenttype && *u->contenttype && !kb_k8s_proto_media(u->contenttype)) {
    snprintf(c->err, sizeof c->err, "an envelope of content type \"%s\" is not supported",
             printable(u->contenttype, p1));
  } else if (!*kind) {
    snprintf(c->err, sizeof c->err, "Object 'Kind' is missing in the protobuf envelope");
  } else if (!(d = find_kind(av, kind))) {
    /* the apiserver's scheme error */
    snprintf(c->err, sizeof c->err, "no kind \"%s\" is registered for version \"%s\" in "
             "scheme \"pkg/api/legacyscheme/scheme.go:30\"", printable(kind, p1), printable(av, p2));
  } else {
    o = typed_json(c, d, u->has_raw ? u->raw.data : NULL, u->has_raw ? u->raw.len : 0, depth);
    if (o && cJSON_IsObject(o)) o = with_type(c, o, av, kind);
  }
  k8s__io__apimachinery__pkg__runtime__unknown__free_unpacked(u, NULL);
  return o;
}

static void copy_err(const pb_ctx *c, char *err, size_t errlen) {
  if (err && errlen) snprintf(err, errlen, "protobuf: %s", c->err[0] ? c->err : "invalid body");
}

cJSON *kb_k8s_proto_decode(const void *body, size_t len, char *err, size_t errlen) {
  pb_ctx c = {{0}};
  cJSON *o = kb_pb_body_json(&c, body, len, 0);
  if (!o) copy_err(&c, err, errlen);
  return o;
}

cJSON *kb_k8s_proto_decode_message(const char *full_name, const void *data, size_t len,
                                   char *err, size_t errlen) {
  pb_ctx c = {{0}};
  const ProtobufCMessageDescriptor *d = find_full(full_name);
  cJSON *o = NULL;
  if (!d) snprintf(c.err, sizeof c.err, "no message %.128s", full_name);
  else o = typed_json(&c, d, data, len, 0);
  if (!o) copy_err(&c, err, errlen);
  return o;
}

int kb_k8s_proto_encode(const cJSON *obj, uint8_t **out, size_t *len, char *err, size_t errlen) {
  pb_ctx c = {{0}};
  *out = NULL;
  *len = 0;
  const char *av = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "apiVersion"));
  const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "kind"));
  const ProtobufCMessageDescriptor *d = av && kind ? find_kind(av, kind) : NULL;
  ProtobufCMessage *m = d ? kb_pb_message_from_json(&c, d, obj) : NULL;
  if (!d) snprintf(c.err, sizeof c.err, "no message for this apiVersion and kind");
  uint8_t *raw = NULL, *body = NULL;
  if (m) {
    size_t rn = protobuf_c_message_get_packed_size(m);
    raw = malloc(rn ? rn : 1);
    K8s__Io__Apimachinery__Pkg__Runtime__TypeMeta tm = K8S__IO__APIMACHINERY__PKG__RUNTIME__TYPE_META__INIT;
    tm.apiversion = (char *)av;
    tm.kind = (char *)kind;
    K8s__Io__Apimachinery__Pkg__Runtime__Unknown u = K8S__IO__APIMACHINERY__PKG__RUNTIME__UNKNOWN__INIT;
    u.typemeta = &tm;
    u.has_raw = 1;
    u.raw.len = raw ? protobuf_c_message_pack(m, raw) : 0;
    u.raw.data = raw;
    u.contentencoding = "";
    u.contenttype = "";
    size_t un = k8s__io__apimachinery__pkg__runtime__unknown__get_packed_size(&u);
    body = raw ? malloc(sizeof MAGIC + un) : NULL;
    if (body) {
      memcpy(body, MAGIC, sizeof MAGIC);
      *len = sizeof MAGIC + k8s__io__apimachinery__pkg__runtime__unknown__pack(&u, body + sizeof MAGIC);
    } else {
      snprintf(c.err, sizeof c.err, "out of memory");
    }
    free(raw);
    protobuf_c_message_free_unpacked(m, NULL);
  }
  if (!body) {
    copy_err(&c, err, errlen);
    return -1;
  }
  *out = body;
  return 0;
}
