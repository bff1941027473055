/* cJSON trees <-> Lua values, with the conventions of kb.json (see
 * kb/lua_util.h): null is kb_push_null's sentinel, arrays carry the
 * "kb.array" metatable. Used by kb.yaml and by every binding that hands
 * documents (API responses, simulator objects) to Lua. */
#ifndef KB_LUA_CJSON_H
#define KB_LUA_CJSON_H

#include <stddef.h>

#include <cjson/cJSON.h>
#include <lua.h>

/* Pushes node as a Lua value:
 *   object -> table (a key present twice: the later one wins)
 *   array  -> table 1..n marked "kb.array"
 *   null   -> the null sentinel; true/false -> booleans; string -> string
 *   number -> integer when the double is integral and within +-2^53,
 *             float otherwise
 *   Raw    -> the number its text spells, exactly (lua_stringtonumber: an
 *             integer when it fits int64, else a float); Raw text that is
 *             not a number is pushed as a string.
 * Raises a Lua error only when the Lua stack cannot grow (absurd depth). */
void kb_lua_push_cjson(lua_State *L, const cJSON *node);

/* Converts the Lua value at idx to a new cJSON tree (the caller frees it),
 * by the rules of kb.json.encode (src/lua/json_encode.c):
 *   nil, null sentinel -> null; booleans; strings (valid UTF-8, no NUL)
 *   integers -> numbers, or Raw nodes with the exact decimal text beyond
 *   +-2^53 (note that cJSON_Print also rounds doubles of 16+ digits);
 *   floats -> numbers (inf and nan included: the YAML emitter writes
 *   .inf/.nan, cJSON_Print writes null)
 *   tables: marked "kb.array" -> array t[1..max] (holes become null; string
 *   keys and very sparse arrays refused); marked by kb.json.object ->
 *   object; keys exactly 1..n -> array; otherwise an object with its keys
 *   sorted (deterministic output), integer keys written in decimal; an
 *   empty unmarked table is an object.
 * Anything else (functions, other userdata, threads, tables mixing string
 * and integer keys, float or boolean keys, cycles, nesting deeper than
 * 512) returns NULL with a message in errbuf that ends with the place in
 * kb.json's notation, e.g. "cannot encode a function at $.spec.args[2]".
 * Never raises (except on Lua memory errors). */
cJSON *kb_lua_to_cjson(lua_State *L, int idx, char *errbuf, size_t errlen);

#endif
