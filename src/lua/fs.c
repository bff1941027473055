/* Placeholder until the kb.fs binding lands; replaced by its real file. */
#include <lauxlib.h>
#include "kb/lua_modules.h"
int luaopen_kb_fs(lua_State *L) { return luaL_error(L, "kb.fs is not built yet"); }
