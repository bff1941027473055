/* cJSON trees <-> Lua values (see kb/lua_cjson.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/json.h"
#include "kb/lua_cjson.h"
#include "kb/lua_util.h"

#define MAX_EXACT 9007199254740992.0 /* 2^53 */
#define MAX_DEPTH 512

/* ---- cJSON -> Lua ----------------------------------------------------------- */

static void push_number(lua_State *L, double d) {
  if (d == floor(d) && fabs(d) <= MAX_EXACT) lua_pushinteger(L, (lua_Integer)d);
  else lua_pushnumber(L, d);
}

void kb_lua_push_cjson(lua_State *L, const cJSON *node) {
  luaL_checkstack(L, 3, "document nested too deeply");
  int n = 0;
  switch (node->type & 0xFF) {
  case cJSON_False:
    lua_pushboolean(L, 0);
    break;
  case cJSON_True:
    lua_pushboolean(L, 1);
    break;
  case cJSON_Number:
    push_number(L, node->valuedouble);
    break;
  case cJSON_String:
    lua_pushstring(L, node->valuestring ? node->valuestring : "");
    break;
  case cJSON_Raw:
    if (!node->valuestring) kb_push_null(L);
    else if (!lua_stringtonumber(L, node->valuestring)) lua_pushstring(L, node->valuestring);
    break;
  case cJSON_Array:
    for (const cJSON *c = node->child; c; c = c->next) n++;
    lua_createtable(L, n, 0);
    n = 0;
    for (const cJSON *c = node->child; c; c = c->next) {
      kb_lua_push_cjson(L, c);
      lua_rawseti(L, -2, ++n);
    }
    kb_mark_array(L, -1);
    break;
  case cJSON_Object:
    for (const cJSON *c = node->child; c; c = c->next) n++;
    lua_createtable(L, 0, n);
    for (const cJSON *c = node->child; c; c = c->next) {
      kb_lua_push_cjson(L, c);
      lua_setfield(L, -2, c->string ? c->string : "");
    }
    break;
  default: /* cJSON_NULL, and cJSON_Invalid for want of anything better */
    kb_push_null(L);
    break;
  }
}

/* ---- Lua -> cJSON ----------------------------------------------------------- */

/* The rules and messages follow kb.json's encoder (src/lua/json_encode.c), so a
 * value that kb.json.encode accepts converts here, and fails with the same
 * words when it does not. */

typedef struct step {
  const void *table;  /* the table this step descends from, for cycles */
  const char *key;    /* string key (anchored on the Lua stack), or NULL */
  size_t keylen;
  lua_Integer index;  /* integer key when key is NULL */
} step;

typedef struct conv {
  lua_State *L;
  char *errbuf;
  size_t errlen;
  int depth; /* path[0..depth) lead from the root to the current value */
  step path[MAX_DEPTH + 1];
} conv;

typedef struct pathbuf {
  char *p;
  size_t n, used;
} pathbuf;

static void add(pathbuf *b, const char *s) {
  size_t len = strlen(s);
  if (b->used + len >= b->n) len = b->n - b->used - 1;
  memcpy(b->p + b->used, s, len);
  b->used += len;
  b->p[b->used] = '\0';
}

static void add_step(pathbuf *b, const step *s) {
  if (s->key) {
    char text[KB_PATH_STEP];
    kb_path_key(text, s->key, s->keylen);
    add(b, text);
  } else {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "[%lld]", (long long)s->index);
    add(b, tmp);
  }
}

/* "<what> at $.path.to[3]", the key at stack index keyidx appended when
 * it is not 0. Deep paths keep their ends only, like kb.json's. */
static cJSON *fail(conv *c, int keyidx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static cJSON *fail(conv *c, int keyidx, const char *fmt, ...) {
  if (!c->errlen) return NULL;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(c->errbuf, c->errlen, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= c->errlen) return NULL;
  pathbuf b = {c->errbuf, c->errlen, (size_t)w};
  add(&b, " at $");
  int n = c->depth, head = n > 24 ? 10 : n, tail = n > 24 ? 10 : 0;
  for (int i = 0; i < head; i++) add_step(&b, &c->path[i]);
  if (tail) {
    add(&b, "...");
    for (int i = n - tail; i < n; i++) add_step(&b, &c->path[i]);
  }
  if (keyidx) {
    char text[KB_PATH_STEP];
    kb_path_stack_key(c->L, keyidx, text);
    add(&b, text);
  }
  return NULL;
}

static cJSON *convert(conv *c, int idx);

/* Converts the value on top of the stack (popping it) as child `key`/`index`. */
static cJSON *convert_child(conv *c, const void *table, const char *key, size_t keylen,
                            lua_Integer index) {
  c->path[c->depth++] = (step){table, key, keylen, index};
  cJSON *node = convert(c, lua_gettop(c->L));
  if (node) c->depth--; /* on failure the path stays, for the message */
  lua_pop(c->L, 1);
  return node;
}

/* t[1..n] as an array; holes (possible in marked arrays) become null. */
static cJSON *convert_array(conv *c, int idx, lua_Integer n) {
  cJSON *arr = cJSON_CreateArray();
  if (!arr) return fail(c, 0, "out of memory");
  const void *self = lua_topointer(c->L, idx);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(c->L, idx, i);
    cJSON *item = convert_child(c, self, NULL, 0, i);
    if (!item) {
      cJSON_Delete(arr);
      return NULL;
    }
    cJSON_AddItemToArray(arr, item);
  }
  return arr;
}

static int by_key(const void *a, const void *b) {
  return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* Every entry, keys sorted; integer keys are written in decimal. */
static cJSON *convert_object(conv *c, int idx, lua_Integer n) {
  lua_State *L = c->L;
  cJSON **items = calloc((size_t)(n ? n : 1), sizeof *items);
  if (!items) return fail(c, 0, "out of memory");
  const void *self = lua_topointer(L, idx);
  lua_Integer got = 0;
  cJSON *obj = NULL;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    char num[32];
    const char *key;
    size_t len;
    if (lua_type(L, -2) == LUA_TSTRING) {
      key = lua_tolstring(L, -2, &len);
    } else { /* an integer: converting the key in place would upset lua_next */
      len = (size_t)snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, -2));
      key = num;
    }
    if (memchr(key, '\0', len)) {
      fail(c, lua_absindex(L, -2), "table key contains a NUL byte");
      goto done;
    }
    size_t bad = kb_json_utf8_bad(key, len);
    if (bad != len) {
      fail(c, lua_absindex(L, -2), "invalid UTF-8 in a key (byte %d)", (int)bad + 1);
      goto done;
    }
    char *copy = strdup(key);
    if (!copy) {
      fail(c, 0, "out of memory");
      goto done;
    }
    lua_Integer index = key == num ? lua_tointeger(L, -2) : 0;
    cJSON *item = convert_child(c, self, key == num ? NULL : key, len, index);
    if (!item) {
      free(copy);
      goto done;
    }
    item->string = copy;
    items[got++] = item;
  }
  qsort(items, (size_t)got, sizeof *items, by_key);
  obj = cJSON_CreateObject();
  if (!obj) {
    fail(c, 0, "out of memory");
    goto done;
  }
  for (lua_Integer i = 0; i < got; i++) cJSON_AddItemToArray(obj, items[i]);
  got = 0;
done:
  for (lua_Integer i = 0; i < got; i++) cJSON_Delete(items[i]);
  free(items);
  return obj;
}

enum { MARK_NONE, MARK_ARRAY, MARK_OBJECT };

static int table_mark(lua_State *L, int idx) {
  if (kb_is_marked_array(L, idx)) return MARK_ARRAY;
  if (!lua_getmetatable(L, idx)) return MARK_NONE;
  luaL_getmetatable(L, "kb.json.object"); /* kb.json.object(t), once kb.json is loaded */
  int object = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return object ? MARK_OBJECT : MARK_NONE;
}

static cJSON *convert_table(conv *c, int idx) {
  lua_State *L = c->L;
  if (c->depth >= MAX_DEPTH) return fail(c, 0, "nesting deeper than %d levels", MAX_DEPTH);
  const void *self = lua_topointer(L, idx);
  for (int i = 0; i < c->depth; i++) {
    if (c->path[i].table == self) return fail(c, 0, "cycle detected (a table contains itself)");
  }
  if (!lua_checkstack(L, 6)) return fail(c, 0, "Lua stack exhausted");

  /* One pass over the keys decides between array and object. */
  int mark = table_mark(L, idx);
  int has_int = 0, has_str = 0, below_one = 0;
  lua_Integer count = 0, max = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int key = lua_absindex(L, -2);
    if (lua_type(L, key) == LUA_TSTRING) {
      if (mark == MARK_ARRAY) {
        return fail(c, key, "array (kb.json.array) has a key that is not a positive integer");
      }
      if (has_int) return fail(c, key, "table mixes integer and string keys");
      has_str = 1;
    } else if (lua_isinteger(L, key)) {
      lua_Integer k = lua_tointeger(L, key);
      if (k < 1) {
        if (mark == MARK_ARRAY) {
          return fail(c, key, "array (kb.json.array) has a key that is not a positive integer");
        }
        below_one = 1;
      }
      if (has_str) return fail(c, key, "table mixes integer and string keys");
      has_int = 1;
      if (k > max) max = k;
    } else {
      return fail(c, key, "table key is a %s, not a string or an integer",
                  lua_type(L, key) == LUA_TNUMBER ? "float" : luaL_typename(L, key));
    }
    count++;
    lua_pop(L, 1);
  }
  if (mark == MARK_ARRAY) {
    if (max > 2 * count + 64) {
      return fail(c, 0, "array (kb.json.array) is too sparse: %d elements, largest index %lld",
                  (int)count, (long long)max);
    }
    return convert_array(c, idx, max);
  }
  if (mark == MARK_NONE && has_int && !below_one && max == count) {
    return convert_array(c, idx, count);
  }
  return convert_object(c, idx, count);
}

static cJSON *convert(conv *c, int idx) {
  lua_State *L = c->L;
  cJSON *node = NULL;
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    node = cJSON_CreateNull();
    break;
  case LUA_TBOOLEAN:
    node = cJSON_CreateBool(lua_toboolean(L, idx));
    break;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      lua_Integer i = lua_tointeger(L, idx);
      if (i >= -(lua_Integer)MAX_EXACT && i <= (lua_Integer)MAX_EXACT) {
        node = cJSON_CreateNumber((double)i);
      } else { /* a double would round it */
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)i);
        node = cJSON_CreateRaw(text);
      }
    } else {
      node = cJSON_CreateNumber(lua_tonumber(L, idx));
    }
    break;
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (memchr(s, '\0', len)) return fail(c, 0, "string contains a NUL byte");
    size_t bad = kb_json_utf8_bad(s, len);
    if (bad != len) return fail(c, 0, "invalid UTF-8 in string (byte %d)", (int)bad + 1);
    node = cJSON_CreateString(s);
    break;
  }
  case LUA_TTABLE:
    return convert_table(c, idx);
  case LUA_TLIGHTUSERDATA:
    if (kb_is_null(L, idx)) {
      node = cJSON_CreateNull();
      break;
    }
    /* fall through */
  default:
    return fail(c, 0, "cannot encode a %s", luaL_typename(L, idx));
  }
  if (!node) return fail(c, 0, "out of memory");
  return node;
}

cJSON *kb_lua_to_cjson(lua_State *L, int idx, char *errbuf, size_t errlen) {
  conv *c = malloc(sizeof *c);
  if (!c) {
    if (errlen) snprintf(errbuf, errlen, "out of memory");
    return NULL;
  }
  c->L = L;
  c->errbuf = errbuf;
  c->errlen = errlen;
  c->depth = 0;
  if (errlen) errbuf[0] = '\0';
  int top = lua_gettop(L);
  cJSON *node = convert(c, lua_absindex(L, idx));
  lua_settop(L, top);
  free(c);
  return node;
}
