/* Fuzz target: the JSON codec (src/codec/json.c) and kb.json (src/lua/json.c).
 *
 * Properties checked on every input, besides "no crash, no sanitizer
 * report":
 *  - a failed parse reports an error code and an offset inside the text;
 *  - every decoded string re-encodes (kb_json_write_string) and parses back
 *    to the same bytes; every finite number formats and reads back exactly;
 *  - kb.json.decode either returns a value or raises a "json" error object;
 *    a decoded value encodes (unless it holds an infinity), and
 *    decode(encode(v)) encodes to the same text again. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_lua.h"
#include "kb/buf.h"
#include "kb/json.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_json: %s\n", what);
  abort();
}

typedef struct {
  kb_buf out;    /* re-encoded strings */
  size_t events;
} walk;

static int on_capture(void *ud, const char *s, size_t len) {
  kb_buf *b = ud;
  kb_buf_clear(b);
  return kb_buf_append(b, s, len) != 0;
}

/* A string must survive write_string -> parse unchanged. */
static int check_string(void *ud, const char *s, size_t len) {
  walk *w = ud;
  w->events++;
  kb_buf_clear(&w->out);
  if (kb_json_write_string(&w->out, s, len, NULL) != 0) fail("decoded string does not re-encode");
  kb_buf back = {0};
  kb_json_handler h = {.on_string = on_capture};
  if (kb_json_parse(w->out.data, w->out.len, &h, &back, NULL) != 0) fail("re-encoded string does not parse");
  if (back.len != len || memcmp(back.data, s, len) != 0) fail("string changed in a round trip");
  kb_buf_free(&back);
  return 0;
}

static int check_number(void *ud, const char *text, size_t len, kb_json_numkind kind) {
  walk *w = ud;
  w->events++;
  char buf[KB_JSON_NUMBUF];
  int64_t i;
  if (kind == KB_JSON_INTEGER && kb_json_number_int64(text, len, &i) == 0) {
    size_t n = kb_json_format_int64(buf, i);
    int64_t j;
    if (kb_json_number_int64(buf, n, &j) != 0 || j != i) fail("int64 round trip");
  }
  double d = kb_json_number_double(text, len);
  if (isnan(d)) fail("a JSON number read as NaN");
  size_t n = kb_json_format_double(buf, d);
  if (isfinite(d)) {
    if (n == 0 || n >= KB_JSON_NUMBUF) fail("finite double not formatted");
    if (kb_json_number_double(buf, n) != d) fail("double round trip");
  } else if (n != 0) {
    fail("infinity formatted as a number");
  }
  return 0;
}

static int count(void *ud) {
  ((walk *)ud)->events++;
  return 0;
}
static int count_key(void *ud, const char *s, size_t len) { return check_string(ud, s, len); }
static int count_bool(void *ud, int v) { return count(ud) + (v != 0 && v != 1); }

static const char *CHECKER =
    "local json = require 'kb.json'\n"
    "local function is_json_error(e)\n"
    "  return type(e) == 'table' and e.class == 'json' and type(e.message) == 'string'\n"
    "    and e.message:find('kb.json', 1, true) ~= nil\n"
    "end\n"
    "return function(text)\n"
    "  local ok, v = pcall(json.decode, text)\n"
    "  if not ok then\n"
    "    assert(is_json_error(v), 'decode raised ' .. tostring(v))\n"
    "    return\n"
    "  end\n"
    "  local ok2, t = pcall(json.encode, v)\n"
    "  if not ok2 then\n"
    "    assert(is_json_error(t), 'encode raised ' .. tostring(t))\n"
    "    return -- e.g. 1e999 decodes to an infinity, which JSON cannot hold\n"
    "  end\n"
    "  -- One trip may normalise (the float -0.0 is written -0, which reads\n"
    "  -- back as the integer 0); after that the text must be a fixed point.\n"
    "  local t2 = json.encode(json.decode(t))\n"
    "  local t3 = json.encode(json.decode(t2))\n"
    "  assert(t2 == t3, 'round trip changed the text:\\n' .. t2 .. '\\n' .. t3)\n"
    "  json.encode(v, {pretty = true, sort_keys = false})\n"
    "end\n";

static lua_State *L;
static int checker;
static unsigned runs;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  L = luaL_newstate();
  luaL_openlibs(L);
  kb_lua_preload(L);
  checker = fuzz_lua_checker(L, CHECKER);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  walk w = {0};
  kb_json_handler h = {
      .on_null = count, .on_bool = count_bool, .on_number = check_number,
      .on_string = check_string, .on_begin_object = count, .on_key = count_key,
      .on_end_object = count, .on_begin_array = count, .on_end_array = count};
  kb_json_error err;
  int rc = kb_json_parse(text, size, &h, &w, &err);
  if (rc != 0) {
    if (rc != err.code || rc < KB_JSON_ENOMEM || rc == KB_JSON_EABORT) fail("bad error code");
    if (err.offset > size || err.line < 1 || err.column < 1 || !err.message[0])
      fail("bad error position");
  }
  /* A shallow limit must fail cleanly, never crash. */
  kb_buf scratch = {0};
  h.max_depth = 3;
  h.scratch = &scratch;
  kb_json_parse(text, size, &h, &w, NULL);
  kb_buf_free(&scratch);
  kb_buf_free(&w.out);

  fuzz_lua_check(L, checker, text, size);
  if (++runs % 256 == 0) lua_gc(L, LUA_GCCOLLECT);
  return 0;
}
