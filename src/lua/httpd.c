/* Placeholder until the kb.httpd binding lands; replaced by its real file. */
#include <lauxlib.h>
#include "kb/lua_modules.h"
int luaopen_kb_httpd(lua_State *L) { return luaL_error(L, "kb.httpd is not built yet"); }
