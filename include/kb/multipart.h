/* multipart/form-data bodies (RFC 7578 on RFC 2046): a strict, bounded
 * parser for servers and a builder for clients. No Lua, no libuv.
 *
 *   kb_multipart mp;
 *   char err[KB_MULTIPART_ERRLEN];
 *   if (kb_multipart_parse(&mp, content_type, body, len, 0, err, sizeof err))
 *     reply_400(err);                 // "multipart: part 2: ..."
 *   for (size_t i = 0; i < mp.nparts; i++) use(mp.parts[i].name, ...);
 *   kb_multipart_free(&mp);
 *
 * Part data is not copied: it points into the body given to the parser, so
 * the body must outlive the result. Names, file names and header strings are
 * copies owned by the result. */
#ifndef KB_MULTIPART_H
#define KB_MULTIPART_H

#include <stddef.h>

/* Parts accepted by default when the caller passes max_parts = 0. */
#define KB_MULTIPART_DEFAULT_MAX_PARTS 1000
/* Bytes of header lines one part may carry. */
#define KB_MULTIPART_MAX_HEADER_BYTES (16 * 1024)
/* Header lines one part may carry. */
#define KB_MULTIPART_MAX_HEADERS 64
/* A buffer of this size holds any error message of this module. */
#define KB_MULTIPART_ERRLEN 160

/* Error codes (negative). */
enum {
  KB_MULTIPART_OK = 0,
  KB_MULTIPART_ENOMEM = -1,
  KB_MULTIPART_ETYPE = -2,   /* not multipart/..., or no valid boundary */
  KB_MULTIPART_ESYNTAX = -3, /* delimiters, part headers, dispositions */
  KB_MULTIPART_ELIMIT = -4,  /* too many parts, headers or header bytes */
  KB_MULTIPART_EINVAL = -5   /* builder: a field it cannot encode */
};

typedef struct kb_multipart_header {
  const char *name;  /* as sent */
  const char *value; /* surrounding blanks removed */
} kb_multipart_header;

typedef struct kb_multipart_part {
  const char *name;         /* Content-Disposition name, or NULL */
  const char *filename;     /* Content-Disposition filename, or NULL */
  const char *content_type; /* Content-Type header, or NULL */
  const kb_multipart_header *headers;
  size_t nheaders;
  const char *data;         /* into the parsed body; may hold NULs and CRLFs */
  size_t len;
  void *mem_;               /* private: the strings above */
} kb_multipart_part;

typedef struct kb_multipart {
  kb_multipart_part *parts;
  size_t nparts;
} kb_multipart;

/* Parses `body` as described by the Content-Type header value
 * `content_type` ("multipart/form-data; boundary=..." with the boundary
 * quoted or not). Any multipart/ subtype is accepted; for form-data every
 * part must carry Content-Disposition: form-data with a name. At most
 * max_parts parts (0: KB_MULTIPART_DEFAULT_MAX_PARTS). Returns 0 and fills
 * *out, or a negative code with a message in err (which may be NULL) and
 * *out empty. A text outside the first and after the last delimiter
 * (preamble, epilogue) is ignored, as RFC 2046 says. */
int kb_multipart_parse(kb_multipart *out, const char *content_type, const char *body,
                       size_t len, size_t max_parts, char *err, size_t errlen);

/* Releases what a successful parse allocated; safe on an empty result. */
void kb_multipart_free(kb_multipart *mp);

/* ---- building ---------------------------------------------------------- */

typedef struct kb_multipart_field {
  const char *name;         /* required */
  const char *filename;     /* NULL for a plain form field */
  const char *content_type; /* NULL: none for a field, application/octet-stream
                               for a file */
  const char *data;
  size_t len;
} kb_multipart_field;

typedef struct kb_multipart_body {
  char *data;               /* malloc'd; release with kb_multipart_body_free */
  size_t len;
  char content_type[96];    /* "multipart/form-data; boundary=..." */
} kb_multipart_body;

/* Encodes n fields as a multipart/form-data body with a random boundary
 * that occurs in none of the data. Quotes, CR and LF in names and file
 * names are percent-encoded as browsers do. Returns 0, or a negative code
 * with a message in err (which may be NULL). */
int kb_multipart_build(const kb_multipart_field *fields, size_t n, kb_multipart_body *out,
                       char *err, size_t errlen);

void kb_multipart_body_free(kb_multipart_body *b);

#endif
