/* Shared by the fuzz targets that drive Lua: one Lua state per process, a
 * checker function compiled once from Lua source, and a call that aborts
 * (so libFuzzer reports a crash) when the checker raises. Header-only: each
 * target is one executable. */
#ifndef KB_FUZZ_LUA_H
#define KB_FUZZ_LUA_H

#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kb/lua_modules.h"

/* Prepends the source tree's lua/ folder to package.path. */
static inline void fuzz_lua_path(lua_State *L) {
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", KB_LUA_SOURCE_DIR, KB_LUA_SOURCE_DIR);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
}

/* Compiles `src` (a chunk returning the checker function) and leaves the
 * checker in the registry; returns its reference. Aborts on failure: that
 * is a broken target, not a finding. */
static inline int fuzz_lua_checker(lua_State *L, const char *src) {
  if (luaL_loadstring(L, src) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
    fprintf(stderr, "fuzz: checker setup failed: %s\n", lua_tostring(L, -1));
    abort();
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

static inline int fuzz_lua_traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Calls the checker with the input as a string; a raised error means the
 * checker found a violated property. */
static inline void fuzz_lua_check(lua_State *L, int ref, const char *data, size_t size) {
  int top = lua_gettop(L);
  lua_pushcfunction(L, fuzz_lua_traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  lua_pushlstring(L, data, size);
  if (lua_pcall(L, 1, 0, top + 1) != LUA_OK) {
    fprintf(stderr, "fuzz: property violated: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_settop(L, top);
}

#endif
