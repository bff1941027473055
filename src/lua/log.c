/* Placeholder until the kb.log binding lands; replaced by its real file. */
#include <lauxlib.h>
#include "kb/lua_modules.h"
int luaopen_kb_log(lua_State *L) { return luaL_error(L, "kb.log is not built yet"); }
