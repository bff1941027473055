/* The C modules kbrun preloads into every Lua state (see src/lua/modules.c).
 * One file per module under src/lua/. */
#ifndef KB_LUA_MODULES_H
#define KB_LUA_MODULES_H

#include <lua.h>

int luaopen_kb_core(lua_State *L);   /* src/lua/core.c:   tasks, clock */
int luaopen_kb_json(lua_State *L);   /* src/lua/json.c:   kb.json */
int luaopen_kb_csv_codec(lua_State *L); /* src/lua/csv.c: kb.csv's row encoder */
int luaopen_kb_yaml(lua_State *L);   /* src/lua/yaml.c:   kb.yaml */
int luaopen_kb_hist(lua_State *L);   /* src/lua/hist.c:   kb.hist */
int luaopen_kb_http(lua_State *L);   /* src/lua/http.c:   kb.http client */
int luaopen_kb_httpd(lua_State *L);  /* src/lua/httpd.c:  kb.httpd loopback server */
int luaopen_kb_fs(lua_State *L);     /* src/lua/fs.c:     kb.fs */
int luaopen_kb_log(lua_State *L);   /* src/lua/log.c:    kb.log */
int luaopen_kb_sim(lua_State *L);   /* src/lua/sim.c:    kb.sim embedded simulator */
int luaopen_kb_process(lua_State *L); /* src/lua/process.c: kb.process child processes */
int luaopen_kb_db(lua_State *L);     /* src/lua/db.c:     kb.db results database */

/* Adds every module above to package.preload. */
void kb_lua_preload(lua_State *L);

#endif
