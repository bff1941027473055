/* Placeholder until the kb.json binding lands; replaced by its real file. */
#include <lauxlib.h>
#include "kb/lua_modules.h"
int luaopen_kb_json(lua_State *L) { return luaL_error(L, "kb.json is not built yet"); }
