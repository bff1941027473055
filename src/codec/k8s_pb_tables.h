/* The tables cmake/k8s_pb_tables.cmake generates from protoc-c's output
 * and specs/k8s/proto/gojson.txt (build/generated/pb/k8s_pb_tables.c). */
#ifndef KB_K8S_PB_TABLES_H
#define KB_K8S_PB_TABLES_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

/* every message of the vendored .proto files */
extern const ProtobufCMessageDescriptor *const kb_k8s_pb_messages[];
extern const size_t kb_k8s_pb_n_messages;
/* "<message full name>.<field>", sorted (strcmp): fields whose struct Go
 * embeds inline, and non-pointer omitempty fields */
extern const char *const kb_k8s_pb_inline[];
extern const size_t kb_k8s_pb_n_inline;
extern const char *const kb_k8s_pb_omitempty[];
extern const size_t kb_k8s_pb_n_omitempty;
/* "<message full name>": messages wrapping a named Go slice type */
extern const char *const kb_k8s_pb_slice[];
extern const size_t kb_k8s_pb_n_slice;

#endif
