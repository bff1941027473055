/* Placeholder until the kb.http binding lands; replaced by its real file. */
#include <lauxlib.h>
#include "kb/lua_modules.h"
int luaopen_kb_http(lua_State *L) { return luaL_error(L, "kb.http is not built yet"); }
