/* Helpers shared by the Lua bindings (src/lua/). */
#ifndef KB_LUA_UTIL_H
#define KB_LUA_UTIL_H

#include <lua.h>
#include <lauxlib.h>

/* Error objects. Runtime failures (a refused connection, a malformed
 * document) are raised as a table
 *     { class = "connect", message = "...", [extra fields] }
 * whose __tostring gives "class: message". Scenarios branch on err.class;
 * printing it gives the human message. kb_error_new pushes the table and
 * returns its index; the caller may add fields, then lua_error(). */
int kb_error_new(lua_State *L, const char *cls, const char *fmt, ...);
int kb_error_raise(lua_State *L, const char *cls, const char *fmt, ...);
/* Pushes the "kb.error" metatable (creating it once). */
void kb_error_push_meta(lua_State *L);

/* Lua shortens file names in messages to a "..." tail; these push msg with
 * full names back: of every file on co's stack, or of path (a load error).
 * kb_chunkid_install makes the global loadfile do the latter. */
const char *kb_chunkid_expand(lua_State *L, lua_State *co, const char *msg);
const char *kb_chunkid_expand_file(lua_State *L, const char *msg, const char *path);
void kb_chunkid_install(lua_State *L);

/* Optional typed fields of an options table at index idx. */
const char *kb_opt_string(lua_State *L, int idx, const char *key, const char *def);
lua_Number kb_opt_number(lua_State *L, int idx, const char *key, lua_Number def);
lua_Integer kb_opt_integer(lua_State *L, int idx, const char *key, lua_Integer def);
int kb_opt_boolean(lua_State *L, int idx, const char *key, int def);

/* Creates (once) a metatable `name` with the methods in `methods` reachable
 * through __index plus the metamethods in `meta` (either may be NULL). */
void kb_new_class(lua_State *L, const char *name, const luaL_Reg *methods,
                  const luaL_Reg *meta);

/* JSON/YAML conventions shared by kb.json, kb.yaml and every binding that
 * converts documents: null is the light userdata NULL (kb.json.null), and a
 * table carrying the metatable "kb.array" is an array even when empty. */
void kb_push_null(lua_State *L);
int kb_is_null(lua_State *L, int idx);
void kb_mark_array(lua_State *L, int idx);
int kb_is_marked_array(lua_State *L, int idx);

/* Error paths of the document converters (kb.json.encode, the Lua ->
 * cJSON conversion): the step naming key s, ".name" for an identifier (cut
 * at 200 bytes), else ["..."] with quotes and backslashes escaped and the
 * bytes that are not text (controls, DEL, every byte >= 0x80 of a key that
 * is not UTF-8) as \xNN, cut at 48 bytes ("..." after). The step of the
 * key at stack index idx: a string as kb_path_key, a number [n] (floats
 * %.14g), a boolean [true], anything else [<type>]. Both write a
 * NUL-terminated step of at most KB_PATH_STEP bytes and return its length. */
#define KB_PATH_STEP 256
size_t kb_path_key(char out[KB_PATH_STEP], const char *s, size_t len);
size_t kb_path_stack_key(lua_State *L, int idx, char out[KB_PATH_STEP]);

/* Pushes the string at idx scrubbed as kb.secrets.scrub does: every
 * occurrence of each string of the list at list_idx (0: none), in list
 * order, replaced by "<redacted>", then the pattern rules (kb_redact). The
 * string itself when nothing changed (no copy, no new Lua string). */
void kb_lua_push_scrubbed(lua_State *L, int idx, int list_idx);

/* The first half of kb_lua_push_scrubbed: the list's strings replaced, no
 * pattern rules (for the logger, which applies them itself: they are not
 * idempotent, so a line must not pass them twice). */
void kb_lua_push_replaced(lua_State *L, int idx, int list_idx);

#endif
