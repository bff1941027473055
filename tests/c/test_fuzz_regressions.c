/* Regression tests for the crashes and violated properties the fuzz targets
 * found (tests/fuzz/, inputs in tests/fuzz/regressions/<target>/), so the
 * ordinary suite (and its ASan build) keeps checking them without clang. */
#include <stdlib.h>
#include <string.h>

#include "kb/multipart.h"
#include "kbtest.h"

/* A copy of s in an allocation of exactly strlen(s) bytes: no NUL after
 * it, as a request body arrives, so ASan sees any read past its end. */
static char *exact(const char *s, size_t *len) {
  *len = strlen(s);
  char *p = malloc(*len);
  memcpy(p, s, *len);
  return p;
}

/* fuzz_multipart/header_line_overread: the "malformed header line" message
 * quoted up to 40 bytes with %.40s from a body that is not NUL-terminated,
 * reading past its end when the line sat near it. */
static void test_multipart_malformed_header_near_end(void) {
  size_t len;
  char *body = exact("--b\r\n: text/plain\r\n\r\ntwo\r\n--b--", &len);
  kb_multipart mp;
  char err[KB_MULTIPART_ERRLEN];
  int r = kb_multipart_parse(&mp, "multipart/mixed; boundary=b", body, len, 0, err, sizeof err);
  KB_CHECK(r == KB_MULTIPART_ESYNTAX);
  KB_CHECK(mp.nparts == 0);
  KB_CHECK_STR(err, "multipart: part 1: malformed header line \": text/plain\"");
  free(body);

  /* A long malformed line is still quoted only up to 40 bytes. */
  body = exact("--b\r\nthis header line has no colon and goes on and on\r\n\r\nx\r\n--b--", &len);
  r = kb_multipart_parse(&mp, "multipart/mixed; boundary=b", body, len, 0, err, sizeof err);
  KB_CHECK(r == KB_MULTIPART_ESYNTAX);
  KB_CHECK_STR(err, "multipart: part 1: malformed header line "
                    "\"this header line has no colon and goes o\"");
  free(body);
}

/* fuzz_multipart/backslash_name_round_trip: the builder wrote backslashes
 * in names as is, but the parser (like Go's) reads them as quoted-pair
 * escapes, so a name with a backslash lost it in a round trip. */
static void test_multipart_backslash_in_names(void) {
  kb_multipart_field f[] = {
      {.name = "a\\b", .filename = "C:\\dir\\p.yaml", .data = "x", .len = 1},
      {.name = "tail\\", .data = "", .len = 0},
  };
  kb_multipart_body body;
  char err[KB_MULTIPART_ERRLEN];
  KB_CHECK(kb_multipart_build(f, 2, &body, err, sizeof err) == 0);
  KB_CHECK(strstr(body.data, "name=\"a\\\\b\"; filename=\"C:\\\\dir\\\\p.yaml\"") != NULL);
  kb_multipart mp;
  KB_CHECK(kb_multipart_parse(&mp, body.content_type, body.data, body.len, 0, err, sizeof err) == 0);
  KB_CHECK(mp.nparts == 2);
  if (mp.nparts == 2) {
    KB_CHECK_STR(mp.parts[0].name, "a\\b");
    KB_CHECK_STR(mp.parts[0].filename, "C:\\dir\\p.yaml");
    KB_CHECK_STR(mp.parts[1].name, "tail\\");
  }
  kb_multipart_free(&mp);
  kb_multipart_body_free(&body);
}

int main(void) {
  KB_RUN(test_multipart_malformed_header_near_end);
  KB_RUN(test_multipart_backslash_in_names);
  return kb_test_report();
}
