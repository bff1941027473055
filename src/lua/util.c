/* Helpers shared by the Lua bindings: option tables, classes, null/array,
 * scrubbing. */
#include "kb/lua_util.h"

#include <stdio.h>
#include <string.h>

#include "kb/json.h"
#include "kb/redact.h"

static int opt_field(lua_State *L, int idx, const char *key, int type) {
  if (lua_isnoneornil(L, idx)) return 0;
  int t = lua_getfield(L, idx, key);
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  if (t != type && !(type == LUA_TNUMBER && lua_isnumber(L, -1))) {
    luaL_error(L, "option '%s' must be a %s, got %s", key, lua_typename(L, type),
               luaL_typename(L, -1));
  }
  return 1;
}

const char *kb_opt_string(lua_State *L, int idx, const char *key, const char *def) {
  if (!opt_field(L, idx, key, LUA_TSTRING)) return def;
  const char *s = lua_tostring(L, -1);
  lua_pop(L, 1); /* still anchored by the options table */
  return s;
}

lua_Number kb_opt_number(lua_State *L, int idx, const char *key, lua_Number def) {
  if (!opt_field(L, idx, key, LUA_TNUMBER)) return def;
  lua_Number n = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return n;
}

lua_Integer kb_opt_integer(lua_State *L, int idx, const char *key, lua_Integer def) {
  if (!opt_field(L, idx, key, LUA_TNUMBER)) return def;
  int isint = 0;
  lua_Integer n = lua_tointegerx(L, -1, &isint);
  if (!isint) luaL_error(L, "option '%s' must be an integer", key);
  lua_pop(L, 1);
  return n;
}

int kb_opt_boolean(lua_State *L, int idx, const char *key, int def) {
  if (!opt_field(L, idx, key, LUA_TBOOLEAN)) return def;
  int b = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return b;
}

void kb_new_class(lua_State *L, const char *name, const luaL_Reg *methods,
                  const luaL_Reg *meta) {
  if (!luaL_newmetatable(L, name)) {
    lua_pop(L, 1);
    return;
  }
  if (meta) luaL_setfuncs(L, meta, 0);
  if (methods) {
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
}

void kb_push_null(lua_State *L) { lua_pushlightuserdata(L, NULL); }

int kb_is_null(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TLIGHTUSERDATA && lua_touserdata(L, idx) == NULL;
}

void kb_mark_array(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (luaL_newmetatable(L, "kb.array")) {
    lua_pushliteral(L, "kb.array");
    lua_setfield(L, -2, "__name");
  }
  lua_setmetatable(L, idx);
}

int kb_is_marked_array(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  luaL_getmetatable(L, "kb.array");
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

/* ---- error paths of the document converters ---------------------------------------------- */

static int is_identifier(const char *s, size_t len) {
  if (len == 0 || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return 0;
  }
  return 1;
}

size_t kb_path_key(char out[KB_PATH_STEP], const char *s, size_t len) {
  if (is_identifier(s, len)) {
    return (size_t)snprintf(out, KB_PATH_STEP, ".%.*s", (int)(len > 200 ? 200 : len), s);
  }
  /* Keep messages short and printable: a bad key may be long or binary. */
  static const char hex[] = "0123456789abcdef";
  size_t n = len > 48 ? 48 : len, w = 0;
  int utf8 = kb_json_utf8_bad(s, len) == len;
  out[w++] = '[';
  out[w++] = '"';
  for (size_t i = 0; i < n; i++) { /* at most 4 bytes each: 2 + 192 + 3 + 2 < KB_PATH_STEP */
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      out[w++] = '\\';
      out[w++] = (char)c;
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) {
      out[w++] = '\\';
      out[w++] = 'x';
      out[w++] = hex[c >> 4];
      out[w++] = hex[c & 15];
    } else {
      out[w++] = (char)c;
    }
  }
  if (n < len) w += (size_t)snprintf(out + w, KB_PATH_STEP - w, "...");
  w += (size_t)snprintf(out + w, KB_PATH_STEP - w, "\"]");
  return w;
}

size_t kb_path_stack_key(lua_State *L, int idx, char out[KB_PATH_STEP]) {
  int w;
  switch (lua_type(L, idx)) {
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    return kb_path_key(out, s, len);
  }
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx))
      w = snprintf(out, KB_PATH_STEP, "[%lld]", (long long)lua_tointeger(L, idx));
    else
      w = snprintf(out, KB_PATH_STEP, "[%.14g]", (double)lua_tonumber(L, idx));
    break;
  case LUA_TBOOLEAN:
    w = snprintf(out, KB_PATH_STEP, "[%s]", lua_toboolean(L, idx) ? "true" : "false");
    break;
  default:
    w = snprintf(out, KB_PATH_STEP, "[<%s>]", luaL_typename(L, idx));
    break;
  }
  return (size_t)w;
}

/* ---- scrubbing (kb.secrets.scrub, kb.csv's cells) ------------------------------------------- */

#define REDACTED_REGISTERED "<redacted>"

/* Replaces every occurrence of secret (left to right, not overlapping) in
 * the string at stack top by REDACTED_REGISTERED; leaves the result there. */
static void replace_all(lua_State *L, const char *secret, size_t slen) {
  size_t len;
  const char *text = lua_tolstring(L, -1, &len);
  const char *hit = slen ? memmem(text, len, secret, slen) : NULL;
  if (!hit) return;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  const char *p = text, *end = text + len;
  while (hit) {
    luaL_addlstring(&b, p, (size_t)(hit - p));
    luaL_addstring(&b, REDACTED_REGISTERED);
    p = hit + slen;
    hit = memmem(p, (size_t)(end - p), secret, slen);
  }
  luaL_addlstring(&b, p, (size_t)(end - p));
  luaL_pushresult(&b);
  lua_remove(L, -2);
}

void kb_lua_push_replaced(lua_State *L, int idx, int list_idx) {
  idx = lua_absindex(L, idx);
  lua_pushvalue(L, idx);
  if (!list_idx) return;
  list_idx = lua_absindex(L, list_idx);
  lua_Integer n = (lua_Integer)lua_rawlen(L, list_idx);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, list_idx, i) == LUA_TSTRING) {
      size_t slen;
      const char *secret = lua_tolstring(L, -1, &slen);
      lua_insert(L, -2); /* the secret stays below the text while it is replaced */
      replace_all(L, secret, slen);
      lua_remove(L, -2);
    } else {
      lua_pop(L, 1);
    }
  }
}

void kb_lua_push_scrubbed(lua_State *L, int idx, int list_idx) {
  kb_lua_push_replaced(L, idx, list_idx);
  size_t len;
  const char *in = lua_tolstring(L, -1, &len);
  luaL_Buffer b;
  size_t cap = len + 64;
  char *out = luaL_buffinitsize(L, &b, cap);
  size_t n = kb_redact(in, len, out, cap);
  if (n >= cap) {
    out = luaL_prepbuffsize(&b, n + 1);
    kb_redact(in, len, out, n + 1);
  }
  if (n == len && memcmp(out, in, len) == 0) { /* unchanged: the text itself */
    luaL_pushresultsize(&b, 0);
    lua_pop(L, 1);
    return;
  }
  luaL_pushresultsize(&b, n);
  lua_remove(L, -2);
}
