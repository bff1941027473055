/* kb.json: JSON for Lua scenarios, on top of the codec in src/codec/json.c.
 *
 *   local json = require "kb.json"      -- also kb.json
 *   local doc  = json.decode(text [, opts])
 *   local text = json.encode(value [, opts])
 *
 * Values map as follows:
 *   null          <-> json.null (a light userdata NULL; tables cannot hold nil)
 *   true/false    <-> booleans
 *   integers      <-> Lua integers, exactly (up to +-2^63); an integer literal
 *                     that does not fit int64, and every number with a
 *                     fraction or exponent, decodes to a float
 *   floats         -> the shortest of %.15g/%.16g/%.17g that reads back
 *                     exactly; integral floats print without ".0" (3.0 -> 3);
 *                     NaN and infinities are an error
 *   strings       <-> strings; must be valid UTF-8 in both directions
 *   arrays        <-> tables with keys 1..n; decoded arrays carry the
 *                     "kb.array" metatable so an empty one re-encodes as []
 *   objects       <-> tables with string keys; integer keys of a table that
 *                     is not a 1..n sequence become strings ("404": ...)
 *
 * A table is written as an array when it is marked (json.array) or its keys
 * are exactly 1..n; as an object otherwise (an empty unmarked table is {}).
 * A table mixing string and integer keys, or with keys of another type, is
 * an error naming the key, as are functions, userdata, threads, cycles and
 * nesting deeper than max_depth. Errors are kb error objects of class
 * "json": err.message reads e.g.
 *   kb.json.encode: cannot encode a function at $.a.b[3]
 *   kb.json.decode: unexpected character 'x' at byte 17 (line 2, column 5)
 * Encode errors carry err.path; decode errors err.offset (1-based byte
 * index into the text, like string.sub), err.line and err.column (1-based,
 * in bytes). Paths use Lua indices: $.items[1].name.
 *
 * encode options: pretty (false), indent (2; setting it implies pretty),
 *   sort_keys (true: keys in byte order, so output is deterministic; false
 *   writes them in traversal order, a little faster), max_depth (512).
 * decode options: max_depth (512), max_size (bytes, unlimited), skip (a set
 *   of keys, {pipeline_spec = true}: members so named, at any depth, are
 *   left out of the result; their text is still checked, but nothing is
 *   built for it, which is what a status poll of a large object saves).
 * Duplicate keys in a decoded object: the last one wins. */

/* This file: the per-call state, the markers and the module. The encoder
 * is in json_encode.c, the decoder in json_decode.c; ljson_internal.h is
 * what they share. */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "kb/json.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "ljson_internal.h"

#define JSON_STATE "kb.json.state"
#define JSON_OBJECT "kb.json.object"

void kb__ljson_state_release(jstate *st) {
  kb_buf_free(&st->buf);
  free(st->frames);
  free(st->keys);
  st->frames = NULL;
  st->keys = NULL;
  st->frames_cap = st->nkeys = st->keys_cap = 0;
}

static int state_gc(lua_State *L) {
  kb__ljson_state_release(luaL_checkudata(L, 1, JSON_STATE));
  return 0;
}

jstate *kb__ljson_state_new(lua_State *L) {
  jstate *st = lua_newuserdatauv(L, sizeof *st, 0);
  memset(st, 0, sizeof *st);
  luaL_setmetatable(L, JSON_STATE);
  return st;
}

int kb__ljson_grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *q = realloc(*p, n * size);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

frame *kb__ljson_state_frame(lua_State *L, jstate *st, unsigned depth, const char *fn) {
  if (kb__ljson_grow((void **)&st->frames, &st->frames_cap, (size_t)depth + 1, sizeof(frame)))
    luaL_error(L, "%s: out of memory", fn);
  return &st->frames[depth];
}

unsigned kb__ljson_opt_depth(lua_State *L, int opts) {
  lua_Integer d = kb_opt_integer(L, opts, "max_depth", KB_JSON_DEFAULT_DEPTH);
  if (d < 1 || d > JSON_DEPTH_CAP)
    luaL_error(L, "option 'max_depth' must be between 1 and %d", JSON_DEPTH_CAP);
  return (unsigned)d;
}

/* ---- markers ------------------------------------------------------------- */

/* Sets the marker metatable `mt` on the table argument (a new table when
 * absent) and returns it. Refuses to replace a foreign metatable. */
static int mark_table(lua_State *L, int mt) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  if (lua_getmetatable(L, 1)) {
    if (!lua_rawequal(L, -1, UV_ARRAY_MT) && !lua_rawequal(L, -1, UV_OBJECT_MT))
      return luaL_argerror(L, 1, "table already has a metatable");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, mt);
  lua_setmetatable(L, 1);
  return 1;
}

/* json.array([t]) -> t: t encodes as a JSON array, even when empty. */
static int l_array(lua_State *L) { return mark_table(L, UV_ARRAY_MT); }

/* json.object([t]) -> t: t encodes as a JSON object, even with keys 1..n. */
static int l_object(lua_State *L) { return mark_table(L, UV_OBJECT_MT); }

static const luaL_Reg json_funcs[] = {
  {"encode", kb__ljson_encode},
  {"decode", kb__ljson_decode},
  {"array", l_array},
  {"object", l_object},
  {"null", NULL},
  {NULL, NULL},
};

static const luaL_Reg state_meta[] = {
  {"__gc", state_gc},
  {NULL, NULL},
};

int luaopen_kb_json(lua_State *L) {
  kb_new_class(L, JSON_STATE, NULL, state_meta);
  luaL_newlibtable(L, json_funcs);
  /* Upvalue 1: the shared "kb.array" metatable (see kb_mark_array). */
  lua_newtable(L);
  kb_mark_array(L, -1);
  lua_getmetatable(L, -1);
  lua_remove(L, -2);
  /* Upvalue 2: this module's object marker. */
  if (luaL_newmetatable(L, JSON_OBJECT)) {
    lua_pushliteral(L, JSON_OBJECT);
    lua_setfield(L, -2, "__name");
  }
  luaL_setfuncs(L, json_funcs, 2);
  kb_push_null(L);
  lua_setfield(L, -2, "null");
  return 1;
}
