/* Kubernetes protobuf bodies (application/vnd.kubernetes.protobuf) as the
 * apiserver reads them, converted to the JSON the same object has, and
 * back (kb_k8s_proto_encode, for answers). No Lua,
 * no libuv: the codec layer, over protobuf-c and the descriptors protoc-c
 * generates from the vendored .proto files (specs/k8s/proto).
 *
 *   char err[KB_K8S_PROTO_ERRLEN];
 *   cJSON *obj = kb_k8s_proto_decode(body, len, err, sizeof err);
 *   if (!obj) reply_400(err);   // "protobuf: ..."
 *
 * A body is the 4 bytes "k8s\0", then a runtime.Unknown: typeMeta
 * {apiVersion, kind}, raw (the typed message), contentEncoding,
 * contentType. apiVersion + kind name the message: package
 * k8s.io.api.<group>.<version> (group "core" for the legacy "v1", the
 * ".k8s.io" suffix dropped) and the kind, then meta/v1 (DeleteOptions and
 * the other options every group version carries). The JSON mapping is
 * Kubernetes': field names as in the .proto (they are the JSON names),
 * only the fields present, repeated fields as arrays, map<> as objects,
 * bytes as base64, Quantity, Time, MicroTime, Duration, IntOrString,
 * RawExtension and FieldsV1 as their JSON forms, and the two facts of the
 * Go types the .proto files lack (specs/k8s/proto/gojson.txt): inlined
 * structs and zero values Go's JSON omits. */
#ifndef KB_K8S_PROTO_H
#define KB_K8S_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define KB_K8S_PROTO_MEDIA "application/vnd.kubernetes.protobuf"
/* A buffer of this size holds any error message of this module. */
#define KB_K8S_PROTO_ERRLEN 256

/* The object of a whole protobuf body, with apiVersion and kind from its
 * envelope; NULL with a message in err when the body is not one
 * (truncated, malformed, an unknown kind, a string that is not UTF-8). */
cJSON *kb_k8s_proto_decode(const void *body, size_t len, char *err, size_t errlen);

/* One message, by its full protobuf name ("k8s.io.api.core.v1.Secret"),
 * from its wire bytes, as JSON (no apiVersion/kind added). */
cJSON *kb_k8s_proto_decode_message(const char *full_name, const void *data, size_t len,
                                   char *err, size_t errlen);

/* The reverse: obj (with apiVersion and kind) as a whole protobuf body in
 * *out (malloc'd, *len bytes). -1 with a message when no message exists
 * for its kind or a value does not fit the schema (answer JSON then).
 * Members the schema does not know are dropped, as the apiserver's typed
 * encoding drops them. */
int kb_k8s_proto_encode(const cJSON *obj, uint8_t **out, size_t *len, char *err, size_t errlen);

/* 1 when a message exists for apiVersion + kind ("batch/v1", "Job"). */
int kb_k8s_proto_knows(const char *api_version, const char *kind);

/* 1 when the media type (a Content-Type value, or the first of an Accept
 * list; parameters allowed) is application/vnd.kubernetes.protobuf. */
int kb_k8s_proto_media(const char *content_type);

#endif
