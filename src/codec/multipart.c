/* multipart/form-data: a strict parser and a builder (see
 * include/kb/multipart.h). Grammar from RFC 2046 section 5.1.1 and
 * RFC 7578; header and parameter syntax from RFC 9110. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "kb/buf.h"
#include "kb/multipart.h"

#define MAX_BOUNDARY 70 /* RFC 2046 */

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen) {
    int n = snprintf(err, errlen, "multipart: ");
    if (n > 0 && (size_t)n < errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return code;
}

/* ---- lexical helpers ------------------------------------------------------ */

static int is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
    return 1;
  return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* RFC 2046 bchars (a space is allowed except as the last character). */
static int is_bchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
    return 1;
  return c != '\0' && strchr("'()+_,-./:=? ", c) != NULL;
}

static const char *skip_ows(const char *s) {
  while (*s == ' ' || *s == '\t') s++;
  return s;
}

static const char *skip_token(const char *s) {
  while (is_tchar((unsigned char)*s)) s++;
  return s;
}

/* Walks the parameters of a header value, `s` pointing just after the main
 * value: *( OWS ";" OWS token "=" ( token / quoted-string ) ). Copies the
 * first parameter named `want` (case-insensitive), unquoted, into out.
 * Returns 1 if found, 0 if absent, -1 on a syntax error, -2 if the value
 * does not fit in cap bytes (NUL included). */
static int find_param(const char *s, const char *want, char *out, size_t cap) {
  int found = 0;
  size_t wlen = strlen(want);
  for (;;) {
    s = skip_ows(s);
    if (*s == '\0') return found;
    if (*s != ';') return -1;
    s = skip_ows(s + 1);
    if (*s == '\0') return found; /* a trailing ';' is harmless */
    const char *name = s;
    s = skip_token(s);
    size_t nlen = (size_t)(s - name);
    if (nlen == 0 || *s != '=') return -1;
    s++;
    int match = !found && nlen == wlen && strncasecmp(name, want, nlen) == 0;
    size_t o = 0;
    if (*s == '"') {
      for (s++; *s != '"'; s++) {
        if (*s == '\0') return -1;
        if (*s == '\\' && *++s == '\0') return -1;
        if (match) {
          if (o + 1 >= cap) return -2;
          out[o++] = *s;
        }
      }
      s++;
    } else {
      const char *v = s;
      s = skip_token(s);
      if (s == v) return -1;
      if (match) {
        if ((size_t)(s - v) + 1 > cap) return -2;
        memcpy(out, v, (size_t)(s - v));
        o = (size_t)(s - v);
      }
    }
    if (match) {
      out[o] = '\0';
      found = 1;
    }
  }
}

/* ---- the Content-Type header ---------------------------------------------- */

static int parse_content_type(const char *ct, char *boundary, int *is_form, char *err,
                              size_t errlen) {
  if (!ct) return fail(err, errlen, KB_MULTIPART_ETYPE, "no Content-Type given");
  const char *s = skip_ows(ct);
  const char *type = s;
  s = skip_token(s);
  size_t tlen = (size_t)(s - type);
  const char *sub = *s == '/' ? s + 1 : s;
  const char *subend = skip_token(sub);
  if (tlen != 9 || strncasecmp(type, "multipart", 9) != 0 || *s != '/' || subend == sub) {
    return fail(err, errlen, KB_MULTIPART_ETYPE, "Content-Type is not multipart/...: \"%.60s\"",
                ct);
  }
  *is_form = (size_t)(subend - sub) == 9 && strncasecmp(sub, "form-data", 9) == 0;
  int r = find_param(subend, "boundary", boundary, MAX_BOUNDARY + 1);
  if (r == -1)
    return fail(err, errlen, KB_MULTIPART_ETYPE, "malformed Content-Type parameters: \"%.60s\"",
                ct);
  if (r == -2)
    return fail(err, errlen, KB_MULTIPART_ETYPE, "boundary is longer than %d characters",
                MAX_BOUNDARY);
  if (r == 0) return fail(err, errlen, KB_MULTIPART_ETYPE, "Content-Type has no boundary");
  size_t blen = strlen(boundary);
  if (blen == 0) return fail(err, errlen, KB_MULTIPART_ETYPE, "boundary is empty");
  for (size_t i = 0; i < blen; i++) {
    if (!is_bchar((unsigned char)boundary[i]) || (i == blen - 1 && boundary[i] == ' '))
      return fail(err, errlen, KB_MULTIPART_ETYPE, "invalid character in boundary \"%s\"",
                  boundary);
  }
  return 0;
}

/* ---- one part's headers ------------------------------------------------------ */

typedef struct parser {
  const char *body;
  size_t len;
  const char *boundary;
  size_t blen;
  int is_form;
  size_t max_parts;
  char *err;
  size_t errlen;
} parser;

/* Parses the header lines in [hs, he) into part p, copying the strings
 * into one allocation p->mem_. */
static int parse_part_headers(parser *ps, size_t no, size_t hs, size_t he,
                              kb_multipart_part *p) {
  const char *b = ps->body;
  size_t hl = he - hs, nlines = hl ? 1 : 0;
  for (size_t i = hs; i + 1 < he; i++)
    if (b[i] == '\r' && b[i + 1] == '\n') nlines++;
  if (nlines > KB_MULTIPART_MAX_HEADERS)
    return fail(ps->err, ps->errlen, KB_MULTIPART_ELIMIT, "part %zu: more than %d headers", no,
                KB_MULTIPART_MAX_HEADERS);

  /* Names and values fit in hl + 2 NULs per line; the unquoted name and
   * filename parameters are each shorter than the header holding them. */
  size_t strcap = hl + 2 * nlines + 2 * (hl + 1);
  char *mem = malloc(nlines * sizeof(kb_multipart_header) + strcap + 1);
  if (!mem) return fail(ps->err, ps->errlen, KB_MULTIPART_ENOMEM, "out of memory");
  p->mem_ = mem;
  kb_multipart_header *hdrs = (kb_multipart_header *)mem;
  char *str = mem + nlines * sizeof(kb_multipart_header);
  p->headers = hdrs;

  size_t i = hs;
  while (i < he) {
    size_t eol = i;
    while (eol < he && !(b[eol] == '\r' && eol + 1 < he && b[eol + 1] == '\n')) eol++;
    if (b[i] == ' ' || b[i] == '\t')
      return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                  "part %zu: folded header lines are not supported", no);
    size_t n = i;
    while (n < eol && is_tchar((unsigned char)b[n])) n++;
    if (n == i || n == eol || b[n] != ':')
      return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                  "part %zu: malformed header line \"%.*s\"", no,
                  (int)(eol - i < 40 ? eol - i : 40), b + i); /* b has no NUL */
    size_t v = n + 1, ve = eol;
    while (v < ve && (b[v] == ' ' || b[v] == '\t')) v++;
    while (ve > v && (b[ve - 1] == ' ' || b[ve - 1] == '\t')) ve--;
    for (size_t k = v; k < ve; k++) {
      unsigned char c = (unsigned char)b[k];
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                    "part %zu: control character in header \"%.*s\"", no, (int)(n - i), b + i);
    }
    kb_multipart_header *h = &hdrs[p->nheaders++];
    h->name = str;
    memcpy(str, b + i, n - i);
    str += n - i;
    *str++ = '\0';
    h->value = str;
    memcpy(str, b + v, ve - v);
    str += ve - v;
    *str++ = '\0';
    i = eol + 2;
  }

  const char *disp = NULL;
  for (size_t k = 0; k < p->nheaders; k++) {
    if (strcasecmp(hdrs[k].name, "Content-Type") == 0 && !p->content_type)
      p->content_type = hdrs[k].value;
    else if (strcasecmp(hdrs[k].name, "Content-Disposition") == 0 && !disp)
      disp = hdrs[k].value;
  }
  if (!disp) {
    if (!ps->is_form) return 0;
    return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                "part %zu: no Content-Disposition header", no);
  }
  const char *dtype_end = skip_token(disp);
  if (ps->is_form && ((size_t)(dtype_end - disp) != 9 || strncasecmp(disp, "form-data", 9) != 0))
    return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                "part %zu: Content-Disposition is not form-data: \"%.40s\"", no, disp);

  size_t room = hl + 1;
  int r = find_param(dtype_end, "name", str, room);
  if (r == 1) {
    p->name = str;
    str += strlen(str) + 1;
  }
  int r2 = r < 0 ? r : find_param(dtype_end, "filename", str, room);
  if (r2 == 1) p->filename = str;
  if (r < 0 || r2 < 0)
    return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                "part %zu: malformed Content-Disposition \"%.40s\"", no, disp);
  if (ps->is_form && !p->name)
    return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                "part %zu: Content-Disposition has no name", no);
  return 0;
}

/* ---- the body -------------------------------------------------------------------- */

static const char *find(const char *hay, size_t hlen, const char *needle, size_t nlen) {
  return memmem(hay, hlen, needle, nlen);
}

/* pos is at the "--" of a dash-boundary. Returns 1 for the close delimiter,
 * 0 with *next at the first byte of the part, or a negative error. */
static int after_delimiter(parser *ps, size_t no, size_t pos, size_t *next) {
  const char *b = ps->body;
  size_t q = pos + 2 + ps->blen;
  if (q + 2 <= ps->len && b[q] == '-' && b[q + 1] == '-') return 1;
  while (q < ps->len && (b[q] == ' ' || b[q] == '\t')) q++; /* transport padding */
  if (q + 2 <= ps->len && b[q] == '\r' && b[q + 1] == '\n') {
    *next = q + 2;
    return 0;
  }
  if (q >= ps->len)
    return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                "body ends after the delimiter of part %zu (no closing \"--%s--\")", no,
                ps->boundary);
  return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
              "the delimiter before part %zu is not followed by CRLF or \"--\"", no);
}

static int add_part(kb_multipart *mp, size_t *cap, kb_multipart_part **slot) {
  if (mp->nparts == *cap) {
    size_t ncap = *cap ? *cap * 2 : 4;
    kb_multipart_part *np = realloc(mp->parts, ncap * sizeof *np);
    if (!np) return -1;
    mp->parts = np;
    *cap = ncap;
  }
  *slot = &mp->parts[mp->nparts++];
  memset(*slot, 0, sizeof **slot);
  return 0;
}

static int parse_body(parser *ps, kb_multipart *mp) {
  const char *b = ps->body;
  char delim[MAX_BOUNDARY + 5]; /* CRLF "--" boundary */
  size_t dlen = 4 + ps->blen;
  memcpy(delim, "\r\n--", 4);
  memcpy(delim + 4, ps->boundary, ps->blen);

  size_t pos, cap = 0;
  if (ps->len >= dlen - 2 && memcmp(b, delim + 2, dlen - 2) == 0) {
    pos = 0;
  } else {
    const char *d = find(b, ps->len, delim, dlen);
    if (!d)
      return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                  "body does not contain the boundary delimiter \"--%s\"", ps->boundary);
    pos = (size_t)(d - b) + 2;
  }

  for (size_t no = 1;; no++) {
    size_t hs = 0;
    int r = after_delimiter(ps, no, pos, &hs);
    if (r == 1) return 0;
    if (r < 0) return r;
    if (no > ps->max_parts)
      return fail(ps->err, ps->errlen, KB_MULTIPART_ELIMIT, "more than %zu parts",
                  ps->max_parts);

    size_t he, ds;
    if (hs + 2 <= ps->len && b[hs] == '\r' && b[hs + 1] == '\n') {
      he = hs; /* no headers */
      ds = hs + 2;
    } else {
      size_t avail = ps->len - hs, window = KB_MULTIPART_MAX_HEADER_BYTES + 4;
      if (window > avail) window = avail;
      const char *e = find(b + hs, window, "\r\n\r\n", 4);
      /* A delimiter before the blank line: the headers never ended. */
      size_t stop = e ? (size_t)(e - b) : hs + window;
      if (find(b + hs - 2, stop - (hs - 2), delim, dlen) || (!e && window == avail))
        return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                    "part %zu: headers are not terminated by an empty line", no);
      if (!e)
        return fail(ps->err, ps->errlen, KB_MULTIPART_ELIMIT,
                    "part %zu: headers longer than %d bytes", no, KB_MULTIPART_MAX_HEADER_BYTES);
      he = (size_t)(e - b);
      ds = he + 4;
    }

    kb_multipart_part *p;
    if (add_part(mp, &cap, &p))
      return fail(ps->err, ps->errlen, KB_MULTIPART_ENOMEM, "out of memory");
    r = parse_part_headers(ps, no, hs, he, p);
    if (r < 0) return r;

    /* The body-part is optional (RFC 2046: MIME-part-headers [CRLF *OCTET]),
     * so the CRLF that ends the headers may be the delimiter's own. */
    const char *d = find(b + ds - 2, ps->len - (ds - 2), delim, dlen);
    if (!d)
      return fail(ps->err, ps->errlen, KB_MULTIPART_ESYNTAX,
                  "part %zu is not terminated by a boundary delimiter", no);
    size_t dpos = (size_t)(d - b);
    p->data = b + ds;
    p->len = dpos >= ds ? dpos - ds : 0;
    pos = dpos + 2;
  }
}

int kb_multipart_parse(kb_multipart *out, const char *content_type, const char *body,
                       size_t len, size_t max_parts, char *err, size_t errlen) {
  out->parts = NULL;
  out->nparts = 0;
  if (err && errlen) err[0] = '\0';
  char boundary[MAX_BOUNDARY + 1];
  parser ps = {body, len, boundary, 0, 0, max_parts ? max_parts : KB_MULTIPART_DEFAULT_MAX_PARTS,
               err, errlen};
  int r = parse_content_type(content_type, boundary, &ps.is_form, err, errlen);
  if (r < 0) return r;
  ps.blen = strlen(boundary);
  if (!body && len) return fail(err, errlen, KB_MULTIPART_ESYNTAX, "no body");
  r = parse_body(&ps, out);
  if (r < 0) kb_multipart_free(out);
  return r;
}

void kb_multipart_free(kb_multipart *mp) {
  for (size_t i = 0; i < mp->nparts; i++) free(mp->parts[i].mem_);
  free(mp->parts);
  mp->parts = NULL;
  mp->nparts = 0;
}

/* ---- building ---------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Fills out with n random alphanumerics. The kernel's generator first; if
 * it is unavailable, a clock-seeded mix is still unpredictable enough for a
 * delimiter (the caller checks it against the data anyway). */
static void random_alnum(char *out, size_t n) {
  static const char alphabet[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  unsigned char raw[64];
  if (n > sizeof raw) n = sizeof raw;
  if (getrandom(raw, n, GRND_NONBLOCK) != (ssize_t)n) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uintptr_t)out;
    for (size_t i = 0; i < n; i++) raw[i] = (unsigned char)splitmix64(&seed);
  }
  for (size_t i = 0; i < n; i++) out[i] = alphabet[raw[i] % (sizeof alphabet - 1)];
}

/* Appends s as the inside of a quoted-string the way browsers do: '"',
 * CR and LF percent-encoded, everything else as is, except a backslash,
 * which is doubled (a quoted-pair, as Go's mime/multipart writes it):
 * parsers, ours included, read a lone backslash as an escape. */
static int append_quoted(kb_buf *b, const char *s) {
  int r = kb_buf_putc(b, '"');
  for (; *s && !r; s++) {
    if (*s == '"') r = kb_buf_append(b, "%22", 3);
    else if (*s == '\r') r = kb_buf_append(b, "%0D", 3);
    else if (*s == '\n') r = kb_buf_append(b, "%0A", 3);
    else if (*s == '\\') r = kb_buf_append(b, "\\\\", 2);
    else r = kb_buf_putc(b, *s);
  }
  return r ? r : kb_buf_putc(b, '"');
}

static int boundary_is_free(const kb_multipart_field *f, size_t n, const char *bd, size_t blen) {
  for (size_t i = 0; i < n; i++)
    if (f[i].len && memmem(f[i].data, f[i].len, bd, blen)) return 0;
  return 1;
}

int kb_multipart_build(const kb_multipart_field *fields, size_t n, kb_multipart_body *out,
                       char *err, size_t errlen) {
  out->data = NULL;
  out->len = 0;
  out->content_type[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    const kb_multipart_field *f = &fields[i];
    if (!f->name)
      return fail(err, errlen, KB_MULTIPART_EINVAL, "field %zu has no name", i + 1);
    if (!f->data && f->len)
      return fail(err, errlen, KB_MULTIPART_EINVAL, "field \"%s\" has no data", f->name);
    if (f->content_type && strpbrk(f->content_type, "\r\n"))
      return fail(err, errlen, KB_MULTIPART_EINVAL,
                  "field \"%s\": content type contains a line break", f->name);
  }

  enum { PREFIX = 6, RANDOM = 24 };
  char bd[PREFIX + RANDOM + 1] = "kbrun-";
  int tries = 0;
  do {
    if (++tries > 16)
      return fail(err, errlen, KB_MULTIPART_EINVAL, "no boundary absent from the data found");
    random_alnum(bd + PREFIX, RANDOM);
    bd[PREFIX + RANDOM] = '\0';
  } while (!boundary_is_free(fields, n, bd, PREFIX + RANDOM));

  kb_buf b = KB_BUF_INIT;
  int r = 0;
  for (size_t i = 0; i < n && !r; i++) {
    const kb_multipart_field *f = &fields[i];
    r = kb_buf_appendf(&b, "--%s\r\nContent-Disposition: form-data; name=", bd);
    if (!r) r = append_quoted(&b, f->name);
    if (!r && f->filename) {
      r = kb_buf_append(&b, "; filename=", 11);
      if (!r) r = append_quoted(&b, f->filename);
    }
    const char *ct = f->content_type;
    if (!ct && f->filename) ct = "application/octet-stream";
    if (!r && ct) r = kb_buf_appendf(&b, "\r\nContent-Type: %s", ct);
    if (!r) r = kb_buf_append(&b, "\r\n\r\n", 4);
    if (!r) r = kb_buf_append(&b, f->data, f->len);
    if (!r) r = kb_buf_append(&b, "\r\n", 2);
  }
  if (!r) r = kb_buf_appendf(&b, "--%s--\r\n", bd);
  if (r) {
    kb_buf_free(&b);
    return fail(err, errlen, KB_MULTIPART_ENOMEM, "out of memory");
  }
  out->data = kb_buf_detach(&b, &out->len);
  snprintf(out->content_type, sizeof out->content_type, "multipart/form-data; boundary=%s", bd);
  return 0;
}

void kb_multipart_body_free(kb_multipart_body *b) {
  free(b->data);
  b->data = NULL;
  b->len = 0;
}
