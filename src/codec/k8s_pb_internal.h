/* Shared by the two halves of the Kubernetes protobuf decoder: the body
 * (k8s_proto.c: magic, envelope, kind lookup) and the message converters
 * (pb_json.c, and json_pb.c the other way). */
#ifndef KB_K8S_PB_INTERNAL_H
#define KB_K8S_PB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

/* The largest magnitude of an integer a JSON number (a double, in cJSON and
 * in Lua's decoded tables) holds exactly: 2^53. A 64-bit field beyond it is
 * refused both ways, never rounded into another number. */
#define KB_PB_JSON_INT_MAX 9007199254740992.0

typedef struct pb_ctx {
  char err[256]; /* the first failure */
} pb_ctx;

/* Records the first failure (the innermost message wins); returns -1. */
int kb_pb_fail(pb_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "msg.field" (or msg when field is NULL) in a sorted table of names. */
int kb_pb_in_table(const char *const *tab, size_t n, const char *msg, const char *field);

/* m as JSON; NULL with c->err set. depth counts nested messages. */
cJSON *kb_pb_message_json(pb_ctx *c, const ProtobufCMessage *m, int depth);
/* A whole "k8s\0" body (also inside a RawExtension). */
cJSON *kb_pb_body_json(pb_ctx *c, const uint8_t *body, size_t len, int depth);

/* v as a new message of type d (free with protobuf_c_message_free_unpacked);
 * NULL with c->err set when the schema cannot hold v. */
ProtobufCMessage *kb_pb_message_from_json(pb_ctx *c, const ProtobufCMessageDescriptor *d,
                                          const cJSON *v);

#endif
