/* Base64 (RFC 4648, standard alphabet, padded): the one encoder and the
 * one alphabet of the tree, header-only so that every layer (stats' HDR
 * histograms, the codecs, the simulator's continue tokens) shares them
 * without a link dependency. Decoders differ in what they accept (strict
 * and canonical for histograms, lenient for tokens) and build on
 * kb_base64_value. */
#ifndef KB_BASE64_H
#define KB_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Characters kb_base64_encode writes for n bytes (without the NUL). */
#define KB_BASE64_LEN(n) (((n) + 2) / 3 * 4)

/* Writes KB_BASE64_LEN(n) characters and a NUL to out; returns the length. */
static inline size_t kb_base64_encode(const uint8_t *in, size_t n, char *out) {
  static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t j = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                 (i + 2 < n ? in[i + 2] : 0);
    out[j++] = abc[v >> 18 & 63];
    out[j++] = abc[v >> 12 & 63];
    out[j++] = i + 1 < n ? abc[v >> 6 & 63] : '=';
    out[j++] = i + 2 < n ? abc[v & 63] : '=';
  }
  out[j] = '\0';
  return j;
}

/* The 6-bit value of an alphabet character, -1 for anything else ('='
 * included). */
static inline int kb_base64_value(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

#endif
