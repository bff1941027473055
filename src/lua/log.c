/* kb.log: the C logger (include/kb/log.h) for Lua scenarios.
 *
 *   local log = require "kb.log"
 *   log.info("run %s created in %.1f s", id, dt)  -- string.format with args
 *   log.warn(err)                                -- any value, via tostring
 *   log.level("debug")                           -- set; returns the previous
 *   log.level()                                  -- current: "info"
 *   log.enabled("debug")                         -- skip costly messages
 *   log.redact(text [, secrets])                 -- kb_redact for reports (secrets: texts
 *                                                   replaced by "<redacted>" first)
 *   log.replace_secrets(text, secrets)           -- only the texts replaced
 *
 * Every line is redacted (see include/kb/redact.h) before it reaches
 * stderr. Logging never waits for a full stderr (include/kb/log.h): a line
 * stderr cannot take at once is queued for a writer thread. */
#include <lauxlib.h>
#include <lualib.h>

#include "kb/log.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/redact.h"

static kb_log_level check_level(lua_State *L, int arg) {
  const char *name = luaL_checkstring(L, arg);
  kb_log_level level;
  if (kb_log_level_parse(name, &level) != 0)
    return luaL_argerror(L, arg, lua_pushfstring(L,
      "unknown log level '%s' (expected debug, info, warn, error or off)", name));
  return level;
}

/* The message: string.format(...) (upvalue 1) when there are arguments
 * after the format, else tostring of the single value. */
static int log_at(lua_State *L, kb_log_level level) {
  int n = lua_gettop(L);
  /* bad arguments raise at every level, not only when the level is on */
  if (n > 1) luaL_checkstring(L, 1);
  else luaL_checkany(L, 1);
  if (!kb_log_enabled(level)) return 0;
  size_t len;
  const char *msg;
  if (n > 1) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, 1);
    msg = lua_tolstring(L, -1, &len);
  } else {
    msg = luaL_tolstring(L, 1, &len);
  }
  kb_log_msg(level, msg, len);
  return 0;
}

static int l_debug(lua_State *L) { return log_at(L, KB_LOG_DEBUG); }
static int l_info(lua_State *L) { return log_at(L, KB_LOG_INFO); }
static int l_warn(lua_State *L) { return log_at(L, KB_LOG_WARN); }
static int l_error(lua_State *L) { return log_at(L, KB_LOG_ERROR); }

/* level([name]) -> previous (or current) level name */
static int l_level(lua_State *L) {
  kb_log_level old = kb_log_get_level();
  if (!lua_isnoneornil(L, 1)) kb_log_set_level(check_level(L, 1));
  lua_pushstring(L, kb_log_level_name(old));
  return 1;
}

static int l_enabled(lua_State *L) {
  lua_pushboolean(L, kb_log_enabled(check_level(L, 1)));
  return 1;
}

/* The index of an optional list argument (a table), or 0 when absent. */
static int optional_list(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  return idx;
}

/* log.redact(text [, secrets]): the pattern rules, after every string of
 * the list secrets (in its order) is replaced by "<redacted>". */
static int l_redact(lua_State *L) {
  luaL_checkstring(L, 1);
  kb_lua_push_scrubbed(L, 1, optional_list(L, 2));
  return 1;
}

/* log.replace_secrets(text, secrets): only the list's strings replaced by
 * "<redacted>", not the pattern rules: what kb.secrets' wrappers of the
 * leveled functions do before the logger applies the rules itself. */
static int l_replace_secrets(lua_State *L) {
  luaL_checkstring(L, 1);
  kb_lua_push_replaced(L, 1, optional_list(L, 2));
  return 1;
}

int luaopen_kb_log(lua_State *L) {
  static const luaL_Reg formatted[] = {
    {"debug", l_debug}, {"info", l_info}, {"warn", l_warn}, {"error", l_error}, {NULL, NULL}};
  static const luaL_Reg plain[] = {
    {"level", l_level}, {"enabled", l_enabled}, {"redact", l_redact},
    {"replace_secrets", l_replace_secrets}, {NULL, NULL}};
  lua_newtable(L);
  luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 0);
  lua_getfield(L, -1, "format");
  lua_remove(L, -2);
  luaL_setfuncs(L, formatted, 1);
  luaL_setfuncs(L, plain, 0);
  return 1;
}
