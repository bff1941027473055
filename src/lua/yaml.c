/* Placeholder until the kb.yaml binding lands; replaced by its real file. */
#include <lauxlib.h>
#include "kb/lua_modules.h"
int luaopen_kb_yaml(lua_State *L) { return luaL_error(L, "kb.yaml is not built yet"); }
