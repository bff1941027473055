/* Fuzz target: the Kubernetes protobuf decoder (src/codec/k8s_proto.c,
 * pb_json.c).
 *
 * Input layout: one selector byte, then the bytes. Selector 0 decodes them
 * as a whole body ("k8s\0" + runtime.Unknown); 1..N as one message of the
 * list below, to reach deep fields without the envelope. Properties
 * checked besides "no crash, no sanitizer report":
 *  - a failure gives NULL and a bounded "protobuf: " message;
 *  - a body gives an object whose apiVersion and kind are strings;
 *  - the JSON prints and parses back to an equal tree;
 *  - a body's JSON encodes back to protobuf (kb_k8s_proto_encode, the
 *    answer to an Accept of protobuf), and that decodes to the same JSON,
 *    but for members that were null: those may be gone. Go does the same
 *    (a present but empty FieldsV1 marshals as "fieldsV1": null, and null
 *    unmarshals to a nil pointer, which protobuf then omits), and Go's
 *    JSON reads null and absent alike. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/k8s_proto.h"

static const char *const MESSAGES[] = {
    "k8s.io.api.core.v1.Pod",           "k8s.io.api.core.v1.Secret",
    "k8s.io.api.batch.v1.Job",          "k8s.io.api.apps.v1.Deployment",
    "k8s.io.api.policy.v1.Eviction",    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "k8s.io.api.core.v1.Service",       "k8s.io.api.coordination.v1.Lease",
    "k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent"};
#define N_MESSAGES (sizeof MESSAGES / sizeof MESSAGES[0])

static void fail(const char *what) {
  fprintf(stderr, "fuzz_k8s_proto: %s\n", what);
  abort();
}

/* a and b equal, but that a member null in a may be absent from b. */
static int same_but_nulls(const cJSON *a, const cJSON *b) {
  if (!cJSON_IsObject(a) && !cJSON_IsArray(a)) return cJSON_Compare(a, b, 1);
  if (cJSON_IsObject(a) != cJSON_IsObject(b) || cJSON_IsArray(a) != cJSON_IsArray(b)) return 0;
  if (cJSON_IsArray(a)) {
    const cJSON *y = b->child;
    for (const cJSON *x = a->child; x; x = x->next, y = y->next)
      if (!y || !same_but_nulls(x, y)) return 0;
    return y == NULL;
  }
  int in_b = 0;
  for (const cJSON *x = a->child; x; x = x->next) {
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
    if (y) in_b++;
    if (y ? !same_but_nulls(x, y) : !cJSON_IsNull(x)) return 0;
  }
  return in_b == cJSON_GetArraySize(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned sel = data[0] % (N_MESSAGES + 1);
  char err[KB_K8S_PROTO_ERRLEN];
  memset(err, 0, sizeof err);
  /* the bytes in an allocation of their exact size: an over-read trips ASan */
  uint8_t *b = malloc(size - 1 ? size - 1 : 1);
  if (!b) return 0;
  memcpy(b, data + 1, size - 1);
  cJSON *o = sel == 0 ? kb_k8s_proto_decode(b, size - 1, err, sizeof err)
                      : kb_k8s_proto_decode_message(MESSAGES[sel - 1], b, size - 1, err, sizeof err);
  free(b);
  if (!o) {
    if (strncmp(err, "protobuf: ", 10) || !memchr(err, '\0', sizeof err)) fail("bad error message");
    return 0;
  }
  if (sel == 0 && (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "apiVersion")) ||
                   !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "kind"))))
    fail("a body without apiVersion/kind strings");
  char *text = cJSON_PrintUnformatted(o);
  if (text) {
    cJSON *back = cJSON_Parse(text);
    if (!back || !cJSON_Compare(o, back, 1)) fail("the JSON does not parse back equal");
    cJSON_Delete(back);
    free(text);
  }
  uint8_t *pb;
  size_t n;
  if (sel == 0) { /* what the decoder makes, the encoder takes */
    if (kb_k8s_proto_encode(o, &pb, &n, err, sizeof err)) fail(err);
    cJSON *again = kb_k8s_proto_decode(pb, n, err, sizeof err);
    free(pb);
    if (!again || !same_but_nulls(o, again)) fail("encode + decode changed the object");
    cJSON_Delete(again);
  }
  cJSON_Delete(o);
  return 0;
}
