/* Shared by the files of kb.json: json.c (the per-call state, the markers
 * and the module), json_encode.c and json_decode.c. Not a public header
 * (kb/json.h is the codec's). */
#ifndef KB_LJSON_INTERNAL_H
#define KB_LJSON_INTERNAL_H

#include <stddef.h>

#include <lua.h>

#include "kb/buf.h"

/* Upper bound for opts.max_depth: encoding and decoding recurse in C once
 * per level, so this bounds their C stack use (well under 1 MiB). */
#define JSON_DEPTH_CAP 4096

/* Upvalues shared by every function of the module. */
#define UV_ARRAY_MT lua_upvalueindex(1)
#define UV_OBJECT_MT lua_upvalueindex(2)

/* One nesting level. Encoding: the table being written and the key being
 * written (for cycle checks and error paths). Decoding: the container kind,
 * where its pending members start on the Lua stack, its table once made and
 * the number of array elements already stored in it. */
typedef struct frame {
  const void *table;
  const char *key; /* string key, when kind == KEY_STRING */
  size_t keylen;
  lua_Integer index; /* integer key / elements stored */
  int kind;
  int first, tidx; /* decoding: stack indices (tidx 0: no table yet) */
} frame;

enum { KEY_NONE, KEY_STRING, KEY_INTEGER, DEC_OBJECT, DEC_ARRAY };

typedef struct key_entry {
  const char *s; /* NULL for an integer key */
  size_t len;
  lua_Integer i;
} key_entry;

/* Per-call working memory, owned by a userdata so that an error raised
 * half-way (by us or by Lua running out of memory) still frees it. */
typedef struct jstate {
  kb_buf buf; /* encode: output; decode: unescaped strings */
  frame *frames;
  size_t frames_cap;
  key_entry *keys; /* stack of per-object key lists (sort_keys) */
  size_t nkeys, keys_cap;
} jstate;

/* json.c: the per-call state (a userdata on the stack; freed early by
 * kb__ljson_state_release once the result is out) and the options shared
 * by encode and decode. */
void kb__ljson_state_release(jstate *st);
jstate *kb__ljson_state_new(lua_State *L);
/* Grows *p (*cap elements of size) to hold need; 0, or -1 out of memory. */
int kb__ljson_grow(void **p, size_t *cap, size_t need, size_t size);
frame *kb__ljson_state_frame(lua_State *L, jstate *st, unsigned depth, const char *fn);
/* opts.max_depth, checked against JSON_DEPTH_CAP. */
unsigned kb__ljson_opt_depth(lua_State *L, int opts);

/* json.encode (json_encode.c), json.decode (json_decode.c) */
int kb__ljson_encode(lua_State *L);
int kb__ljson_decode(lua_State *L);

#endif
