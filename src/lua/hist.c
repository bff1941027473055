/* Placeholder until the kb.hist binding lands; replaced by its real file. */
#include <lauxlib.h>
#include "kb/lua_modules.h"
int luaopen_kb_hist(lua_State *L) { return luaL_error(L, "kb.hist is not built yet"); }
