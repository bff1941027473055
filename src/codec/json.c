/* A strict RFC 8259 JSON parser (SAX-style) and encoding helpers.
 *
 * The parser is recursive descent over a byte range. Hot loops (whitespace,
 * string bodies, digits) scan with lookup tables and no calls; strings
 * without escapes are handed to the callback in place, so the common case
 * copies nothing. */
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/json.h"

/* ---- character classes ---------------------------------------------------- */

/* JSON whitespace: space, tab, LF, CR. */
static const unsigned char ws_class[256] = {
  ['\t'] = 1, ['\n'] = 1, ['\r'] = 1, [' '] = 1,
};

/* Bytes that end a plain run inside a string: the closing quote, a
 * backslash, control characters (an error) and the lead of a multi-byte
 * UTF-8 sequence (validated separately). Printable ASCII maps to 0. */
static const unsigned char str_stop[256] = {
#define S4(c) [c] = 1, [c + 1] = 1, [c + 2] = 1, [c + 3] = 1
#define S16(c) S4(c), S4(c + 4), S4(c + 8), S4(c + 12)
  S16(0x00), S16(0x10), ['"'] = 1, ['\\'] = 1,
  S16(0x80), S16(0x90), S16(0xa0), S16(0xb0), S16(0xc0), S16(0xd0), S16(0xe0), S16(0xf0),
#undef S16
#undef S4
};

static inline int is_digit(unsigned c) { return c - '0' < 10u; }

/* Does any of the 8 bytes at p stop a plain run (str_stop)? Word at a time:
 * a byte < 0x20, '"', '\\' or >= 0x80. The zero-byte tests can flag a
 * byte above a real hit (borrows), never miss one: a flagged word is
 * rescanned byte by byte. Most of a Kubernetes or KFP object's text is
 * string bytes, and this is where decoding spends its time. */
static inline int stops_in8(const unsigned char *p) {
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  uint64_t x;
  memcpy(&x, p, sizeof x);
  uint64_t quote = x ^ (ones * '"'), bslash = x ^ (ones * '\\');
  uint64_t hits = ((x - ones * 0x20) & ~x) | ((quote - ones) & ~quote) |
                  ((bslash - ones) & ~bslash) | x;
  return (hits & high) != 0;
}

int kb_json_utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0; /* continuation byte or overlong 2-byte lead */
  if (c < 0xE0) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c < 0xF0) {
    if (c == 0xE0) lo = 0xA0;      /* overlong */
    else if (c == 0xED) hi = 0x9F; /* UTF-16 surrogates */
    if (n < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80) return 0;
    return 3;
  }
  if (c < 0xF5) {
    if (c == 0xF0) lo = 0x90;      /* overlong */
    else if (c == 0xF4) hi = 0x8F; /* beyond U+10FFFF */
    if (n < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 ||
        (s[3] & 0xC0) != 0x80)
      return 0;
    return 4;
  }
  return 0;
}

size_t kb_json_utf8_bad(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    int n = kb_json_utf8_seq(p + i, len - i);
    if (!n) return i;
    i += (size_t)n;
  }
  return len;
}

/* ---- parser ----------------------------------------------------------------- */

typedef struct parser {
  const unsigned char *start, *p, *end;
  const kb_json_handler *h;
  void *ud;
  kb_buf *scratch;
  unsigned depth, max_depth;
  int skip; /* on_key asked for its member's value to be passed over */
  kb_json_error *err;
} parser;

#define EMIT0(ps, cb) ((ps)->h->cb && (ps)->h->cb((ps)->ud))
#define EMIT(ps, cb, ...) ((ps)->h->cb && (ps)->h->cb((ps)->ud, __VA_ARGS__))

static int fail(parser *ps, const unsigned char *at, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(parser *ps, const unsigned char *at, int code, const char *fmt, ...) {
  kb_json_error *err = ps->err;
  if (!err) return code;
  err->code = code;
  err->offset = (size_t)(at - ps->start);
  /* Positions are only needed here, so count lines now rather than while
   * parsing. */
  size_t line = 1;
  const unsigned char *bol = ps->start;
  for (const unsigned char *q = ps->start; q < at; q++) {
    if (*q == '\n') {
      line++;
      bol = q + 1;
    }
  }
  err->line = line;
  err->column = (size_t)(at - bol) + 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return code;
}

/* Describes the byte at `at` for a message: "character 'x'", "byte 0x01" or
 * "end of input". */
static const char *describe(const parser *ps, const unsigned char *at, char buf[24]) {
  if (at >= ps->end) return "end of input";
  if (*at > 0x20 && *at < 0x7f)
    snprintf(buf, 24, "character '%c'", *at);
  else
    snprintf(buf, 24, "byte 0x%02x", *at);
  return buf;
}

static int aborted(parser *ps) {
  return fail(ps, ps->p, KB_JSON_EABORT, "stopped by the handler");
}

static inline void skip_ws(parser *ps) {
  const unsigned char *p = ps->p, *end = ps->end;
  while (p < end && ws_class[*p]) p++;
  ps->p = p;
}

static int parse_value(parser *ps);

static int hex4(const unsigned char *s, const unsigned char *end, unsigned *out) {
  if (end - s < 4) return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = s[i], d;
    if (is_digit(c)) d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
    else return -1;
    v = v << 4 | d;
  }
  *out = v;
  return 0;
}

static int put_utf8(kb_buf *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | cp >> 6);
    u[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12);
    u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18);
    u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return kb_buf_append(b, u, n);
}

/* Decodes the escape at *pp (a backslash) into b and advances *pp past it. */
static int unescape(parser *ps, const unsigned char **pp, kb_buf *b) {
  const unsigned char *bs = *pp, *q = bs + 1, *end = ps->end;
  char c;
  if (q >= end) return fail(ps, bs, KB_JSON_ESYNTAX, "unterminated escape sequence");
  switch (*q) {
  case '"': c = '"'; break;
  case '\\': c = '\\'; break;
  case '/': c = '/'; break;
  case 'b': c = '\b'; break;
  case 'f': c = '\f'; break;
  case 'n': c = '\n'; break;
  case 'r': c = '\r'; break;
  case 't': c = '\t'; break;
  case 'u': {
    unsigned cp, lo;
    if (hex4(q + 1, end, &cp))
      return fail(ps, bs, KB_JSON_ESYNTAX, "invalid \\u escape: expected 4 hex digits");
    q += 5;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
      return fail(ps, bs, KB_JSON_EUTF8, "unpaired surrogate \\u%04X in string", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (end - q < 2 || q[0] != '\\' || q[1] != 'u')
        return fail(ps, bs, KB_JSON_EUTF8, "unpaired surrogate \\u%04X in string", cp);
      if (hex4(q + 2, end, &lo))
        return fail(ps, q, KB_JSON_ESYNTAX, "invalid \\u escape: expected 4 hex digits");
      if (lo < 0xDC00 || lo > 0xDFFF)
        return fail(ps, bs, KB_JSON_EUTF8, "unpaired surrogate \\u%04X in string", cp);
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      q += 6;
    }
    if (put_utf8(b, cp)) return fail(ps, bs, KB_JSON_ENOMEM, "out of memory");
    *pp = q;
    return 0;
  }
  default: {
    char what[24];
    if (*q > 0x20 && *q < 0x7f)
      snprintf(what, sizeof what, "'\\%c'", *q);
    else
      snprintf(what, sizeof what, "'\\' + byte 0x%02x", *q);
    return fail(ps, bs, KB_JSON_ESYNTAX, "invalid escape %s in string", what);
  }
  }
  if (kb_buf_putc(b, c)) return fail(ps, bs, KB_JSON_ENOMEM, "out of memory");
  *pp = q + 1;
  return 0;
}

static int parse_string(parser *ps, int is_key) {
  const unsigned char *open = ps->p, *p = open + 1, *end = ps->end, *run = p;
  kb_buf *sb = NULL; /* set once an escape forces a copy */
  for (;;) {
    while (end - p >= 8 && !stops_in8(p)) p += 8;
    while (p < end && !str_stop[*p]) p++;
    if (p >= end) return fail(ps, open, KB_JSON_ESYNTAX, "unterminated string");
    unsigned c = *p;
    if (c == '"') break;
    if (c >= 0x80) {
      int n = kb_json_utf8_seq(p, (size_t)(end - p));
      if (!n) return fail(ps, p, KB_JSON_EUTF8, "invalid UTF-8 byte 0x%02x in string", c);
      p += n;
      continue;
    }
    if (c != '\\')
      return fail(ps, p, KB_JSON_ESYNTAX, "unescaped control character 0x%02x in string", c);
    if (!sb) {
      sb = ps->scratch;
      kb_buf_clear(sb);
    }
    if (kb_buf_append(sb, run, (size_t)(p - run)))
      return fail(ps, p, KB_JSON_ENOMEM, "out of memory");
    int rc = unescape(ps, &p, sb);
    if (rc) return rc;
    run = p;
  }
  const char *s = (const char *)run;
  size_t len = (size_t)(p - run);
  if (sb) {
    if (kb_buf_append(sb, run, len)) return fail(ps, p, KB_JSON_ENOMEM, "out of memory");
    s = sb->data;
    len = sb->len;
  }
  ps->p = p + 1;
  if (is_key) {
    int rc = ps->h->on_key ? ps->h->on_key(ps->ud, s, len) : 0;
    if (rc == KB_JSON_SKIP_MEMBER) ps->skip = 1;
    else if (rc) return aborted(ps);
  } else if (EMIT(ps, on_string, s, len)) {
    return aborted(ps);
  }
  return 0;
}

static int parse_number(parser *ps) {
  const unsigned char *s = ps->p, *p = s, *end = ps->end;
  kb_json_numkind kind = KB_JSON_INTEGER;
  char what[24];
  if (*p == '-') p++;
  if (p >= end || !is_digit(*p))
    return fail(ps, p, KB_JSON_ESYNTAX, "unexpected %s, expected a digit after '-'",
                describe(ps, p, what));
  if (*p == '0') {
    p++;
    if (p < end && is_digit(*p))
      return fail(ps, s, KB_JSON_ESYNTAX, "leading zeros are not allowed in numbers");
  } else {
    while (p < end && is_digit(*p)) p++;
  }
  if (p < end && *p == '.') {
    p++;
    if (p >= end || !is_digit(*p))
      return fail(ps, p, KB_JSON_ESYNTAX,
                  "unexpected %s, expected a digit after the decimal point",
                  describe(ps, p, what));
    while (p < end && is_digit(*p)) p++;
    kind = KB_JSON_FLOAT;
  }
  if (p < end && (*p | 0x20) == 'e') {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || !is_digit(*p))
      return fail(ps, p, KB_JSON_ESYNTAX, "unexpected %s, expected a digit in the exponent",
                  describe(ps, p, what));
    while (p < end && is_digit(*p)) p++;
    kind = KB_JSON_FLOAT;
  }
  ps->p = p;
  if (EMIT(ps, on_number, (const char *)s, (size_t)(p - s), kind)) return aborted(ps);
  return 0;
}

static int parse_literal(parser *ps, const char *word, size_t n) {
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
    return fail(ps, ps->p, KB_JSON_ESYNTAX, "invalid literal, expected '%s'", word);
  ps->p += n;
  int stop;
  if (word[0] == 'n') stop = EMIT0(ps, on_null);
  else stop = EMIT(ps, on_bool, word[0] == 't');
  return stop ? aborted(ps) : 0;
}

static int enter(parser *ps) {
  if (++ps->depth > ps->max_depth)
    return fail(ps, ps->p, KB_JSON_EDEPTH, "nesting deeper than %u levels", ps->max_depth);
  return 0;
}

static int parse_array(parser *ps) {
  char what[24];
  int rc = enter(ps);
  if (rc) return rc;
  if (EMIT0(ps, on_begin_array)) return aborted(ps);
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == ']') {
    ps->p++;
  } else {
    for (;;) {
      if ((rc = parse_value(ps))) return rc;
      skip_ws(ps);
      if (ps->p < ps->end && *ps->p == ',') {
        const unsigned char *comma = ps->p++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ']')
          return fail(ps, comma, KB_JSON_ESYNTAX, "trailing comma before ']'");
        continue;
      }
      if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        break;
      }
      return fail(ps, ps->p, KB_JSON_ESYNTAX, "unexpected %s, expected ',' or ']'",
                  describe(ps, ps->p, what));
    }
  }
  ps->depth--;
  return EMIT0(ps, on_end_array) ? aborted(ps) : 0;
}

/* Parses the value at ps->p in full, without events (KB_JSON_SKIP_MEMBER):
 * checked as any other, at the cost of the scan alone. */
static int skip_value(parser *ps) {
  static const kb_json_handler silent = {0};
  const kb_json_handler *h = ps->h;
  ps->h = &silent;
  int rc = parse_value(ps);
  ps->h = h;
  return rc;
}

static int parse_object(parser *ps) {
  char what[24];
  const unsigned char *comma = NULL;
  int rc = enter(ps);
  if (rc) return rc;
  if (EMIT0(ps, on_begin_object)) return aborted(ps);
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == '}') {
    ps->p++;
  } else {
    for (;;) {
      if (ps->p >= ps->end || *ps->p != '"') {
        if (comma && ps->p < ps->end && *ps->p == '}')
          return fail(ps, comma, KB_JSON_ESYNTAX, "trailing comma before '}'");
        return fail(ps, ps->p, KB_JSON_ESYNTAX, "unexpected %s, expected a string key",
                    describe(ps, ps->p, what));
      }
      ps->skip = 0;
      if ((rc = parse_string(ps, 1))) return rc;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':')
        return fail(ps, ps->p, KB_JSON_ESYNTAX, "unexpected %s, expected ':' after object key",
                    describe(ps, ps->p, what));
      ps->p++;
      skip_ws(ps);
      if ((rc = ps->skip ? skip_value(ps) : parse_value(ps))) return rc;
      skip_ws(ps);
      if (ps->p < ps->end && *ps->p == ',') {
        comma = ps->p++;
        skip_ws(ps);
        continue;
      }
      if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        break;
      }
      return fail(ps, ps->p, KB_JSON_ESYNTAX, "unexpected %s, expected ',' or '}'",
                  describe(ps, ps->p, what));
    }
  }
  ps->depth--;
  return EMIT0(ps, on_end_object) ? aborted(ps) : 0;
}

/* Parses the value at ps->p (whitespace already skipped). */
static int parse_value(parser *ps) {
  char what[24];
  if (ps->p >= ps->end)
    return fail(ps, ps->p, KB_JSON_ESYNTAX, "unexpected end of input");
  switch (*ps->p) {
  case '{': return parse_object(ps);
  case '[': return parse_array(ps);
  case '"': return parse_string(ps, 0);
  case 't': return parse_literal(ps, "true", 4);
  case 'f': return parse_literal(ps, "false", 5);
  case 'n': return parse_literal(ps, "null", 4);
  case '-': case '0': case '1': case '2': case '3': case '4':
  case '5': case '6': case '7': case '8': case '9':
    return parse_number(ps);
  default:
    return fail(ps, ps->p, KB_JSON_ESYNTAX, "unexpected %s", describe(ps, ps->p, what));
  }
}

int kb_json_parse(const char *text, size_t len, const kb_json_handler *h, void *ud,
                  kb_json_error *err) {
  kb_buf own = KB_BUF_INIT;
  parser ps = {
    .start = (const unsigned char *)text,
    .p = (const unsigned char *)text,
    .end = (const unsigned char *)text + len,
    .h = h,
    .ud = ud,
    .scratch = h->scratch ? h->scratch : &own,
    .max_depth = h->max_depth ? h->max_depth : KB_JSON_DEFAULT_DEPTH,
    .err = err,
  };
  if (err) {
    err->code = 0;
    err->offset = err->line = err->column = 0;
    err->message[0] = '\0';
  }
  int rc;
  skip_ws(&ps);
  if (ps.p >= ps.end) {
    rc = fail(&ps, ps.p, KB_JSON_ESYNTAX, "empty document");
  } else if (!(rc = parse_value(&ps))) {
    skip_ws(&ps);
    if (ps.p < ps.end) {
      char what[24];
      rc = fail(&ps, ps.p, KB_JSON_ESYNTAX, "unexpected %s after the JSON value",
                describe(&ps, ps.p, what));
    }
  }
  kb_buf_free(&own);
  return rc;
}

/* ---- numbers ---------------------------------------------------------------- */

int kb_json_number_int64(const char *text, size_t len, int64_t *out) {
  const char *p = text, *e = text + len;
  int neg = 0;
  if (p < e && *p == '-') {
    neg = 1;
    p++;
  }
  if (p == e) return -1;
  uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, acc = 0;
  for (; p < e; p++) {
    unsigned d = (unsigned char)*p - '0';
    if (d > 9) return -1;
    if (acc > (limit - d) / 10) return -1;
    acc = acc * 10 + d;
  }
  if (!neg) *out = (int64_t)acc;
  else if (acc == (uint64_t)INT64_MAX + 1) *out = INT64_MIN;
  else *out = -(int64_t)acc;
  return 0;
}

/* strtod follows LC_NUMERIC; JSON always uses '.'. Like Lua, retry with the
 * locale's decimal point when the first attempt stops short. */
static double strtod_c(char *s, size_t len) {
  char *endp;
  double d = strtod(s, &endp);
  if ((size_t)(endp - s) == len) return d;
  char *dot = strchr(s, '.');
  if (dot) {
    *dot = localeconv()->decimal_point[0];
    d = strtod(s, &endp);
  }
  return d;
}

double kb_json_number_double(const char *text, size_t len) {
  char small[64];
  char *s = len < sizeof small ? small : malloc(len + 1);
  if (!s) return NAN; /* only for an absurdly long literal without memory */
  memcpy(s, text, len);
  s[len] = '\0';
  double d = strtod_c(s, len);
  if (s != small) free(s);
  return d;
}

size_t kb_json_format_int64(char out[KB_JSON_NUMBUF], int64_t v) {
  char tmp[24];
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  size_t n = 0, i = 0;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) out[i++] = '-';
  while (n) out[i++] = tmp[--n];
  out[i] = '\0';
  return i;
}

/* The last few non-integral doubles formatted on this thread and their
 * text. A storm writes each call's start and latency twice, in its
 * latencies.csv row and in its journal line, and the shortest form costs
 * up to three printf and two strtod calls. Thread-local: the embedded
 * simulator formats on its own thread. */
#define FORMAT_CACHE 4
static _Thread_local struct {
  uint64_t bits[FORMAT_CACHE];
  unsigned char len[FORMAT_CACHE]; /* 0: empty */
  char text[FORMAT_CACHE][KB_JSON_NUMBUF];
  unsigned next;
} format_cache;

static size_t format_shortest(char out[KB_JSON_NUMBUF], double d) {
  int n = 0;
  for (int prec = 15; prec <= 17; prec++) {
    n = snprintf(out, KB_JSON_NUMBUF, "%.*g", prec, d);
    /* A locale with a decimal comma: JSON needs '.'. */
    for (int i = 0; i < n; i++)
      if (out[i] != '-' && out[i] != '+' && out[i] != 'e' && !is_digit((unsigned char)out[i]))
        out[i] = '.';
    if (prec == 17 || kb_json_number_double(out, (size_t)n) == d) break;
  }
  return (size_t)n;
}

size_t kb_json_format_double(char out[KB_JSON_NUMBUF], double d) {
  if (!isfinite(d)) return 0;
  /* Integral values print like integers: cheaper, and what APIs that expect
   * an integer field (Kubernetes replicas, ...) accept. */
  if (d == floor(d) && fabs(d) < 1e15) {
    if (d == 0 && signbit(d)) {
      memcpy(out, "-0", 3);
      return 2;
    }
    return kb_json_format_int64(out, (int64_t)d);
  }
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  for (unsigned i = 0; i < FORMAT_CACHE; i++)
    if (format_cache.len[i] && format_cache.bits[i] == bits) {
      memcpy(out, format_cache.text[i], (size_t)format_cache.len[i] + 1);
      return format_cache.len[i];
    }
  size_t n = format_shortest(out, d);
  unsigned slot = format_cache.next++ % FORMAT_CACHE;
  format_cache.bits[slot] = bits;
  format_cache.len[slot] = (unsigned char)n;
  memcpy(format_cache.text[slot], out, n + 1);
  return n;
}

/* ---- strings ---------------------------------------------------------------- */

/* 0: copy as is; 1: start of a UTF-8 sequence to validate; 'u': \u00XX;
 * any other: the letter after the backslash. */
static const unsigned char esc_class[256] = {
#define U4(c) [c] = 'u', [c + 1] = 'u', [c + 2] = 'u', [c + 3] = 'u'
  U4(0x00), U4(0x04), ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', [0x0b] = 'u',
  ['\f'] = 'f', ['\r'] = 'r', [0x0e] = 'u', [0x0f] = 'u',
  U4(0x10), U4(0x14), U4(0x18), U4(0x1c),
#undef U4
  ['"'] = '"', ['\\'] = '\\',
#define H4(c) [c] = 1, [c + 1] = 1, [c + 2] = 1, [c + 3] = 1
#define H16(c) H4(c), H4(c + 4), H4(c + 8), H4(c + 12)
  H16(0x80), H16(0x90), H16(0xa0), H16(0xb0), H16(0xc0), H16(0xd0), H16(0xe0), H16(0xf0),
#undef H16
#undef H4
};

int kb_json_write_string(kb_buf *b, const char *s, size_t len, size_t *bad) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s, *e = p + len, *run = p;
  /* One reservation covers strings that need no escaping. */
  if (kb_buf_reserve(b, len + 2)) return KB_JSON_ENOMEM;
  b->data[b->len++] = '"';
  while (p < e) {
    while (p < e && !esc_class[*p]) p++;
    if (p >= e) break;
    unsigned x = esc_class[*p];
    if (x == 1) {
      int n = kb_json_utf8_seq(p, (size_t)(e - p));
      if (!n) {
        if (bad) *bad = (size_t)(p - (const unsigned char *)s);
        kb_buf_append(b, run, (size_t)(p - run)); /* keeps the NUL invariant */
        return KB_JSON_EUTF8;
      }
      p += n;
      continue;
    }
    char esc[6] = {'\\', (char)x};
    size_t n = 2;
    if (x == 'u') {
      memcpy(esc + 1, "u00", 3);
      esc[4] = hex[*p >> 4];
      esc[5] = hex[*p & 15];
      n = 6;
    }
    if (kb_buf_append(b, run, (size_t)(p - run)) || kb_buf_append(b, esc, n))
      return KB_JSON_ENOMEM;
    run = ++p;
  }
  if (kb_buf_append(b, run, (size_t)(p - run)) || kb_buf_putc(b, '"')) return KB_JSON_ENOMEM;
  return 0;
}
