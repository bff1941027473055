/* kb.yaml: YAML documents as Lua values.
 *
 *   local yaml = require "kb.yaml"
 *   local doc  = yaml.decode(text [, {name = "params.yaml"}])
 *   local docs = yaml.decode_all(manifests)        -- one entry per document
 *   local text = yaml.encode(value)
 *   local text = yaml.encode_all({doc1, doc2})     -- "---"-separated
 *
 * Typing, tags, anchors, merge keys and limits: see include/kb/yaml.h
 * (YAML 1.2 core schema: yes/no/on/off are strings). Values follow kb.json's
 * conventions: YAML null is yaml.null (the same sentinel as kb.json.null),
 * sequences come back as tables with the "kb.array" metatable, and a table
 * with that metatable encodes as a sequence even when empty (yaml.array).
 *
 * decode raises on a stream of several documents: use decode_all, which
 * returns a list (empty for an empty stream). Options of both:
 *   name             shown in error messages, "params.yaml:3:8: ..."
 *   max_depth        nesting limit (default 512, at most 4096)
 *   max_alias_nodes  limit of nodes created by alias expansion (default 1e6)
 * Errors are kb error objects of class "yaml". Malformed documents:
 *   kb.yaml.decode: mapping values are not allowed in this context at line 3, column 8
 *   params.yaml:3:8: mapping values are not allowed in this context   (opts.name)
 * with fields line and column (1-based; absent when the problem has none)
 * and name. Values YAML cannot hold follow kb.json.encode's rules and
 * words (functions, cycles, mixed keys, invalid UTF-8; integer keys of a
 * non-sequence become strings) and carry err.path:
 *   kb.yaml.encode: cannot encode a function at $.spec.args[2]
 * Unlike kb.json, nan and +-inf encode (as .nan, .inf, -.inf). */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/lua_cjson.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/yaml.h"

#define DOC_BOX "kb.yaml.doc"
/* Trees are freed, copied and converted recursively: bound the C stack. */
#define DEPTH_CAP 4096

/* A parsed tree in a userdata, so that a Lua error while it is converted
 * (out of memory) cannot leak it: the box's __gc frees it. */
static int box_gc(lua_State *L) {
  cJSON **box = luaL_checkudata(L, 1, DOC_BOX);
  cJSON_Delete(*box);
  *box = NULL;
  return 0;
}

static cJSON **new_box(lua_State *L) {
  cJSON **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  luaL_setmetatable(L, DOC_BOX);
  return box;
}

static int raise_yaml_error(lua_State *L, const char *fn, const char *name,
                            const kb_yaml_error *e) {
  const char *hint = e->code == KB_YAML_EMULTIDOC ? " (use kb.yaml.decode_all)" : "";
  if (name && e->line) {
    kb_error_new(L, "yaml", "%s:%d:%d: %s%s", name, e->line, e->column, e->message, hint);
  } else if (name) {
    kb_error_new(L, "yaml", "%s: %s%s", name, e->message, hint);
  } else if (e->line) {
    kb_error_new(L, "yaml", "%s: %s%s at line %d, column %d", fn, e->message, hint, e->line,
                 e->column);
  } else {
    kb_error_new(L, "yaml", "%s: %s%s", fn, e->message, hint);
  }
  if (e->line) {
    lua_pushinteger(L, e->line);
    lua_setfield(L, -2, "line");
    lua_pushinteger(L, e->column);
    lua_setfield(L, -2, "column");
  }
  if (name) {
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
  }
  return lua_error(L);
}

static kb_yaml_opts decode_opts(lua_State *L, int idx, const char **name) {
  kb_yaml_opts o = {0, 0, 0};
  if (!lua_isnoneornil(L, idx)) luaL_checktype(L, idx, LUA_TTABLE);
  *name = kb_opt_string(L, idx, "name", NULL);
  lua_Integer depth = kb_opt_integer(L, idx, "max_depth", KB_YAML_MAX_DEPTH);
  lua_Integer nodes = kb_opt_integer(L, idx, "max_alias_nodes", KB_YAML_MAX_ALIAS_NODES);
  luaL_argcheck(L, depth > 0 && depth <= DEPTH_CAP, idx, "max_depth must be in 1..4096");
  luaL_argcheck(L, nodes > 0, idx, "max_alias_nodes must be positive");
  o.max_depth = (int)depth;
  o.max_alias_nodes = (size_t)nodes;
  return o;
}

/* kb.yaml.decode(text [, opts]) -> value of the stream's only document
 * (null for an empty stream). */
static int l_decode(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  const char *name;
  kb_yaml_opts o = decode_opts(L, 2, &name);
  o.single = 1;
  cJSON **box = new_box(L);
  kb_yaml_error err;
  *box = kb_yaml_parse_opts(text, len, &o, &err);
  if (!*box) return raise_yaml_error(L, "kb.yaml.decode", name, &err);
  kb_lua_push_cjson(L, *box);
  cJSON_Delete(*box);
  *box = NULL;
  return 1;
}

/* kb.yaml.decode_all(text [, opts]) -> list of every document's value. */
static int l_decode_all(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  const char *name;
  kb_yaml_opts o = decode_opts(L, 2, &name);
  cJSON **box = new_box(L);
  kb_yaml_error err;
  if (kb_yaml_parse_all_opts(text, len, &o, box, &err)) {
    return raise_yaml_error(L, "kb.yaml.decode_all", name, &err);
  }
  kb_lua_push_cjson(L, *box);
  cJSON_Delete(*box);
  *box = NULL;
  return 1;
}

/* Converts the value at idx into the box. A value YAML cannot hold raises
 * a "yaml" error like kb.json's: message "<fn>: <what> at <path>", and the
 * path alone in err.path. */
static void to_box(lua_State *L, int idx, cJSON **box, const char *fn) {
  char msg[512];
  *box = kb_lua_to_cjson(L, idx, msg, sizeof msg);
  if (*box) return;
  kb_error_new(L, "yaml", "%s: %s", fn, msg);
  const char *at = strstr(msg, " at $");
  if (at) {
    lua_pushstring(L, at + 4);
    lua_setfield(L, -2, "path");
  }
  lua_error(L);
}

static int push_emitted(lua_State *L, char *text, const kb_yaml_error *err, const char *fn) {
  if (!text) return kb_error_raise(L, "yaml", "%s: %s", fn, err->message);
  lua_pushstring(L, text);
  free(text);
  return 1;
}

/* kb.yaml.encode(value) -> YAML text of one document (block style, keys
 * sorted, 2-space indent). */
static int l_encode(lua_State *L) {
  luaL_checkany(L, 1);
  cJSON **box = new_box(L);
  to_box(L, 1, box, "kb.yaml.encode");
  kb_yaml_error err;
  char *text = kb_yaml_emit(*box, &err);
  cJSON_Delete(*box);
  *box = NULL;
  return push_emitted(L, text, &err, "kb.yaml.encode");
}

/* kb.yaml.encode_all(list) -> every element as a document, each starting
 * with "---" ("" for an empty list). */
static int l_encode_all(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  cJSON **box = new_box(L);
  to_box(L, 1, box, "kb.yaml.encode_all");
  if (cJSON_IsObject(*box) && !(*box)->child) { /* {}: an empty list */
    (*box)->type = cJSON_Array;
  }
  luaL_argcheck(L, cJSON_IsArray(*box), 1, "expected a list of documents");
  kb_yaml_error err;
  char *text = kb_yaml_emit_all(*box, &err);
  cJSON_Delete(*box);
  *box = NULL;
  return push_emitted(L, text, &err, "kb.yaml.encode_all");
}

/* kb.yaml.array([t]) -> t (or a new table) marked as a sequence, so that
 * it encodes as one even when empty. */
static int l_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  else luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  kb_mark_array(L, 1);
  return 1;
}

int luaopen_kb_yaml(lua_State *L) {
  static const luaL_Reg box_meta[] = {{"__gc", box_gc}, {NULL, NULL}};
  static const luaL_Reg funcs[] = {
      {"decode", l_decode},
      {"decode_all", l_decode_all},
      {"encode", l_encode},
      {"encode_all", l_encode_all},
      {"array", l_array},
      {NULL, NULL},
  };
  kb_new_class(L, DOC_BOX, NULL, box_meta);
  luaL_newlib(L, funcs);
  kb_push_null(L);
  lua_setfield(L, -2, "null");
  return 1;
}
