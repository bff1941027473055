/* Fuzz target: the YAML codec (src/codec/yaml*.c) and the cJSON <-> Lua
 * conversion (src/lua/cjson_conv.c).
 *
 * Properties checked on every input, besides "no crash, no sanitizer
 * report, no runaway memory" (alias bombs, deep nesting):
 *  - a failed parse reports a known error code and a message;
 *  - every parsed document emits (or fails with a message), and the
 *    emitted text parses back to the same tree;
 *  - cJSON -> Lua -> cJSON gives the same tree back (or a clean refusal). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kb/lua_cjson.h"
#include "kb/lua_modules.h"
#include "kb/yaml.h"

static void fail(const char *what, const cJSON *a, const cJSON *b) {
  fprintf(stderr, "fuzz_yaml: %s\n", what);
  char *ta = a ? cJSON_PrintUnformatted(a) : NULL, *tb = b ? cJSON_PrintUnformatted(b) : NULL;
  if (ta) fprintf(stderr, "  before: %.2000s\n", ta);
  if (tb) fprintf(stderr, "  after:  %.2000s\n", tb);
  free(ta);
  free(tb);
  abort();
}

/* The value a number node stands for: Raw nodes hold exact decimal text. */
static double num_of(const cJSON *n) {
  return cJSON_IsRaw(n) ? strtod(n->valuestring, NULL) : n->valuedouble;
}

static int is_num(const cJSON *n) { return cJSON_IsNumber(n) || cJSON_IsRaw(n); }

/* Structural equality, exact on numbers (NaN equals NaN). A Raw node and a
 * number are equal when they denote the same double: a Raw integer beyond
 * int64 becomes a Lua float by design. */
static int same(const cJSON *a, const cJSON *b) {
  if (is_num(a) && is_num(b)) {
    if (cJSON_IsRaw(a) && cJSON_IsRaw(b)) return strcmp(a->valuestring, b->valuestring) == 0;
    double x = num_of(a), y = num_of(b);
    return x == y || (isnan(x) && isnan(y));
  }
  if ((a->type & 0xFF) != (b->type & 0xFF)) return 0;
  if (cJSON_IsString(a)) return strcmp(a->valuestring, b->valuestring) == 0;
  if (cJSON_IsArray(a)) {
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
      if (!same(x, y)) return 0;
    return !x && !y;
  }
  if (cJSON_IsObject(a)) {
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return 0;
    for (const cJSON *x = a->child; x; x = x->next) {
      const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
      if (!y || !same(x, y)) return 0;
    }
    return 1;
  }
  return 1; /* null, true, false */
}

static void check_error(const kb_yaml_error *err) {
  if (err->code < KB_YAML_ESYNTAX || err->code > KB_YAML_ENOMEM || !err->message[0])
    fail("bad error report", NULL, NULL);
}

static lua_State *L;

static void check_lua_round_trip(const cJSON *doc) {
  int top = lua_gettop(L);
  kb_lua_push_cjson(L, doc);
  char msg[256];
  cJSON *back = kb_lua_to_cjson(L, -1, msg, sizeof msg);
  if (back) {
    if (!same(doc, back)) fail("cJSON -> Lua -> cJSON changed the tree", doc, back);
    cJSON_Delete(back);
  } else if (!msg[0]) {
    fail("kb_lua_to_cjson failed without a message", doc, NULL);
  }
  lua_settop(L, top);
}

static void check_emit_round_trip(const cJSON *doc) {
  kb_yaml_error err;
  char *text = kb_yaml_emit(doc, &err);
  if (!text) {
    check_error(&err);
    return;
  }
  kb_yaml_opts o = {.single = 1};
  cJSON *back = kb_yaml_parse_opts(text, strlen(text), &o, &err);
  if (!back) {
    fprintf(stderr, "emitted:\n%s\nreparse error: %s (%d:%d)\n", text, err.message, err.line,
            err.column);
    fail("emitted YAML does not parse", doc, NULL);
  }
  if (!same(doc, back)) {
    fprintf(stderr, "emitted:\n%.4000s\n", text);
    fail("emit -> parse changed the tree", doc, back);
  }
  cJSON_Delete(back);
  free(text);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  L = luaL_newstate();
  luaL_openlibs(L);
  kb_lua_preload(L);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  kb_yaml_error err;

  cJSON *first = kb_yaml_parse(text, size, &err);
  if (!first) check_error(&err);
  cJSON_Delete(first);

  /* A tighter alias budget than the default keeps each run fast; the
   * default one is exercised by the regression tests. */
  kb_yaml_opts o = {.max_alias_nodes = 20000};
  cJSON *docs = NULL;
  if (kb_yaml_parse_all_opts(text, size, &o, &docs, &err) != 0) {
    check_error(&err);
    if (docs) fail("docs set on failure", NULL, NULL);
    return 0;
  }
  if (!cJSON_IsArray(docs)) fail("parse_all did not give an array", docs, NULL);
  for (const cJSON *d = docs->child; d; d = d->next) {
    check_emit_round_trip(d);
    check_lua_round_trip(d);
  }
  char *all = kb_yaml_emit_all(docs, &err);
  if (all) {
    cJSON *back = NULL;
    if (kb_yaml_parse_all(all, strlen(all), &back, &err) != 0) fail("emit_all output does not parse", docs, NULL);
    if (!same(docs, back)) fail("emit_all -> parse_all changed the stream", docs, back);
    cJSON_Delete(back);
    free(all);
  } else {
    check_error(&err);
  }
  cJSON_Delete(docs);
  if ((size & 63) == 0) lua_gc(L, LUA_GCCOLLECT);
  return 0;
}
