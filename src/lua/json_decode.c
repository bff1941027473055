/* kb.json.decode: JSON text to Lua values, built from the codec's SAX-like
 * callbacks (src/codec/json.c); the mapping is in json.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "kb/json.h"
#include "kb/lua_util.h"
#include "ljson_internal.h"

/* ---- decoding ------------------------------------------------------------ */

/* A container's members wait on the Lua stack until it ends (or DEC_CHUNK
 * slots pile up), then go into a table created with the right size: no
 * rehashing while it fills, which is most of the cost of building tables
 * one key at a time. */
#define DEC_CHUNK 128
#define DEC_ROOM 256

typedef struct decoder {
  lua_State *L;
  jstate *st;
  unsigned depth;
  int room; /* stack slots known to be free (an underestimate after pops) */
  int skip_set; /* stack index of opts.skip, or 0 */
} decoder;

static inline void dec_room(decoder *d) {
  if (--d->room < 0) {
    luaL_checkstack(d->L, DEC_ROOM, "kb.json.decode: document too large or too deep");
    d->room = DEC_ROOM - 1;
  }
}

/* Moves the pending members of frame f into its table (made on first use,
 * sized for them) and leaves the table on top of the stack. */
static void dec_flush(decoder *d, frame *f) {
  lua_State *L = d->L;
  int top = lua_gettop(L), n = top - f->first + 1;
  luaL_checkstack(L, 3, "kb.json.decode: document too large or too deep"); /* transients */
  if (!f->tidx) {
    dec_room(d); /* the table stays: it becomes a member of the parent */
    if (f->kind == DEC_ARRAY) {
      lua_createtable(L, n, 0);
      lua_pushvalue(L, UV_ARRAY_MT);
      lua_setmetatable(L, -2);
    } else {
      lua_createtable(L, 0, n / 2);
    }
    lua_insert(L, f->first);
    f->tidx = f->first++;
    top++;
  }
  if (f->kind == DEC_ARRAY) {
    /* rawseti pops, so fill from the last element back. */
    lua_Integer base = f->index;
    f->index += n;
    for (lua_Integer i = f->index; i > base; i--) lua_rawseti(L, f->tidx, i);
  } else {
    /* In document order, so that the last of duplicate keys wins. */
    for (int i = f->first; i < top; i += 2) {
      lua_pushvalue(L, i);
      lua_pushvalue(L, i + 1);
      lua_rawset(L, f->tidx);
    }
    lua_settop(L, f->tidx);
  }
  f->first = f->tidx + 1;
}

/* Called after each complete member (an element, or a key and its value). */
static int dec_member(decoder *d) {
  if (!d->depth) return 0;
  frame *f = &d->st->frames[d->depth - 1];
  if (lua_gettop(d->L) - f->first + 1 >= DEC_CHUNK) dec_flush(d, f);
  return 0;
}

static int dec_null(void *ud) {
  decoder *d = ud;
  dec_room(d);
  kb_push_null(d->L);
  return dec_member(d);
}

static int dec_bool(void *ud, int v) {
  decoder *d = ud;
  dec_room(d);
  lua_pushboolean(d->L, v);
  return dec_member(d);
}

static int dec_number(void *ud, const char *s, size_t len, kb_json_numkind kind) {
  decoder *d = ud;
  int64_t i;
  dec_room(d);
  if (kind == KB_JSON_INTEGER && kb_json_number_int64(s, len, &i) == 0)
    lua_pushinteger(d->L, (lua_Integer)i);
  else
    lua_pushnumber(d->L, (lua_Number)kb_json_number_double(s, len));
  return dec_member(d);
}

static int dec_string(void *ud, const char *s, size_t len) {
  decoder *d = ud;
  dec_room(d);
  lua_pushlstring(d->L, s, len);
  return dec_member(d);
}

static int dec_key(void *ud, const char *s, size_t len) {
  decoder *d = ud;
  dec_room(d);
  lua_pushlstring(d->L, s, len);
  if (d->skip_set) {
    lua_pushvalue(d->L, -1);
    int skip = lua_rawget(d->L, d->skip_set) != LUA_TNIL;
    lua_pop(d->L, skip ? 2 : 1); /* a skipped member leaves no key behind */
    if (skip) return KB_JSON_SKIP_MEMBER;
  }
  return 0;
}

static int dec_begin(decoder *d, int kind) {
  frame *f = kb__ljson_state_frame(d->L, d->st, d->depth, "kb.json.decode");
  f->kind = kind;
  f->index = 0;
  f->tidx = 0;
  f->first = lua_gettop(d->L) + 1;
  d->depth++;
  return 0;
}

static int dec_end(void *ud) {
  decoder *d = ud;
  dec_flush(d, &d->st->frames[d->depth - 1]);
  d->depth--;
  return dec_member(d);
}

static int dec_begin_object(void *ud) { return dec_begin(ud, DEC_OBJECT); }
static int dec_begin_array(void *ud) { return dec_begin(ud, DEC_ARRAY); }

/* Decodes text (index 1) with opts (index 2: a table or nil) on L,
 * using the working memory st. Leaves the value on top (or raises). */
static int decode_on(lua_State *L, jstate *st) {
  size_t len;
  const char *text = lua_tolstring(L, 1, &len);
  unsigned max_depth = kb__ljson_opt_depth(L, 2);
  lua_Integer max_size = kb_opt_integer(L, 2, "max_size", -1);
  if (max_size >= 0 && (lua_Integer)len > max_size)
    return kb_error_raise(L, "json", "kb.json.decode: document of %I bytes exceeds max_size (%I)",
                          (lua_Integer)len, max_size);
  decoder d = {.L = L, .st = st};
  if (lua_istable(L, 2) && lua_getfield(L, 2, "skip") != LUA_TNIL) {
    if (!lua_istable(L, -1)) luaL_error(L, "option 'skip' must be a set of keys ({key = true})");
    d.skip_set = lua_gettop(L);
  }
  kb_json_handler h = {
    .on_null = dec_null,
    .on_bool = dec_bool,
    .on_number = dec_number,
    .on_string = dec_string,
    .on_begin_object = dec_begin_object,
    .on_key = dec_key,
    .on_end_object = dec_end,
    .on_begin_array = dec_begin_array,
    .on_end_array = dec_end,
    .max_depth = max_depth,
    .scratch = &st->buf, /* the callbacks may raise Lua errors */
  };
  kb_json_error err;
  if (kb_json_parse(text, len, &h, &d, &err)) {
    kb_error_new(L, "json", "kb.json.decode: %s at byte %I (line %I, column %I)", err.message,
                 (lua_Integer)err.offset + 1, (lua_Integer)err.line, (lua_Integer)err.column);
    lua_pushinteger(L, (lua_Integer)err.offset + 1);
    lua_setfield(L, -2, "offset");
    lua_pushinteger(L, (lua_Integer)err.line);
    lua_setfield(L, -2, "line");
    lua_pushinteger(L, (lua_Integer)err.column);
    lua_setfield(L, -2, "column");
    return lua_error(L);
  }
  return 1;
}

/* ---- where decoding runs -------------------------------------------------
 * The decoder keeps a container's members on the Lua stack (up to
 * DEC_ROOM slots at a time). Run on the caller's coroutine, that grows its
 * stack at every decode, and the collector shrinks it again at its next
 * cycle: with a thousand tasks polling, most decodes paid a stack
 * reallocation and every cycle cleared the grown stacks (bench/kfp.md,
 * session 10). So decoding runs on one long-lived thread of the state,
 * with one reused working state, and only the result moves to the caller.
 * A decode that meets that thread busy (a finalizer the collector runs
 * mid-way through a decode may decode) decodes on its caller's stack. */

static const char DECODER_KEY = 'd';

typedef struct {
  lua_State *thread; /* anchored by this userdata's user value */
  jstate st;         /* reused; its buffers are kept between decodes */
  int busy;
} shared_decoder;

/* Working memory over this is given back after the decode that grew it. */
#define KEEP_SCRATCH (256 * 1024)

static int shared_gc(lua_State *L) {
  shared_decoder *s = lua_touserdata(L, 1);
  kb__ljson_state_release(&s->st);
  return 0;
}

/* Runs on the shared thread: text, opts, the struct (a light userdata). */
static int decode_shared(lua_State *T) {
  shared_decoder *s = lua_touserdata(T, 3);
  lua_settop(T, 2);
  return decode_on(T, &s->st);
}

static shared_decoder *shared_of(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &DECODER_KEY) == LUA_TUSERDATA) {
    shared_decoder *s = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return s;
  }
  lua_pop(L, 1);
  shared_decoder *s = lua_newuserdatauv(L, sizeof *s, 1);
  memset(s, 0, sizeof *s);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, shared_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  s->thread = lua_newthread(L);
  lua_setiuservalue(L, -2, 1); /* the thread lives as long as the struct */
  lua_rawsetp(L, LUA_REGISTRYINDEX, &DECODER_KEY);
  /* the thread's slot 1 holds, for good, the decoder with the caller's
   * upvalues (the array and object marks) */
  lua_pushvalue(L, UV_ARRAY_MT);
  lua_pushvalue(L, UV_OBJECT_MT);
  lua_pushcclosure(L, decode_shared, 2);
  lua_xmove(L, s->thread, 1);
  return s;
}

/* json.decode(text [, opts]) -> value */
int kb__ljson_decode(lua_State *L) {
  luaL_checkstring(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  shared_decoder *s = shared_of(L);
  if (s->busy) {
    jstate *st = kb__ljson_state_new(L); /* at 3; freed by its __gc if we raise */
    decode_on(L, st);
    kb__ljson_state_release(st);
    return 1;
  }
  lua_State *T = s->thread;
  s->busy = 1;
  lua_pushvalue(T, 1);
  lua_xmove(L, T, 2); /* text, opts */
  lua_pushlightuserdata(T, s);
  int rc = lua_pcall(T, 3, 1, 0);
  s->busy = 0;
  if (s->st.buf.cap > KEEP_SCRATCH) kb_buf_free(&s->st.buf);
  lua_xmove(T, L, 1); /* the value, or the error */
  lua_settop(T, 1);
  if (rc != LUA_OK) return lua_error(L);
  return 1;
}
