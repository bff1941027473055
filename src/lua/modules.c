/* The table of C modules every kbrun Lua state can require. */
#include <lauxlib.h>

#include "kb/lua_modules.h"

static const luaL_Reg kb_modules[] = {
  {"kb.core", luaopen_kb_core},
  {"kb.json", luaopen_kb_json},
  {"kb.csv.codec", luaopen_kb_csv_codec},
  {"kb.yaml", luaopen_kb_yaml},
  {"kb.hist", luaopen_kb_hist},
  {"kb.http", luaopen_kb_http},
  {"kb.httpd", luaopen_kb_httpd},
  {"kb.fs", luaopen_kb_fs},
  {"kb.log", luaopen_kb_log},
  {"kb.sim", luaopen_kb_sim},
  {"kb.process", luaopen_kb_process},
  {"kb.db", luaopen_kb_db},
  {NULL, NULL}
};

void kb_lua_preload(lua_State *L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  for (const luaL_Reg *m = kb_modules; m->name; m++) {
    lua_pushcfunction(L, m->func);
    lua_setfield(L, -2, m->name);
  }
  lua_pop(L, 1);
}
