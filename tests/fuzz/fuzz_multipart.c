/* Fuzz target: the multipart/form-data parser and builder
 * (src/codec/multipart.c).
 *
 * Input layout: the Content-Type header value up to the first '\n', then
 * the body. Properties checked besides "no crash, no sanitizer report":
 *  - a failure gives a negative code, a message, and an empty result;
 *  - every part's data lies inside the body; part counts respect the limit;
 *  - a parsed form-data body rebuilt with kb_multipart_build parses back to
 *    the same parts (names, file names, content types and data). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/multipart.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_multipart: %s\n", what);
  abort();
}

static int str_eq(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Names the builder percent-encodes (quotes, CR, LF) do not come back
 * verbatim; compare only the parts whose strings it keeps. */
static int plain(const char *s) { return !s || !strpbrk(s, "\"\r\n%"); }

static void check_rebuild(const kb_multipart *mp) {
  kb_multipart_field *f = calloc(mp->nparts ? mp->nparts : 1, sizeof *f);
  if (!f) return;
  for (size_t i = 0; i < mp->nparts; i++) {
    const kb_multipart_part *p = &mp->parts[i];
    f[i] = (kb_multipart_field){p->name, p->filename, p->content_type, p->data, p->len};
  }
  kb_multipart_body body;
  char err[KB_MULTIPART_ERRLEN];
  if (kb_multipart_build(f, mp->nparts, &body, err, sizeof err) != 0) {
    if (!err[0]) fail("build failed without a message");
    free(f);
    return;
  }
  kb_multipart back;
  if (kb_multipart_parse(&back, body.content_type, body.data, body.len, mp->nparts + 1, err,
                         sizeof err) != 0) {
    fprintf(stderr, "reparse: %s\n", err);
    fail("a built body does not parse");
  }
  if (back.nparts != mp->nparts) fail("part count changed in a round trip");
  for (size_t i = 0; i < back.nparts; i++) {
    const kb_multipart_part *a = &mp->parts[i], *b = &back.parts[i];
    if (a->len != b->len || (a->len && memcmp(a->data, b->data, a->len) != 0))
      fail("part data changed in a round trip");
    if (plain(a->name) && plain(a->filename) && !(str_eq(a->name, b->name) && str_eq(a->filename, b->filename)))
    {
      fprintf(stderr, "name %s -> %s, filename %s -> %s\n", a->name, b->name,
              a->filename ? a->filename : "(none)", b->filename ? b->filename : "(none)");
      fail("part name changed in a round trip");
    }
    if (a->content_type && !strpbrk(a->content_type, "\r\n") && !str_eq(a->content_type, b->content_type))
      fail("part content type changed in a round trip");
  }
  kb_multipart_free(&back);
  kb_multipart_body_free(&body);
  free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *nl = memchr(data, '\n', size);
  if (!nl) return 0;
  size_t ctlen = (size_t)(nl - (const char *)data);
  char *ct = malloc(ctlen + 1);
  memcpy(ct, data, ctlen);
  ct[ctlen] = '\0';
  /* The body in its own allocation, so ASan sees reads past its end. */
  size_t len = size - ctlen - 1;
  char *body = malloc(len ? len : 1);
  memcpy(body, nl + 1, len);

  kb_multipart mp;
  char err[KB_MULTIPART_ERRLEN];
  size_t max_parts = 50;
  int rc = kb_multipart_parse(&mp, ct, body, len, max_parts, err, sizeof err);
  if (rc != 0) {
    if (rc > 0 || rc < KB_MULTIPART_EINVAL || !err[0] || strlen(err) >= sizeof err) fail("bad error report");
    if (mp.nparts != 0) fail("parts left after a failure");
  } else {
    if (mp.nparts > max_parts) fail("more parts than allowed");
    for (size_t i = 0; i < mp.nparts; i++) {
      const kb_multipart_part *p = &mp.parts[i];
      if (p->len && (p->data < body || p->data + p->len > body + len)) fail("part data outside the body");
      if (p->nheaders > KB_MULTIPART_MAX_HEADERS) fail("too many headers accepted");
    }
    if (strncmp(ct, "multipart/form-data", 19) == 0) check_rebuild(&mp);
    kb_multipart_free(&mp);
  }
  kb_multipart_free(&mp); /* documented safe on an empty result */
  free(body);
  free(ct);
  return 0;
}
