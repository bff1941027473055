/* kb.json: JSON for Lua scenarios, on top of the codec in src/codec/json.c.
 *
 *   local json = require "kb.json"      -- also kb.json
 *   local doc  = json.decode(text [, opts])
 *   local text = json.encode(value [, opts])
 *
 * Values map as follows:
 *   null          <-> json.null (a light userdata NULL; tables cannot hold nil)
 *   true/false    <-> booleans
 *   integers      <-> Lua integers, exactly (up to +-2^63); an integer literal
 *                     that does not fit int64, and every number with a
 *                     fraction or exponent, decodes to a float
 *   floats         -> the shortest of %.15g/%.16g/%.17g that reads back
 *                     exactly; integral floats print without ".0" (3.0 -> 3);
 *                     NaN and infinities are an error
 *   strings       <-> strings; must be valid UTF-8 in both directions
 *   arrays        <-> tables with keys 1..n; decoded arrays carry the
 *                     "kb.array" metatable so an empty one re-encodes as []
 *   objects       <-> tables with string keys; integer keys of a table that
 *                     is not a 1..n sequence become strings ("404": ...)
 *
 * A table is written as an array when it is marked (json.array) or its keys
 * are exactly 1..n; as an object otherwise (an empty unmarked table is {}).
 * A table mixing string and integer keys, or with keys of another type, is
 * an error naming the key, as are functions, userdata, threads, cycles and
 * nesting deeper than max_depth. Errors are kb error objects of class
 * "json": err.message reads e.g.
 *   kb.json.encode: cannot encode a function at $.a.b[3]
 *   kb.json.decode: unexpected character 'x' at byte 17 (line 2, column 5)
 * Encode errors carry err.path; decode errors err.offset (1-based byte
 * index into the text, like string.sub), err.line and err.column (1-based,
 * in bytes). Paths use Lua indices: $.items[1].name.
 *
 * encode options: pretty (false), indent (2; setting it implies pretty),
 *   sort_keys (true: keys in byte order, so output is deterministic; false
 *   writes them in traversal order, a little faster), max_depth (512).
 * decode options: max_depth (512), max_size (bytes, unlimited), skip (a set
 *   of keys, {pipeline_spec = true}: members so named, at any depth, are
 *   left out of the result; their text is still checked, but nothing is
 *   built for it, which is what a status poll of a large object saves).
 * Duplicate keys in a decoded object: the last one wins. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "kb/json.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"

#define JSON_STATE "kb.json.state"
#define JSON_OBJECT "kb.json.object"
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

static void state_release(jstate *st) {
  kb_buf_free(&st->buf);
  free(st->frames);
  free(st->keys);
  st->frames = NULL;
  st->keys = NULL;
  st->frames_cap = st->nkeys = st->keys_cap = 0;
}

static int state_gc(lua_State *L) {
  state_release(luaL_checkudata(L, 1, JSON_STATE));
  return 0;
}

static jstate *state_new(lua_State *L) {
  jstate *st = lua_newuserdatauv(L, sizeof *st, 0);
  memset(st, 0, sizeof *st);
  luaL_setmetatable(L, JSON_STATE);
  return st;
}

static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *q = realloc(*p, n * size);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

static frame *state_frame(lua_State *L, jstate *st, unsigned depth, const char *fn) {
  if (grow((void **)&st->frames, &st->frames_cap, (size_t)depth + 1, sizeof(frame)))
    luaL_error(L, "%s: out of memory", fn);
  return &st->frames[depth];
}

/* ---- error paths --------------------------------------------------------- */

static int is_identifier(const char *s, size_t len) {
  if (len == 0 || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return 0;
  }
  return 1;
}

static int valid_utf8(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s, *e = p + len;
  while (p < e) {
    int n = kb_json_utf8_seq(p, (size_t)(e - p));
    if (!n) return 0;
    p += n;
  }
  return 1;
}

static void path_add_string(luaL_Buffer *b, const char *s, size_t len) {
  if (is_identifier(s, len)) {
    luaL_addchar(b, '.');
    luaL_addlstring(b, s, len);
    return;
  }
  /* Keep messages short and printable: a bad key may be long or binary. */
  size_t n = len > 48 ? 48 : len;
  int utf8 = valid_utf8(s, len);
  luaL_addstring(b, "[\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      luaL_addchar(b, '\\');
      luaL_addchar(b, (char)c);
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) {
      char hex[8];
      snprintf(hex, sizeof hex, "\\x%02x", c);
      luaL_addstring(b, hex);
    } else {
      luaL_addchar(b, (char)c);
    }
  }
  if (n < len) luaL_addstring(b, "...");
  luaL_addstring(b, "\"]");
}

static void path_add_frame(luaL_Buffer *b, const frame *f) {
  if (f->kind == KEY_STRING) {
    path_add_string(b, f->key, f->keylen);
  } else if (f->kind == KEY_INTEGER) {
    char num[KB_JSON_NUMBUF];
    kb_json_format_int64(num, f->index);
    luaL_addchar(b, '[');
    luaL_addstring(b, num);
    luaL_addchar(b, ']');
  }
}

/* A key that is still on the stack (found while scanning a table). */
static void path_add_key(lua_State *L, luaL_Buffer *b, int idx) {
  char num[64];
  switch (lua_type(L, idx)) {
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    path_add_string(b, s, len);
    return;
  }
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx))
      snprintf(num, sizeof num, "[%lld]", (long long)lua_tointeger(L, idx));
    else
      snprintf(num, sizeof num, "[%.14g]", (double)lua_tonumber(L, idx));
    break;
  case LUA_TBOOLEAN:
    snprintf(num, sizeof num, "[%s]", lua_toboolean(L, idx) ? "true" : "false");
    break;
  default:
    snprintf(num, sizeof num, "[<%s>]", luaL_typename(L, idx));
    break;
  }
  luaL_addstring(b, num);
}

/* ---- encoding ------------------------------------------------------------ */

typedef struct encoder {
  lua_State *L;
  jstate *st;
  int pretty, sort, indent;
  unsigned depth, max_depth;
} encoder;

/* Raises "kb.json.encode: <what> at <path>". The path is the keys of the
 * frames in use, plus the key at stack index keyidx when it is not 0. */
static int enc_error(encoder *e, int keyidx, const char *fmt, ...) {
  lua_State *L = e->L;
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  int what = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '$');
  /* Deep paths keep their ends: the middle rarely locates anything. */
  unsigned n = e->depth, head = n > 24 ? 10 : n, tail = n > 24 ? 10 : 0;
  for (unsigned i = 0; i < head; i++) path_add_frame(&b, &e->st->frames[i]);
  if (tail) {
    luaL_addstring(&b, "...");
    for (unsigned i = n - tail; i < n; i++) path_add_frame(&b, &e->st->frames[i]);
  }
  if (keyidx) path_add_key(L, &b, keyidx);
  luaL_pushresult(&b);
  state_release(e->st);
  kb_error_new(L, "json", "kb.json.encode: %s at %s", lua_tostring(L, what),
               lua_tostring(L, what + 1));
  lua_pushvalue(L, what + 1);
  lua_setfield(L, -2, "path");
  return lua_error(L);
}

static void enc_oom(encoder *e) {
  state_release(e->st);
  luaL_error(e->L, "kb.json.encode: out of memory");
}

static inline void out(encoder *e, const char *s, size_t n) {
  if (kb_buf_append(&e->st->buf, s, n)) enc_oom(e);
}

static inline void outc(encoder *e, char c) {
  if (kb_buf_putc(&e->st->buf, c)) enc_oom(e);
}

static void newline(encoder *e, unsigned level) {
  if (!e->pretty) return;
  size_t n = (size_t)e->indent * level;
  kb_buf *b = &e->st->buf;
  if (kb_buf_reserve(b, n + 1)) enc_oom(e);
  b->data[b->len] = '\n';
  memset(b->data + b->len + 1, ' ', n);
  kb_buf_commit(b, n + 1);
}

static void enc_string(encoder *e, const char *s, size_t len, const char *what) {
  size_t bad = 0;
  int rc = kb_json_write_string(&e->st->buf, s, len, &bad);
  if (rc == KB_JSON_EUTF8)
    enc_error(e, 0, "invalid UTF-8 in %s (byte %I)", what, (lua_Integer)bad + 1);
  else if (rc)
    enc_oom(e);
}

static void enc_value(encoder *e, int idx);

static void enc_key(encoder *e, const frame *f) {
  if (f->kind == KEY_STRING) {
    enc_string(e, f->key, f->keylen, "key");
  } else {
    char num[KB_JSON_NUMBUF + 2];
    size_t n = kb_json_format_int64(num + 1, f->index);
    num[0] = num[n + 1] = '"';
    out(e, num, n + 2);
  }
  if (e->pretty) out(e, ": ", 2);
  else outc(e, ':');
}

static int cmp_string_keys(const void *a, const void *b) {
  const key_entry *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->s, y->s, n);
  if (c) return c;
  return (x->len > y->len) - (x->len < y->len);
}

static int cmp_integer_keys(const void *a, const void *b) {
  const key_entry *x = a, *y = b;
  return (x->i > y->i) - (x->i < y->i);
}

/* Most objects have a handful of keys: insertion sort needs no allocation
 * (glibc's qsort may malloc a merge buffer) and wins at that size. */
static void sort_keys(key_entry *k, size_t n, int (*cmp)(const void *, const void *)) {
  if (n > 16) {
    qsort(k, n, sizeof *k, cmp);
    return;
  }
  for (size_t i = 1; i < n; i++) {
    key_entry x = k[i];
    size_t j = i;
    for (; j > 0 && cmp(&k[j - 1], &x) > 0; j--) k[j] = k[j - 1];
    k[j] = x;
  }
}

/* Sets the current key of the innermost frame (frames may have moved). */
static void set_key(encoder *e, int kind, const char *s, size_t len, lua_Integer i) {
  frame *f = &e->st->frames[e->depth - 1];
  f->kind = kind;
  f->key = s;
  f->keylen = len;
  f->index = i;
}

static void enc_array(encoder *e, int idx, lua_Integer n) {
  lua_State *L = e->L;
  outc(e, '[');
  for (lua_Integer i = 1; i <= n; i++) {
    if (i > 1) outc(e, ',');
    newline(e, e->depth);
    set_key(e, KEY_INTEGER, NULL, 0, i);
    lua_rawgeti(L, idx, i);
    enc_value(e, lua_gettop(L));
    lua_pop(L, 1);
  }
  if (n) newline(e, e->depth - 1);
  outc(e, ']');
}

static void enc_member(encoder *e, int first) {
  if (!first) outc(e, ',');
  newline(e, e->depth);
  enc_key(e, &e->st->frames[e->depth - 1]);
}

/* Writes the members in traversal order: no sorting, no extra lookups. */
static void enc_object_unsorted(encoder *e, int idx) {
  lua_State *L = e->L;
  int first = 1;
  outc(e, '{');
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      size_t len;
      const char *s = lua_tolstring(L, -2, &len);
      set_key(e, KEY_STRING, s, len, 0);
    } else {
      set_key(e, KEY_INTEGER, NULL, 0, lua_tointeger(L, -2));
    }
    enc_member(e, first);
    first = 0;
    enc_value(e, lua_gettop(L));
    lua_pop(L, 1);
  }
  if (!first) newline(e, e->depth - 1);
  outc(e, '}');
}

static void enc_object_sorted(encoder *e, int idx, int string_keys) {
  lua_State *L = e->L;
  jstate *st = e->st;
  size_t base = st->nkeys;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (grow((void **)&st->keys, &st->keys_cap, st->nkeys + 1, sizeof(key_entry)))
      enc_oom(e);
    key_entry *k = &st->keys[st->nkeys++];
    /* String keys stay valid: the table anchors them, and nothing here can
     * change the table. */
    if (string_keys) {
      k->s = lua_tolstring(L, -2, &k->len);
      k->i = 0;
    } else {
      k->s = NULL;
      k->len = 0;
      k->i = lua_tointeger(L, -2);
    }
    lua_pop(L, 1);
  }
  size_t count = st->nkeys - base;
  sort_keys(st->keys + base, count, string_keys ? cmp_string_keys : cmp_integer_keys);
  outc(e, '{');
  for (size_t j = 0; j < count; j++) {
    key_entry k = st->keys[base + j]; /* copy: nested objects may move keys */
    if (k.s) {
      set_key(e, KEY_STRING, k.s, k.len, 0);
      lua_pushlstring(L, k.s, k.len);
    } else {
      set_key(e, KEY_INTEGER, NULL, 0, k.i);
      lua_pushinteger(L, k.i);
    }
    enc_member(e, j == 0);
    lua_rawget(L, idx);
    enc_value(e, lua_gettop(L));
    lua_pop(L, 1);
  }
  if (count) newline(e, e->depth - 1);
  outc(e, '}');
  st->nkeys = base;
}

enum { MARK_NONE, MARK_ARRAY, MARK_OBJECT };

static int table_mark(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return MARK_NONE;
  int mark = lua_rawequal(L, -1, UV_ARRAY_MT)    ? MARK_ARRAY
             : lua_rawequal(L, -1, UV_OBJECT_MT) ? MARK_OBJECT
                                                 : MARK_NONE;
  lua_pop(L, 1);
  return mark;
}

static void enc_table(encoder *e, int idx) {
  lua_State *L = e->L;
  if (e->depth >= e->max_depth)
    enc_error(e, 0, "nesting deeper than %d levels", (int)e->max_depth);
  const void *self = lua_topointer(L, idx);
  for (unsigned i = 0; i < e->depth; i++)
    if (e->st->frames[i].table == self)
      enc_error(e, 0, "cycle detected (a table contains itself)");
  luaL_checkstack(L, 4, "kb.json.encode");
  frame *f = state_frame(L, e->st, e->depth, "kb.json.encode");
  f->table = self;
  f->kind = KEY_NONE;
  e->depth++;

  /* One pass over the keys decides between array and object and rejects
   * keys JSON cannot express, before anything is written. */
  int mark = table_mark(L, idx);
  int has_int = 0, has_str = 0, below_one = 0;
  lua_Integer count = 0, max = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int key = lua_absindex(L, -2);
    if (lua_type(L, key) == LUA_TSTRING) {
      if (mark == MARK_ARRAY)
        enc_error(e, key, "array (kb.json.array) has a key that is not a positive integer");
      if (has_int) enc_error(e, key, "table mixes integer and string keys");
      has_str = 1;
    } else if (lua_isinteger(L, key)) {
      lua_Integer k = lua_tointeger(L, key);
      if (k < 1) {
        if (mark == MARK_ARRAY)
          enc_error(e, key, "array (kb.json.array) has a key that is not a positive integer");
        below_one = 1;
      }
      if (has_str) enc_error(e, key, "table mixes integer and string keys");
      has_int = 1;
      if (k > max) max = k;
    } else {
      enc_error(e, key, "table key is a %s, not a string or an integer",
                lua_type(L, key) == LUA_TNUMBER ? "float" : luaL_typename(L, key));
    }
    count++;
    lua_pop(L, 1);
  }

  if (mark == MARK_ARRAY) {
    /* Holes of a marked array become null, within reason. */
    if (max > 2 * count + 64)
      enc_error(e, 0, "array (kb.json.array) is too sparse: %d elements, largest index %I",
                (int)count, max);
    enc_array(e, idx, max);
  } else if (mark == MARK_NONE && has_int && !below_one && max == count) {
    enc_array(e, idx, count);
  } else if (e->sort && count > 1) {
    enc_object_sorted(e, idx, has_str);
  } else {
    enc_object_unsorted(e, idx);
  }
  e->depth--;
}

static void enc_value(encoder *e, int idx) {
  lua_State *L = e->L;
  char num[KB_JSON_NUMBUF];
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    out(e, "null", 4);
    return;
  case LUA_TBOOLEAN:
    if (lua_toboolean(L, idx)) out(e, "true", 4);
    else out(e, "false", 5);
    return;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      out(e, num, kb_json_format_int64(num, lua_tointeger(L, idx)));
    } else {
      double d = lua_tonumber(L, idx);
      size_t n = kb_json_format_double(num, d);
      if (!n) enc_error(e, 0, "cannot encode %s", isnan(d) ? "NaN" : d > 0 ? "inf" : "-inf");
      out(e, num, n);
    }
    return;
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    enc_string(e, s, len, "string");
    return;
  }
  case LUA_TTABLE:
    enc_table(e, idx);
    return;
  case LUA_TLIGHTUSERDATA:
    if (lua_touserdata(L, idx) == NULL) {
      out(e, "null", 4);
      return;
    }
    break;
  default:
    break;
  }
  enc_error(e, 0, "cannot encode a %s", luaL_typename(L, idx));
}

static unsigned opt_depth(lua_State *L, int opts) {
  lua_Integer d = kb_opt_integer(L, opts, "max_depth", KB_JSON_DEFAULT_DEPTH);
  if (d < 1 || d > JSON_DEPTH_CAP)
    luaL_error(L, "option 'max_depth' must be between 1 and %d", JSON_DEPTH_CAP);
  return (unsigned)d;
}

/* json.encode(value [, opts]) -> string */
static int l_encode(lua_State *L) {
  luaL_checkany(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  encoder e = {.L = L};
  lua_Integer indent = kb_opt_integer(L, 2, "indent", LUA_MININTEGER); /* unset */
  if (indent != LUA_MININTEGER && (indent < 0 || indent > 16))
    luaL_error(L, "option 'indent' must be between 0 and 16");
  e.pretty = kb_opt_boolean(L, 2, "pretty", indent >= 0);
  e.indent = indent >= 0 ? (int)indent : 2;
  e.sort = kb_opt_boolean(L, 2, "sort_keys", 1);
  e.max_depth = opt_depth(L, 2);
  e.st = state_new(L);
  enc_value(&e, 1);
  lua_pushlstring(L, e.st->buf.data ? e.st->buf.data : "", e.st->buf.len);
  state_release(e.st);
  return 1;
}

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
  frame *f = state_frame(d->L, d->st, d->depth, "kb.json.decode");
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

/* json.decode(text [, opts]) -> value */
static int l_decode(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  unsigned max_depth = opt_depth(L, 2);
  lua_Integer max_size = kb_opt_integer(L, 2, "max_size", -1);
  if (max_size >= 0 && (lua_Integer)len > max_size)
    return kb_error_raise(L, "json", "kb.json.decode: document of %I bytes exceeds max_size (%I)",
                          (lua_Integer)len, max_size);
  decoder d = {.L = L};
  if (lua_istable(L, 2) && lua_getfield(L, 2, "skip") != LUA_TNIL) {
    if (!lua_istable(L, 3)) luaL_error(L, "option 'skip' must be a set of keys ({key = true})");
    d.skip_set = 3;
  }
  d.st = state_new(L);
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
    .scratch = &d.st->buf, /* the callbacks may raise Lua errors */
  };
  kb_json_error err;
  int rc = kb_json_parse(text, len, &h, &d, &err);
  state_release(d.st);
  if (rc) {
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

/* ---- markers ------------------------------------------------------------- */

/* Sets the marker metatable `mt` on the table argument (a new table when
 * absent) and returns it. Refuses to replace a foreign metatable. */
static int mark_table(lua_State *L, int mt) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  if (lua_getmetatable(L, 1)) {
    if (!lua_rawequal(L, -1, UV_ARRAY_MT) && !lua_rawequal(L, -1, UV_OBJECT_MT))
      return luaL_argerror(L, 1, "table already has a metatable");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, mt);
  lua_setmetatable(L, 1);
  return 1;
}

/* json.array([t]) -> t: t encodes as a JSON array, even when empty. */
static int l_array(lua_State *L) { return mark_table(L, UV_ARRAY_MT); }

/* json.object([t]) -> t: t encodes as a JSON object, even with keys 1..n. */
static int l_object(lua_State *L) { return mark_table(L, UV_OBJECT_MT); }

static const luaL_Reg json_funcs[] = {
  {"encode", l_encode},
  {"decode", l_decode},
  {"array", l_array},
  {"object", l_object},
  {"null", NULL},
  {NULL, NULL},
};

static const luaL_Reg state_meta[] = {
  {"__gc", state_gc},
  {NULL, NULL},
};

int luaopen_kb_json(lua_State *L) {
  kb_new_class(L, JSON_STATE, NULL, state_meta);
  luaL_newlibtable(L, json_funcs);
  /* Upvalue 1: the shared "kb.array" metatable (see kb_mark_array). */
  lua_newtable(L);
  kb_mark_array(L, -1);
  lua_getmetatable(L, -1);
  lua_remove(L, -2);
  /* Upvalue 2: this module's object marker. */
  if (luaL_newmetatable(L, JSON_OBJECT)) {
    lua_pushliteral(L, JSON_OBJECT);
    lua_setfield(L, -2, "__name");
  }
  luaL_setfuncs(L, json_funcs, 2);
  kb_push_null(L);
  lua_setfield(L, -2, "null");
  return 1;
}
