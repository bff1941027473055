/* kb.json.encode: Lua values to JSON text (the mapping is in json.c), with
 * the error paths ($.a.b[3]) that name where encoding failed. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "kb/json.h"
#include "kb/lua_util.h"
#include "ljson_internal.h"

/* ---- error paths --------------------------------------------------------- */

static void path_add_string(luaL_Buffer *b, const char *s, size_t len) {
  char step[KB_PATH_STEP];
  luaL_addlstring(b, step, kb_path_key(step, s, len));
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
  if (keyidx) {
    char step[KB_PATH_STEP];
    luaL_addlstring(&b, step, kb_path_stack_key(L, keyidx, step));
  }
  luaL_pushresult(&b);
  kb__ljson_state_release(e->st);
  kb_error_new(L, "json", "kb.json.encode: %s at %s", lua_tostring(L, what),
               lua_tostring(L, what + 1));
  lua_pushvalue(L, what + 1);
  lua_setfield(L, -2, "path");
  return lua_error(L);
}

static void enc_oom(encoder *e) {
  kb__ljson_state_release(e->st);
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
    if (kb__ljson_grow((void **)&st->keys, &st->keys_cap, st->nkeys + 1, sizeof(key_entry)))
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
  frame *f = kb__ljson_state_frame(L, e->st, e->depth, "kb.json.encode");
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

/* json.encode(value [, opts]) -> string */
int kb__ljson_encode(lua_State *L) {
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
  e.max_depth = kb__ljson_opt_depth(L, 2);
  e.st = kb__ljson_state_new(L);
  enc_value(&e, 1);
  lua_pushlstring(L, e.st->buf.data ? e.st->buf.data : "", e.st->buf.len);
  kb__ljson_state_release(e.st);
  return 1;
}

