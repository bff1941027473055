/* kb error objects: tables {class=, message=, ...} with a __tostring that
 * prints "class: message". They live in the runtime layer because the task
 * scheduler raises one (cancellation); bindings use them via lua_util.h. */
#include <stdarg.h>

#include <lauxlib.h>

#include "kb/lua_util.h"

static int error_tostring(lua_State *L) {
  lua_getfield(L, 1, "class");
  lua_getfield(L, 1, "message");
  lua_pushfstring(L, "%s: %s", luaL_optstring(L, -2, "error"),
                  luaL_optstring(L, -1, "(no message)"));
  return 1;
}

void kb_error_push_meta(lua_State *L) {
  if (luaL_newmetatable(L, "kb.error")) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "kb.error");
    lua_setfield(L, -2, "__name");
  }
}

static int error_newv(lua_State *L, const char *cls, const char *fmt, va_list ap) {
  lua_createtable(L, 0, 4);
  lua_pushstring(L, cls);
  lua_setfield(L, -2, "class");
  lua_pushvfstring(L, fmt, ap);
  lua_setfield(L, -2, "message");
  kb_error_push_meta(L);
  lua_setmetatable(L, -2);
  return lua_gettop(L);
}

int kb_error_new(lua_State *L, const char *cls, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int idx = error_newv(L, cls, fmt, ap);
  va_end(ap);
  return idx;
}

int kb_error_raise(lua_State *L, const char *cls, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_newv(L, cls, fmt, ap);
  va_end(ap);
  return lua_error(L);
}

