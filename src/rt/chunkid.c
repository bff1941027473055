/* Full file names in Lua messages.
 *
 * Lua shortens a chunk's name in messages and tracebacks to LUA_IDSIZE
 * characters, keeping the tail behind "...": a scenario deep in a checkout
 * reports "...iments/long/name/syntax.lua:2:", which is not a path a user
 * can open. These helpers put the full names back, so every error kbrun
 * prints names its file the way the standards ask (file:line). */
#include <string.h>

#include <lauxlib.h>

#include "kb/lua_util.h"

static int is_shortened(const char *id) { return strncmp(id, "...", 3) == 0; }

/* Replaces the string on top of L (the current message) by one where every
 * "short:" is "full:". */
static void replace_top(lua_State *L, const char *shortid, const char *full) {
  lua_pushfstring(L, "%s:", shortid);
  lua_pushfstring(L, "%s:", full);
  luaL_gsub(L, lua_tostring(L, -3), lua_tostring(L, -2), lua_tostring(L, -1));
  lua_replace(L, -4);
  lua_pop(L, 2);
}

const char *kb_chunkid_expand(lua_State *L, lua_State *co, const char *msg) {
  lua_pushstring(L, msg);
  lua_Debug ar;
  for (int level = 0; lua_getstack(co, level, &ar); level++) {
    if (!lua_getinfo(co, "S", &ar)) break;
    if (ar.source[0] == '@' && is_shortened(ar.short_src))
      replace_top(L, ar.short_src, ar.source + 1);
  }
  return lua_tostring(L, -1);
}

const char *kb_chunkid_expand_file(lua_State *L, const char *msg, const char *path) {
  lua_pushstring(L, msg);
  if (!msg || !path || !is_shortened(msg)) return lua_tostring(L, -1);
  /* The shortened name is a tail of path followed by ":line:". */
  size_t plen = strlen(path);
  for (const char *colon = strchr(msg + 3, ':'); colon; colon = strchr(colon + 1, ':')) {
    size_t tail = (size_t)(colon - (msg + 3));
    if (tail <= plen && memcmp(msg + 3, path + plen - tail, tail) == 0) {
      lua_pushfstring(L, "%s%s", path, colon);
      lua_replace(L, -2);
      break;
    }
  }
  return lua_tostring(L, -1);
}

/* loadfile as the standard one, with the file's full name in a syntax
 * error; the original function is upvalue 1. */
static int loadfile_full_names(lua_State *L) {
  int nargs = lua_gettop(L);
  lua_pushvalue(L, 1); /* the file name, kept below the call */
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_rotate(L, 1, 2); /* name, loadfile, args... */
  lua_call(L, nargs, LUA_MULTRET);
  int nres = lua_gettop(L) - 1;
  if (nres == 2 && lua_isnil(L, -2) && lua_type(L, -1) == LUA_TSTRING &&
      lua_type(L, 1) == LUA_TSTRING) {
    kb_chunkid_expand_file(L, lua_tostring(L, -1), lua_tostring(L, 1));
    lua_replace(L, -2);
  }
  return nres;
}

void kb_chunkid_install(lua_State *L) {
  lua_getglobal(L, "loadfile");
  lua_pushcclosure(L, loadfile_full_names, 1);
  lua_setglobal(L, "loadfile");
}
