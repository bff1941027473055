/* A strict RFC 8259 JSON codec with no Lua dependency.
 *
 * Decoding is SAX-style: kb_json_parse() walks the text once and reports
 * each value to callbacks, so a consumer builds exactly the structure it
 * needs (Lua tables, a C struct, nothing at all for validation) without an
 * intermediate tree.
 *
 * The parser rejects everything RFC 8259 does not allow: comments, trailing
 * commas, leading zeros, NaN/Infinity, single quotes, unescaped control
 * characters, invalid UTF-8 (overlong forms, surrogates, > U+10FFFF),
 * unpaired \u surrogates and anything after the top-level value.
 *
 * Encoding is left to the caller, who writes into a kb_buf with the helpers
 * below (string escaping, exact integer and round-trip double formatting). */
#ifndef KB_JSON_H
#define KB_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "kb/buf.h"

/* Default nesting limit (arrays + objects) when the handler leaves
 * max_depth at 0. The parser recurses once per level. */
#define KB_JSON_DEFAULT_DEPTH 512

/* Error codes (negative, as returned by kb_json_parse). */
enum {
  KB_JSON_OK = 0,
  KB_JSON_ESYNTAX = -1, /* grammar violation, bad escape, bad number */
  KB_JSON_EUTF8 = -2,   /* invalid UTF-8 or unpaired surrogate */
  KB_JSON_EDEPTH = -3,  /* nesting deeper than max_depth */
  KB_JSON_EABORT = -4,  /* a callback returned non-zero */
  KB_JSON_ENOMEM = -5
};

typedef enum kb_json_numkind {
  KB_JSON_INTEGER, /* only digits, with an optional '-' */
  KB_JSON_FLOAT    /* has a fraction or an exponent */
} kb_json_numkind;

/* Callbacks receive the handler's `ud`; each returns 0 to go on, non-zero to
 * stop the parse with KB_JSON_EABORT. A NULL callback ignores its event.
 * String and key bytes are only valid during the call: they point into the
 * text when the string had no escapes, else into the scratch buffer. */
/* What on_key returns to have the member's value passed over: parsed and
 * checked as any other, but without events, so a consumer builds nothing
 * for a large member it never reads (a status poll's run details). */
#define KB_JSON_SKIP_MEMBER 2

typedef struct kb_json_handler {
  int (*on_null)(void *ud);
  int (*on_bool)(void *ud, int value);
  /* text/len is the number exactly as written (validated JSON grammar);
   * convert it with kb_json_number_int64 / kb_json_number_double. */
  int (*on_number)(void *ud, const char *text, size_t len, kb_json_numkind kind);
  int (*on_string)(void *ud, const char *s, size_t len);
  int (*on_begin_object)(void *ud);
  int (*on_key)(void *ud, const char *s, size_t len);
  int (*on_end_object)(void *ud);
  int (*on_begin_array)(void *ud);
  int (*on_end_array)(void *ud);

  /* Limits and resources the consumer decides on. */
  unsigned max_depth; /* 0: KB_JSON_DEFAULT_DEPTH */
  /* Where strings with escapes are decoded. With NULL the parser uses (and
   * frees) its own buffer, so callbacks must then return normally instead
   * of longjmp-ing out (as lua_error does); pass a buffer owned elsewhere
   * when they may. The parser only clears and appends to it. */
  kb_buf *scratch;
} kb_json_handler;

typedef struct kb_json_error {
  int code;          /* KB_JSON_E* */
  size_t offset;     /* 0-based byte offset of the offending byte */
  size_t line;       /* 1-based */
  size_t column;     /* 1-based, counted in bytes */
  char message[128]; /* e.g. "unexpected character 'x'", without position */
} kb_json_error;

/* Parses exactly one JSON value (surrounded by optional whitespace) from
 * text[0..len). Returns 0 or a negative KB_JSON_E* code; on failure fills
 * *err when err is not NULL. The text need not be NUL-terminated. */
int kb_json_parse(const char *text, size_t len, const kb_json_handler *h, void *ud,
                  kb_json_error *err);

/* ---- numbers ------------------------------------------------------------ */

/* Room for any number the formatters below write, with its NUL. */
#define KB_JSON_NUMBUF 32

/* Converts an integer literal (as given to on_number) exactly. Returns 0, or
 * -1 when it is not an integer literal or does not fit int64_t (use
 * kb_json_number_double then). */
int kb_json_number_int64(const char *text, size_t len, int64_t *out);

/* Converts any JSON number to the nearest double (overflow gives +-HUGE_VAL).
 * Independent of the C locale's decimal point. */
double kb_json_number_double(const char *text, size_t len);

/* Writes v in decimal into out; returns the length. */
size_t kb_json_format_int64(char out[KB_JSON_NUMBUF], int64_t v);

/* Writes the shortest of %.15g, %.16g, %.17g that reads back as exactly d
 * (so 0.1 gives "0.1"); integral values print without a fraction ("3").
 * Returns the length, or 0 for NaN and infinities, which JSON cannot hold. */
size_t kb_json_format_double(char out[KB_JSON_NUMBUF], double d);

/* ---- strings ------------------------------------------------------------ */

/* Appends s[0..len) as a quoted JSON string: '"' and '\\' are escaped, control
 * characters become \n, \t, ... or \u00XX, and UTF-8 is copied as is.
 * Returns 0, KB_JSON_EUTF8 when s is not valid UTF-8 (then *bad, if not
 * NULL, is the offset of the first invalid byte, and the buffer holds a
 * partial string), or KB_JSON_ENOMEM. */
int kb_json_write_string(kb_buf *b, const char *s, size_t len, size_t *bad);

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 if it is not
 * one (truncated, overlong, surrogate, beyond U+10FFFF). */
int kb_json_utf8_seq(const unsigned char *s, size_t n);

/* Offset of the first byte of s[0..len) that does not start a valid UTF-8
 * sequence (kb_json_utf8_seq), or len when all of it is valid. */
size_t kb_json_utf8_bad(const char *s, size_t len);

#endif
