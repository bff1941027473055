/* Unit tests of the JSON codec (src/codec/json.c) and kb_buf. */
#include <float.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "kb/buf.h"
#include "kb/json.h"
#include "kbtest.h"

/* ---- an echo handler: re-emits the events as compact JSON --------------- */

typedef struct echo {
  kb_buf out;
  unsigned char first[1100]; /* per depth: no element written yet */
  unsigned depth;
  int after_key;
  int abort_on_key; /* stop when a key equals "stop" */
} echo;

static int echo_sep(echo *e) {
  if (e->after_key) {
    e->after_key = 0;
    return 0;
  }
  if (e->depth > 0) {
    if (!e->first[e->depth]) kb_buf_putc(&e->out, ',');
    e->first[e->depth] = 0;
  }
  return 0;
}

static int echo_null(void *ud) {
  echo *e = ud;
  echo_sep(e);
  return kb_buf_append(&e->out, "null", 4);
}

static int echo_bool(void *ud, int v) {
  echo *e = ud;
  echo_sep(e);
  return v ? kb_buf_append(&e->out, "true", 4) : kb_buf_append(&e->out, "false", 5);
}

static int echo_number(void *ud, const char *s, size_t n, kb_json_numkind kind) {
  echo *e = ud;
  echo_sep(e);
  return kb_buf_append(&e->out, s, n);
}

static int echo_string(void *ud, const char *s, size_t n) {
  echo *e = ud;
  echo_sep(e);
  return kb_json_write_string(&e->out, s, n, NULL);
}

static int echo_key(void *ud, const char *s, size_t n) {
  echo *e = ud;
  if (e->abort_on_key && n == 4 && memcmp(s, "stop", 4) == 0) return 1;
  echo_sep(e);
  e->after_key = 1;
  return kb_json_write_string(&e->out, s, n, NULL) || kb_buf_putc(&e->out, ':');
}

static int echo_open(echo *e, char c) {
  echo_sep(e);
  e->first[++e->depth] = 1;
  return kb_buf_putc(&e->out, c);
}

static int echo_close(echo *e, char c) {
  e->depth--;
  return kb_buf_putc(&e->out, c);
}

static int echo_bo(void *ud) { return echo_open(ud, '{'); }
static int echo_eo(void *ud) { return echo_close(ud, '}'); }
static int echo_ba(void *ud) { return echo_open(ud, '['); }
static int echo_ea(void *ud) { return echo_close(ud, ']'); }

static const kb_json_handler echo_handler = {
  echo_null, echo_bool, echo_number, echo_string, echo_bo, echo_key, echo_eo, echo_ba,
  echo_ea, 0, NULL,
};

/* Parses text and returns the echo (static buffer), or NULL on error. */
static const char *reecho(const char *text, size_t len, kb_json_error *err) {
  static char result[4096];
  echo e;
  memset(&e, 0, sizeof e);
  int rc = kb_json_parse(text, len, &echo_handler, &e, err);
  const char *ret = NULL;
  if (rc == 0 && e.out.len < sizeof result) {
    memcpy(result, e.out.data, e.out.len + 1);
    ret = result;
  }
  kb_buf_free(&e.out);
  return ret;
}

/* ---- kb_buf ----------------------------------------------------------------- */

static void test_buf(void) {
  kb_buf b = KB_BUF_INIT;
  KB_CHECK(b.len == 0 && b.data == NULL);
  for (int i = 0; i < 10000; i++) KB_CHECK(kb_buf_append(&b, "abc", 3) == 0);
  KB_CHECK(b.len == 30000);
  KB_CHECK(b.cap > b.len && b.cap <= 2 * (b.len + 1) + 64);
  KB_CHECK(b.data[b.len] == '\0');
  KB_CHECK(memcmp(b.data + 29997, "abc", 3) == 0);
  kb_buf_clear(&b);
  KB_CHECK(b.len == 0 && b.data[0] == '\0');
  KB_CHECK(kb_buf_appendf(&b, "%d-%s", 42, "x") == 0);
  KB_CHECK_STR(b.data, "42-x");
  /* Longer than the spare capacity: formatted twice. */
  char big[300];
  memset(big, 'z', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  kb_buf_free(&b);
  KB_CHECK(kb_buf_appendf(&b, "<%s>", big) == 0);
  KB_CHECK(b.len == 301 && b.data[0] == '<' && b.data[300] == '>' && b.data[301] == '\0');
  KB_CHECK(kb_buf_putc(&b, '!') == 0 && b.len == 302);
  KB_CHECK(kb_buf_reserve(&b, 10) == 0);
  memcpy(b.data + b.len, "0123456789", 10);
  kb_buf_commit(&b, 10);
  KB_CHECK(b.len == 312 && strcmp(b.data + 302, "0123456789") == 0);
  KB_CHECK(kb_buf_reserve(&b, SIZE_MAX) == -1); /* overflow refused, buffer intact */
  KB_CHECK(b.len == 312);
  size_t n = 0;
  char *p = kb_buf_detach(&b, &n);
  KB_CHECK(p && n == 312 && b.data == NULL && b.len == 0 && b.cap == 0);
  free(p);
  KB_CHECK(kb_buf_detach(&b, &n) == NULL && n == 0);
  kb_buf_free(&b);
}

/* ---- parsing ---------------------------------------------------------------- */

static void test_roundtrip(void) {
  static const struct {
    const char *in, *out;
  } cases[] = {
    {"null", "null"},
    {" true ", "true"},
    {"\t\r\nfalse\n", "false"},
    {"0", "0"},
    {"-0", "-0"},
    {"-12.5e-3", "-12.5e-3"},
    {"1E+2", "1E+2"},
    {"\"\"", "\"\""},
    {"[]", "[]"},
    {"{}", "{}"},
    {"[ ]", "[]"},
    {"{ }", "{}"},
    {"[[[]],{}]", "[[[]],{}]"},
    {"{ \"a\" : [1, 2.5, -3e2, true, false, null, \"x\"] , \"b\":{\"c\":{}}}",
     "{\"a\":[1,2.5,-3e2,true,false,null,\"x\"],\"b\":{\"c\":{}}}"},
    {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\\"\\\\/\\b\\f\\n\\r\\t\""},
    {"\"caf\\u00e9 \xe2\x82\xac \\u20AC\"", "\"caf\xc3\xa9 \xe2\x82\xac \xe2\x82\xac\""},
    {"\"\\u001f\\u007f\"", "\"\\u001f\x7f\""},
    {"{\"k\\n\":\"v\"}", "{\"k\\n\":\"v\"}"},
    {"[\"a\\tb\",\"plain\",\"c\\u0041d\"]", "[\"a\\tb\",\"plain\",\"cAd\"]"},
    {"{\"a\":1,\"a\":2}", "{\"a\":1,\"a\":2}"}, /* duplicates are reported as is */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kb_json_error err;
    const char *got = reecho(cases[i].in, strlen(cases[i].in), &err);
    if (!got) fprintf(stderr, "case %zu: %s at %zu\n", i, err.message, err.offset);
    KB_CHECK_STR(got, cases[i].out);
    KB_CHECK(err.code == 0);
  }
}

/* Captures the single string a document holds. */
typedef struct capture {
  char s[64];
  size_t len;
  int calls;
  kb_json_numkind kind;
} capture;

static int cap_string(void *ud, const char *s, size_t n) {
  capture *c = ud;
  c->len = n < sizeof c->s ? n : sizeof c->s;
  memcpy(c->s, s, c->len);
  c->calls++;
  return 0;
}

static int cap_number(void *ud, const char *s, size_t n, kb_json_numkind kind) {
  capture *c = ud;
  cap_string(ud, s, n);
  c->kind = kind;
  return 0;
}

static int parse_capture(const char *text, capture *c, kb_buf *scratch) {
  kb_json_handler h = {0};
  h.on_string = cap_string;
  h.on_key = cap_string;
  h.on_number = cap_number;
  h.scratch = scratch;
  memset(c, 0, sizeof *c);
  return kb_json_parse(text, strlen(text), &h, c, NULL);
}

static void test_unicode(void) {
  capture c;
  kb_buf scratch = KB_BUF_INIT;
  for (int own = 0; own < 2; own++) {
    kb_buf *sb = own ? &scratch : NULL;
    KB_CHECK(parse_capture("\"\\u00e9\"", &c, sb) == 0);
    KB_CHECK(c.len == 2 && memcmp(c.s, "\xc3\xa9", 2) == 0);
    KB_CHECK(parse_capture("\"\\u00E9\"", &c, sb) == 0);
    KB_CHECK(c.len == 2 && memcmp(c.s, "\xc3\xa9", 2) == 0);
    KB_CHECK(parse_capture("\"\\u0041\\u07ff\\uffff\"", &c, sb) == 0);
    KB_CHECK(c.len == 6 && memcmp(c.s, "A\xdf\xbf\xef\xbf\xbf", 6) == 0);
    /* A surrogate pair is one code point: U+1F600. */
    KB_CHECK(parse_capture("\"x\\ud83d\\ude00y\"", &c, sb) == 0);
    KB_CHECK(c.len == 6 && memcmp(c.s, "x\xf0\x9f\x98\x80y", 6) == 0);
    /* The highest code point, U+10FFFF. */
    KB_CHECK(parse_capture("\"\\uDBFF\\uDFFF\"", &c, sb) == 0);
    KB_CHECK(c.len == 4 && memcmp(c.s, "\xf4\x8f\xbf\xbf", 4) == 0);
    /* \u0000 is a legal NUL byte inside the string. */
    KB_CHECK(parse_capture("\"a\\u0000b\"", &c, sb) == 0);
    KB_CHECK(c.len == 3 && memcmp(c.s, "a\0b", 3) == 0);
    /* Raw UTF-8 passes through unchanged (no copy). */
    KB_CHECK(parse_capture("\"\xf0\x9f\x98\x80\xe2\x82\xac\xc3\xa9\"", &c, sb) == 0);
    KB_CHECK(c.len == 9 && memcmp(c.s, "\xf0\x9f\x98\x80\xe2\x82\xac\xc3\xa9", 9) == 0);
    /* Keys are decoded the same way. */
    KB_CHECK(parse_capture("{\"\\u00e9\":1}", &c, sb) == 0);
    KB_CHECK(c.calls == 2);
  }
  KB_CHECK(scratch.data != NULL); /* the caller's buffer was used */
  kb_buf_free(&scratch);
}

static void test_utf8_seq(void) {
  static const struct {
    const char *s;
    int len;
  } cases[] = {
    {"A", 1}, {"\x7f", 1}, {"\xc2\x80", 2}, {"\xdf\xbf", 2},
    {"\xe0\xa0\x80", 3}, {"\xed\x9f\xbf", 3}, {"\xee\x80\x80", 3},
    {"\xf0\x90\x80\x80", 4}, {"\xf4\x8f\xbf\xbf", 4},
    {"\x80", 0},             /* lone continuation */
    {"\xc0\x80", 0},         /* overlong NUL */
    {"\xc1\xbf", 0},         /* overlong */
    {"\xe0\x9f\xbf", 0},     /* overlong 3-byte */
    {"\xed\xa0\x80", 0},     /* surrogate D800 */
    {"\xf0\x8f\xbf\xbf", 0}, /* overlong 4-byte */
    {"\xf4\x90\x80\x80", 0}, /* U+110000 */
    {"\xf5\x80\x80\x80", 0},
    {"\xff", 0},
    {"\xc3", 0},             /* truncated */
    {"\xe2\x82", 0},         /* truncated */
    {"\xc3\x41", 0},         /* bad continuation */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const unsigned char *s = (const unsigned char *)cases[i].s;
    int got = kb_json_utf8_seq(s, strlen(cases[i].s));
    if (got != cases[i].len) fprintf(stderr, "utf8 case %zu: got %d\n", i, got);
    KB_CHECK(got == cases[i].len);
  }
  /* kb_json_utf8_bad: the first bad byte's offset, or the length */
  KB_CHECK(kb_json_utf8_bad("", 0) == 0);
  KB_CHECK(kb_json_utf8_bad("plain", 5) == 5);
  KB_CHECK(kb_json_utf8_bad("caf\xc3\xa9 \xe2\x82\xac", 9) == 9);
  KB_CHECK(kb_json_utf8_bad("ab\xff" "cd", 5) == 2);
  KB_CHECK(kb_json_utf8_bad("\xc3\xa9\xed\xa0\x80", 5) == 2); /* a surrogate after é */
  KB_CHECK(kb_json_utf8_bad("ok\xe2\x82", 4) == 2);             /* cut short at the end */
  KB_CHECK(kb_json_utf8_bad("a\0\xc3\xa9", 4) == 4);             /* a NUL is ASCII */
}

static void test_errors(void) {
  static const struct {
    const char *in;
    int code;
    size_t offset, line, column;
    const char *message;
  } cases[] = {
    {"", KB_JSON_ESYNTAX, 0, 1, 1, "empty document"},
    {" \n ", KB_JSON_ESYNTAX, 3, 2, 2, "empty document"},
    {"{\"a\":1,}", KB_JSON_ESYNTAX, 6, 1, 7, "trailing comma before '}'"},
    {"[1,2,]", KB_JSON_ESYNTAX, 4, 1, 5, "trailing comma before ']'"},
    {"[1,\n ]", KB_JSON_ESYNTAX, 2, 1, 3, "trailing comma before ']'"},
    {"[1 2]", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected character '2', expected ',' or ']'"},
    {"{\"a\" 1}", KB_JSON_ESYNTAX, 5, 1, 6,
     "unexpected character '1', expected ':' after object key"},
    {"{1:2}", KB_JSON_ESYNTAX, 1, 1, 2, "unexpected character '1', expected a string key"},
    {"{\"a\":1 \"b\":2}", KB_JSON_ESYNTAX, 7, 1, 8,
     "unexpected character '\"', expected ',' or '}'"},
    {"[01]", KB_JSON_ESYNTAX, 1, 1, 2, "leading zeros are not allowed in numbers"},
    {"-01", KB_JSON_ESYNTAX, 0, 1, 1, "leading zeros are not allowed in numbers"},
    {"-", KB_JSON_ESYNTAX, 1, 1, 2, "unexpected end of input, expected a digit after '-'"},
    {"[-]", KB_JSON_ESYNTAX, 2, 1, 3, "unexpected character ']', expected a digit after '-'"},
    {"1.", KB_JSON_ESYNTAX, 2, 1, 3,
     "unexpected end of input, expected a digit after the decimal point"},
    {"1.e5", KB_JSON_ESYNTAX, 2, 1, 3,
     "unexpected character 'e', expected a digit after the decimal point"},
    {"1e", KB_JSON_ESYNTAX, 2, 1, 3, "unexpected end of input, expected a digit in the exponent"},
    {"1e+", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected end of input, expected a digit in the exponent"},
    {".5", KB_JSON_ESYNTAX, 0, 1, 1, "unexpected character '.'"},
    {"+1", KB_JSON_ESYNTAX, 0, 1, 1, "unexpected character '+'"},
    {"0x10", KB_JSON_ESYNTAX, 1, 1, 2, "unexpected character 'x' after the JSON value"},
    {"tru", KB_JSON_ESYNTAX, 0, 1, 1, "invalid literal, expected 'true'"},
    {"[nul]", KB_JSON_ESYNTAX, 1, 1, 2, "invalid literal, expected 'null'"},
    {"fals", KB_JSON_ESYNTAX, 0, 1, 1, "invalid literal, expected 'false'"},
    {"NaN", KB_JSON_ESYNTAX, 0, 1, 1, "unexpected character 'N'"},
    {"Infinity", KB_JSON_ESYNTAX, 0, 1, 1, "unexpected character 'I'"},
    {"[1]x", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected character 'x' after the JSON value"},
    {"1 2", KB_JSON_ESYNTAX, 2, 1, 3, "unexpected character '2' after the JSON value"},
    {"{\n  \"a\": x\n}", KB_JSON_ESYNTAX, 9, 2, 8, "unexpected character 'x'"},
    {"[\n1,\n\n  @]", KB_JSON_ESYNTAX, 8, 4, 3, "unexpected character '@'"},
    {"\"abc", KB_JSON_ESYNTAX, 0, 1, 1, "unterminated string"},
    {"[\"abc\\\"]", KB_JSON_ESYNTAX, 1, 1, 2, "unterminated string"},
    {"\"\\", KB_JSON_ESYNTAX, 1, 1, 2, "unterminated escape sequence"},
    {"\"a\nb\"", KB_JSON_ESYNTAX, 2, 1, 3, "unescaped control character 0x0a in string"},
    {"\"a\tb\"", KB_JSON_ESYNTAX, 2, 1, 3, "unescaped control character 0x09 in string"},
    {"\"\\x\"", KB_JSON_ESYNTAX, 1, 1, 2, "invalid escape '\\x' in string"},
    {"\"\\'\"", KB_JSON_ESYNTAX, 1, 1, 2, "invalid escape '\\'' in string"},
    {"\"\\u12G4\"", KB_JSON_ESYNTAX, 1, 1, 2, "invalid \\u escape: expected 4 hex digits"},
    {"\"\\u12", KB_JSON_ESYNTAX, 1, 1, 2, "invalid \\u escape: expected 4 hex digits"},
    {"\"\\ud800\"", KB_JSON_EUTF8, 1, 1, 2, "unpaired surrogate \\uD800 in string"},
    {"\"\\udc00\"", KB_JSON_EUTF8, 1, 1, 2, "unpaired surrogate \\uDC00 in string"},
    {"\"ab\\ud800\\u0041\"", KB_JSON_EUTF8, 3, 1, 4, "unpaired surrogate \\uD800 in string"},
    {"\"\\ud800\\ud800\"", KB_JSON_EUTF8, 1, 1, 2, "unpaired surrogate \\uD800 in string"},
    {"\"\\ud800\\uzzzz\"", KB_JSON_ESYNTAX, 7, 1, 8, "invalid \\u escape: expected 4 hex digits"},
    {"\"\xff\"", KB_JSON_EUTF8, 1, 1, 2, "invalid UTF-8 byte 0xff in string"},
    {"\"ok\xc0\xaf\"", KB_JSON_EUTF8, 3, 1, 4, "invalid UTF-8 byte 0xc0 in string"},
    {"\"\xed\xa0\x80\"", KB_JSON_EUTF8, 1, 1, 2, "invalid UTF-8 byte 0xed in string"},
    {"\"\xf4\x90\x80\x80\"", KB_JSON_EUTF8, 1, 1, 2, "invalid UTF-8 byte 0xf4 in string"},
    {"\"\xe2\x82\"", KB_JSON_EUTF8, 1, 1, 2, "invalid UTF-8 byte 0xe2 in string"},
    {"{\"k\x80\":1}", KB_JSON_EUTF8, 3, 1, 4, "invalid UTF-8 byte 0x80 in string"},
    {"[1,\x01]", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected byte 0x01"},
    {"\xef\xbb\xbf{}", KB_JSON_ESYNTAX, 0, 1, 1, "unexpected byte 0xef"},
    {"// c\n1", KB_JSON_ESYNTAX, 0, 1, 1, "unexpected character '/'"},
    {"[1 /* c */]", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected character '/', expected ',' or ']'"},
    {"'a'", KB_JSON_ESYNTAX, 0, 1, 1, "unexpected character '''"},
    {"[", KB_JSON_ESYNTAX, 1, 1, 2, "unexpected end of input"},
    {"[1,", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected end of input"},
    {"[1", KB_JSON_ESYNTAX, 2, 1, 3, "unexpected end of input, expected ',' or ']'"},
    {"{", KB_JSON_ESYNTAX, 1, 1, 2, "unexpected end of input, expected a string key"},
    {"{\"a\"", KB_JSON_ESYNTAX, 4, 1, 5, "unexpected end of input, expected ':' after object key"},
    {"{\"a\":", KB_JSON_ESYNTAX, 5, 1, 6, "unexpected end of input"},
    {"{\"a\":1", KB_JSON_ESYNTAX, 6, 1, 7, "unexpected end of input, expected ',' or '}'"},
    {"[1,,2]", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected character ','"},
    {"{,}", KB_JSON_ESYNTAX, 1, 1, 2, "unexpected character ',', expected a string key"},
    {"[\"a\" : 1]", KB_JSON_ESYNTAX, 5, 1, 6, "unexpected character ':', expected ',' or ']'"},
    {"\"a\"\"b\"", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected character '\"' after the JSON value"},
    {"[1]\0", KB_JSON_ESYNTAX, 3, 1, 4, "unexpected byte 0x00 after the JSON value"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kb_json_error err;
    size_t len = strlen(cases[i].in);
    if (i == sizeof cases / sizeof cases[0] - 1) len = 4; /* the embedded NUL */
    const char *got = reecho(cases[i].in, len, &err);
    int ok = !got && err.code == cases[i].code && err.offset == cases[i].offset &&
             err.line == cases[i].line && err.column == cases[i].column &&
             strcmp(err.message, cases[i].message) == 0;
    if (!ok)
      fprintf(stderr, "error case %zu (%s): got code %d offset %zu line %zu col %zu \"%s\"\n",
              i, cases[i].in, err.code, err.offset, err.line, err.column, err.message);
    KB_CHECK(ok);
  }
  /* A NULL error struct is allowed. */
  echo e;
  memset(&e, 0, sizeof e);
  KB_CHECK(kb_json_parse("[", 1, &echo_handler, &e, NULL) == KB_JSON_ESYNTAX);
  kb_buf_free(&e.out);
}

/* Strings are scanned eight bytes at a time: a stop byte (the closing
 * quote, an escape, a control character, UTF-8) at every offset of a long
 * run is found where it is, and the decoded bytes around it are intact. */
typedef struct captured {
  char s[128];
  size_t n;
} captured;

static int capture_string(void *ud, const char *s, size_t n) {
  captured *c = ud;
  if (n >= sizeof c->s) return 1;
  memcpy(c->s, s, n);
  c->n = n;
  return 0;
}

static void test_string_word_scan(void) {
  static const struct {
    const char *stop;    /* what sits at offset i of a run of 'a's */
    const char *decoded; /* it decoded; NULL: an error at offset i */
  } stops[] = {
    {"\\n", "\n"},          {"\\\"", "\""},   {"\\u00e9", "\xc3\xa9"},
    {"\xc3\xa9", "\xc3\xa9"}, {"\x7f", "\x7f"}, {"~", "~"},
    {"\x1f", NULL},          {"\xff", NULL},   {"\xc3(", NULL},
  };
  kb_json_handler h = {0};
  h.on_string = capture_string;
  for (size_t k = 0; k < sizeof stops / sizeof *stops; k++) {
    for (size_t i = 0; i < 40; i++) {
      char text[128], want[128];
      size_t n = 0, w = 0;
      text[n++] = '"';
      for (size_t j = 0; j < i; j++) text[n++] = want[w++] = 'a';
      n += (size_t)snprintf(text + n, sizeof text - n, "%s", stops[k].stop);
      if (stops[k].decoded) w += (size_t)snprintf(want + w, sizeof want - w, "%s", stops[k].decoded);
      for (size_t j = 0; j < 17; j++) text[n++] = want[w++] = 'b';
      text[n++] = '"';
      captured c = {{0}, 0};
      kb_json_error err;
      int rc = kb_json_parse(text, n, &h, &c, &err);
      if (!stops[k].decoded) {
        KB_CHECK(rc != 0 && err.offset == 1 + i);
      } else {
        KB_CHECK(rc == 0 && c.n == w && memcmp(c.s, want, w) == 0);
      }
    }
  }
}

static void test_text_not_terminated(void) {
  /* Only len bytes are read: "12" inside "123" is the number 12. */
  capture c;
  kb_json_handler h = {0};
  h.on_number = cap_number;
  memset(&c, 0, sizeof c);
  KB_CHECK(kb_json_parse("123", 2, &h, &c, NULL) == 0);
  KB_CHECK(c.len == 2 && memcmp(c.s, "12", 2) == 0);
  KB_CHECK(kb_json_parse("\"ab\"", 3, &h, &c, NULL) == KB_JSON_ESYNTAX);
  KB_CHECK(kb_json_parse("true", 3, &h, &c, NULL) == KB_JSON_ESYNTAX);
}

static char *nested(char open, char close, unsigned levels, size_t *len) {
  /* "[[[...]]]" or {"a":{"a":...{}}} */
  size_t per = open == '[' ? 1 : 5;
  char *s = malloc(levels * (per + 1) + 1);
  size_t n = 0;
  for (unsigned i = 0; i < levels; i++) {
    if (open == '[' || i + 1 == levels) {
      s[n++] = open;
    } else {
      memcpy(s + n, "{\"a\":", 5);
      n += 5;
    }
  }
  for (unsigned i = 0; i < levels; i++) s[n++] = close;
  s[n] = '\0';
  *len = n;
  return s;
}

static void test_depth(void) {
  kb_json_error err;
  size_t len;
  kb_json_handler h = {0};
  char *s = nested('[', ']', 512, &len);
  KB_CHECK(kb_json_parse(s, len, &h, NULL, &err) == 0);
  free(s);
  s = nested('[', ']', 513, &len);
  KB_CHECK(kb_json_parse(s, len, &h, NULL, &err) == KB_JSON_EDEPTH);
  KB_CHECK(err.offset == 512);
  KB_CHECK_STR(err.message, "nesting deeper than 512 levels");
  free(s);
  /* Far deeper than the limit is refused the same way (no stack overflow). */
  s = nested('[', ']', 200000, &len);
  KB_CHECK(kb_json_parse(s, len, &h, NULL, &err) == KB_JSON_EDEPTH);
  KB_CHECK(err.offset == 512);
  free(s);
  s = nested('{', '}', 600, &len);
  KB_CHECK(kb_json_parse(s, len, &h, NULL, &err) == KB_JSON_EDEPTH);
  KB_CHECK(err.offset == 512 * 5);
  KB_CHECK_STR(err.message, "nesting deeper than 512 levels");
  free(s);
  /* A handler-chosen limit. */
  h.max_depth = 3;
  KB_CHECK(kb_json_parse("[{\"a\":[]}]", 10, &h, NULL, &err) == 0);
  KB_CHECK(kb_json_parse("[{\"a\":[[]]}]", 12, &h, NULL, &err) == KB_JSON_EDEPTH);
  KB_CHECK(err.offset == 7);
  KB_CHECK_STR(err.message, "nesting deeper than 3 levels");
  /* Siblings do not add up. */
  KB_CHECK(kb_json_parse("[[[1]],[[2]],{\"x\":[3]}]", 23, &h, NULL, &err) == 0);
}

static int abort_null(void *ud) { return 1; }

static void test_abort(void) {
  kb_json_error err;
  echo e;
  memset(&e, 0, sizeof e);
  e.abort_on_key = 1;
  const char *doc = "{\"a\":1,\"stop\":2}";
  KB_CHECK(kb_json_parse(doc, strlen(doc), &echo_handler, &e, &err) == KB_JSON_EABORT);
  KB_CHECK(err.offset == 13); /* just after the key */
  KB_CHECK_STR(err.message, "stopped by the handler");
  kb_buf_free(&e.out);
  kb_json_handler h = {0};
  h.on_null = abort_null;
  KB_CHECK(kb_json_parse("[1, null]", 9, &h, NULL, &err) == KB_JSON_EABORT);
  KB_CHECK(err.offset == 8);
}

/* ---- numbers ---------------------------------------------------------------- */

static void test_number_kinds(void) {
  capture c;
  KB_CHECK(parse_capture("9007199254740993", &c, NULL) == 0 && c.kind == KB_JSON_INTEGER);
  KB_CHECK(parse_capture("-1.5", &c, NULL) == 0 && c.kind == KB_JSON_FLOAT);
  KB_CHECK(parse_capture("1e3", &c, NULL) == 0 && c.kind == KB_JSON_FLOAT);
  KB_CHECK(parse_capture("-0", &c, NULL) == 0 && c.kind == KB_JSON_INTEGER);
  KB_CHECK(parse_capture("[18446744073709551615]", &c, NULL) == 0 &&
           c.kind == KB_JSON_INTEGER && c.len == 20);
}

static void test_big_integers(void) {
  int64_t v = 0;
  const char *s = "9007199254740993"; /* 2^53 + 1: not a double */
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == 0 && v == 9007199254740993LL);
  s = "-9223372036854775808";
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == 0 && v == INT64_MIN);
  s = "9223372036854775807";
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == 0 && v == INT64_MAX);
  s = "-9223372036854775807";
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == 0 && v == -INT64_MAX);
  s = "0";
  KB_CHECK(kb_json_number_int64(s, 1, &v) == 0 && v == 0);
  s = "-0";
  KB_CHECK(kb_json_number_int64(s, 2, &v) == 0 && v == 0);
  v = 7;
  s = "9223372036854775808";
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == -1 && v == 7);
  KB_CHECK(kb_json_number_double(s, strlen(s)) == 9223372036854775808.0);
  s = "-9223372036854775809";
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == -1);
  s = "18446744073709551615";
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == -1);
  KB_CHECK(kb_json_number_double(s, strlen(s)) == 18446744073709551616.0);
  s = "100000000000000000000000";
  KB_CHECK(kb_json_number_int64(s, strlen(s), &v) == -1);
  KB_CHECK(kb_json_number_int64("1.0", 3, &v) == -1);
  KB_CHECK(kb_json_number_int64("1e2", 3, &v) == -1);
  KB_CHECK(kb_json_number_int64("-", 1, &v) == -1);
  KB_CHECK(kb_json_number_int64("", 0, &v) == -1);
  KB_CHECK(kb_json_number_double("0.1", 3) == 0.1);
  KB_CHECK(kb_json_number_double("-2.5e-3", 7) == -2.5e-3);
  KB_CHECK(kb_json_number_double("1e400", 5) == HUGE_VAL);
  KB_CHECK(kb_json_number_double("5e-324", 6) == 5e-324);
  /* Only len bytes count. */
  KB_CHECK(kb_json_number_double("1.25999", 4) == 1.25);
  /* A literal longer than the internal small buffer. */
  char lng[400];
  memcpy(lng, "0.", 2);
  memset(lng + 2, '0', 300);
  memcpy(lng + 302, "15", 3);
  KB_CHECK(kb_json_number_double(lng, strlen(lng)) == 1.5e-301);
}

static void test_format_int(void) {
  char buf[KB_JSON_NUMBUF];
  KB_CHECK(kb_json_format_int64(buf, 0) == 1 && strcmp(buf, "0") == 0);
  KB_CHECK(kb_json_format_int64(buf, -1) == 2 && strcmp(buf, "-1") == 0);
  KB_CHECK(kb_json_format_int64(buf, INT64_MAX) == 19);
  KB_CHECK_STR(buf, "9223372036854775807");
  KB_CHECK(kb_json_format_int64(buf, INT64_MIN) == 20);
  KB_CHECK_STR(buf, "-9223372036854775808");
  kb_json_format_int64(buf, 9007199254740993LL);
  KB_CHECK_STR(buf, "9007199254740993");
}

static int roundtrips(double d) {
  char buf[KB_JSON_NUMBUF];
  size_t n = kb_json_format_double(buf, d);
  return n > 0 && n == strlen(buf) && kb_json_number_double(buf, n) == d;
}

/* The shortest of %.15g/%.16g/%.17g that reads back: what the formatter
 * must give, worked out here without it. */
static void shortest_reference(double d, char out[KB_JSON_NUMBUF]) {
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(out, KB_JSON_NUMBUF, "%.*g", prec, d);
    if (prec == 17 || strtod(out, NULL) == d) return;
  }
}

/* The formatter keeps its last few texts (a storm formats each number
 * twice): a value formatted again, between others, near ones (one bit
 * apart) and the same value's other sign, still gets its own text. */
static void test_format_double_repeated(void) {
  uint64_t x = 0x2545f4914f6cdd1dULL;
  double recent[8] = {0};
  int bad = 0;
  for (int i = 0; i < 50000; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    double d = (double)(x >> 11) / 9007199254740992.0 * 3.7; /* latencies: [0, 3.7) */
    if (i % 3 == 0) { /* one bit apart from the last value */
      uint64_t b;
      memcpy(&b, &recent[(i + 7) % 8], sizeof b);
      b ^= 1;
      memcpy(&d, &b, sizeof d);
    }
    if (i % 7 == 0) d = -recent[(i + 3) % 8];
    recent[i % 8] = d;
    for (int k = 0; k < 3; k++) {
      double v = recent[(i + 8 - k * 2) % 8];
      char got[KB_JSON_NUMBUF], want[KB_JSON_NUMBUF];
      kb_json_format_double(got, v);
      if (v == floor(v)) continue; /* integral: printed as an integer */
      shortest_reference(v, want);
      if (strcmp(got, want) != 0 && bad++ < 5) printf("  %.17g: got %s, want %s\n", v, got, want);
    }
  }
  KB_CHECK(bad == 0);
}

static void test_format_double(void) {
  char buf[KB_JSON_NUMBUF];
  static const struct {
    double d;
    const char *s;
  } cases[] = {
    {0.1, "0.1"}, {0.5, "0.5"}, {-2.5, "-2.5"}, {1e300, "1e+300"},
    {3.0, "3"}, {-7.0, "-7"}, {0.0, "0"}, {1.0 / 3, "0.3333333333333333"},
    {0.1 + 0.2, "0.30000000000000004"}, {123456.789, "123456.789"},
    {1e21, "1e+21"}, {1.5e-7, "1.5e-07"}, {2.2250738585072014e-308, "2.2250738585072014e-308"},
    {DBL_MAX, "1.7976931348623157e+308"}, {100.0, "100"},
    {9007199254740992.0, "9007199254740992"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kb_json_format_double(buf, cases[i].d);
    KB_CHECK_STR(buf, cases[i].s);
    KB_CHECK(roundtrips(cases[i].d));
  }
  KB_CHECK(kb_json_format_double(buf, -0.0) == 2 && strcmp(buf, "-0") == 0);
  KB_CHECK(roundtrips(5e-324));
  KB_CHECK(roundtrips(-5e-324));
  KB_CHECK(roundtrips(1e-300));
  KB_CHECK(roundtrips(0.1));
  KB_CHECK(roundtrips(1e15 + 0.5));
  KB_CHECK(kb_json_format_double(buf, NAN) == 0);
  KB_CHECK(kb_json_format_double(buf, HUGE_VAL) == 0);
  KB_CHECK(kb_json_format_double(buf, -HUGE_VAL) == 0);
  /* Arbitrary bit patterns (a fixed LCG, so failures reproduce). */
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  int bad = 0;
  for (int i = 0; i < 20000; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    double d;
    memcpy(&d, &x, sizeof d);
    if (!isfinite(d)) continue;
    if (!roundtrips(d)) bad++;
  }
  KB_CHECK(bad == 0);
}

/* ---- encoding helpers ------------------------------------------------------- */

static void test_write_string(void) {
  kb_buf b = KB_BUF_INIT;
  size_t bad = 99;
  KB_CHECK(kb_json_write_string(&b, "plain", 5, &bad) == 0);
  KB_CHECK_STR(b.data, "\"plain\"");
  kb_buf_clear(&b);
  const char *esc = "q\"b\\s/n\nt\tr\rb\bf\f";
  KB_CHECK(kb_json_write_string(&b, esc, strlen(esc), NULL) == 0);
  KB_CHECK_STR(b.data, "\"q\\\"b\\\\s/n\\nt\\tr\\rb\\bf\\f\"");
  kb_buf_clear(&b);
  KB_CHECK(kb_json_write_string(&b, "\x01\x1f\x7f\0x", 5, NULL) == 0);
  KB_CHECK_STR(b.data, "\"\\u0001\\u001f\x7f\\u0000x\"");
  kb_buf_clear(&b);
  KB_CHECK(kb_json_write_string(&b, "caf\xc3\xa9 \xf0\x9f\x98\x80", 10, NULL) == 0);
  KB_CHECK_STR(b.data, "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
  kb_buf_clear(&b);
  KB_CHECK(kb_json_write_string(&b, "", 0, NULL) == 0);
  KB_CHECK_STR(b.data, "\"\"");
  kb_buf_clear(&b);
  KB_CHECK(kb_json_write_string(&b, "ab\xff", 3, &bad) == KB_JSON_EUTF8 && bad == 2);
  kb_buf_clear(&b);
  KB_CHECK(kb_json_write_string(&b, "\n\xed\xa0\x80", 4, &bad) == KB_JSON_EUTF8 && bad == 1);
  kb_buf_clear(&b);
  KB_CHECK(kb_json_write_string(&b, "x\xc3", 2, &bad) == KB_JSON_EUTF8 && bad == 1);
  /* Written strings parse back to the same bytes. */
  char all[256];
  for (int i = 0; i < 128; i++) all[i] = (char)i;
  kb_buf_clear(&b);
  KB_CHECK(kb_json_write_string(&b, all, 128, NULL) == 0);
  kb_buf scratch = KB_BUF_INIT;
  kb_json_handler h = {0};
  capture c;
  h.on_string = cap_string;
  h.scratch = &scratch;
  memset(&c, 0, sizeof c);
  KB_CHECK(kb_json_parse(b.data, b.len, &h, &c, NULL) == 0);
  KB_CHECK(c.len == 64 && memcmp(c.s, all, 64) == 0); /* capture keeps 64 bytes */
  KB_CHECK(scratch.len == 128 && memcmp(scratch.data, all, 128) == 0);
  kb_buf_free(&scratch);
  kb_buf_free(&b);
}

/* ---- robustness ------------------------------------------------------------- */

/* Mutates valid documents at random; the parser must never read out of
 * bounds (ASan) and whatever it accepts must echo to a fixed point. */
static void test_mutations(void) {
  static const char *seeds[] = {
    "{\"a\":[1,2.5e3,-0.25,true,false,null],\"b\":{\"c\":\"x\\u00e9\\n\"}}",
    "[\"\\ud83d\\ude00\",\"caf\xc3\xa9\",{\"\":[]},[[[]]],-12,0.5E-2]",
    "  {\"k\" : \"v\" , \"n\" : [ 1 , 2 ] }  ",
  };
  static const char alphabet[] = "{}[]\",:\\u0123456789.eE+-tfnrl aAdD\x80\xc3\xff\n";
  uint64_t x = 12345;
  int accepted = 0, stable = 0;
  for (int iter = 0; iter < 30000; iter++) {
    const char *seed = seeds[iter % 3];
    char doc[128];
    size_t len = strlen(seed);
    memcpy(doc, seed, len);
    int edits = 1 + iter % 3;
    for (int k = 0; k < edits; k++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t pos = (size_t)(x >> 33) % len;
      unsigned op = (unsigned)(x >> 20) % 3;
      char ch = alphabet[(x >> 40) % (sizeof alphabet - 1)];
      if (op == 0) {
        doc[pos] = ch;
      } else if (op == 1 && len > 1) {
        memmove(doc + pos, doc + pos + 1, len - pos - 1);
        len--;
      } else if (len < sizeof doc - 1) {
        memmove(doc + pos + 1, doc + pos, len - pos);
        doc[pos] = ch;
        len++;
      }
    }
    /* Exact-size heap copy so ASan catches any read past the end. */
    char *heap = malloc(len ? len : 1);
    memcpy(heap, doc, len);
    kb_json_error err;
    const char *once = reecho(heap, len, &err);
    if (once) {
      accepted++;
      char first[4096];
      strcpy(first, once);
      const char *twice = reecho(first, strlen(first), &err);
      if (twice && strcmp(first, twice) == 0) stable++;
    } else {
      KB_CHECK(err.code < 0 && err.offset <= len && err.message[0]);
    }
    free(heap);
  }
  KB_CHECK(accepted > 0);
  KB_CHECK(stable == accepted);
}

int main(void) {
  KB_RUN(test_buf);
  KB_RUN(test_roundtrip);
  KB_RUN(test_unicode);
  KB_RUN(test_utf8_seq);
  KB_RUN(test_errors);
  KB_RUN(test_string_word_scan);
  KB_RUN(test_text_not_terminated);
  KB_RUN(test_depth);
  KB_RUN(test_abort);
  KB_RUN(test_number_kinds);
  KB_RUN(test_big_integers);
  KB_RUN(test_format_int);
  KB_RUN(test_format_double);
  KB_RUN(test_format_double_repeated);
  KB_RUN(test_write_string);
  KB_RUN(test_mutations);
  return kb_test_report();
}
