/* kb.http: a request from a call's arguments. The options are read and
 * checked first, on the Lua stack (may raise, allocates nothing outside
 * Lua); the C request is then built from them under lua_pcall (fails only
 * when out of memory), and routed to the simulator's Unix socket when its
 * origin has a route. Used by http.c (requests) and http_stream.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/http_client.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "lhttp_internal.h"

/* ---- request specification (may raise; allocates nothing outside Lua) ---------- */

/* Stack slots holding the table-valued options while the request is built. */
enum { SLOT_HEADERS, SLOT_QUERY, SLOT_MULTIPART, SLOT_BODY, NSLOTS };


static int slot(const kb_lhttp_spec *s, int which) { return s->slot + which; }

static void check_header_value(lua_State *L, const char *name, int idx) {
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "kb.http: header '%s' must be a string, a number or a list of them, got %s",
               name, luaL_typename(L, idx));
  size_t n;
  const char *v = lua_tolstring(L, idx, &n);
  if (memchr(v, '\r', n) || memchr(v, '\n', n) || strlen(v) != n)
    luaL_error(L, "kb.http: header '%s' contains a line break or NUL byte", name);
}

static void check_headers(lua_State *L, int tbl) {
  lua_pushnil(L);
  while (lua_next(L, tbl)) {
    size_t n;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "kb.http: header names must be strings");
    const char *name = lua_tolstring(L, -2, &n);
    if (!kb_http_token_valid(name, n)) luaL_error(L, "kb.http: invalid header name '%s'", name);
    if (lua_istable(L, -1)) {
      lua_Integer len = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, -1, i);
        check_header_value(L, name, lua_gettop(L));
        lua_pop(L, 1);
      }
    } else {
      lua_pushvalue(L, -1); /* tolstring converts numbers in place */
      check_header_value(L, name, lua_gettop(L));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
}

static void check_query_value(lua_State *L, const char *name, int idx) {
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER && t != LUA_TBOOLEAN)
    luaL_error(L, "kb.http: query parameter '%s' must be a string, number, boolean or a "
               "list of them, got %s", name, luaL_typename(L, idx));
}

static void check_query(lua_State *L, int tbl) {
  lua_pushnil(L);
  while (lua_next(L, tbl)) {
    size_t n;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "kb.http: query parameter names must be strings");
    const char *name = lua_tolstring(L, -2, &n);
    if (strlen(name) != n) luaL_error(L, "kb.http: a query parameter name contains a NUL byte");
    if (lua_istable(L, -1)) {
      lua_Integer len = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, -1, i);
        check_query_value(L, name, lua_gettop(L));
        lua_pop(L, 1);
      }
    } else {
      check_query_value(L, name, lua_gettop(L));
    }
    lua_pop(L, 1);
  }
}

static const char *part_field(lua_State *L, int part, int i, const char *key) {
  lua_getfield(L, part, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "kb.http: multipart part %d: '%s' must be a string, got %s", i, key,
               luaL_typename(L, -1));
  const char *s = lua_tostring(L, -1);
  lua_pop(L, 1); /* still anchored by the part table */
  return s;
}

static void check_multipart(lua_State *L, int tbl) {
  lua_Integer n = luaL_len(L, tbl);
  if (n == 0) luaL_error(L, "kb.http: multipart needs at least one part");
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_geti(L, tbl, i) != LUA_TTABLE)
      luaL_error(L, "kb.http: multipart part %d must be a table", (int)i);
    int part = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, part)) {
      const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
      if (strcmp(k, "name") && strcmp(k, "data") && strcmp(k, "file") &&
          strcmp(k, "filename") && strcmp(k, "content_type"))
        luaL_error(L, "kb.http: multipart part %d: unknown field '%s' (expected name, data, "
                   "file, filename, content_type)", (int)i, k);
      lua_pop(L, 1);
    }
    if (!part_field(L, part, (int)i, "name"))
      luaL_error(L, "kb.http: multipart part %d needs a name", (int)i);
    const char *data = part_field(L, part, (int)i, "data");
    const char *file = part_field(L, part, (int)i, "file");
    part_field(L, part, (int)i, "filename");
    part_field(L, part, (int)i, "content_type");
    if ((data != NULL) == (file != NULL))
      luaL_error(L, "kb.http: multipart part %d needs exactly one of data= and file=", (int)i);
    if (file && access(file, R_OK) != 0) {
      int e = errno;
      kb_error_new(L, "io", "kb.http: multipart part %d: cannot read file '%s': %s", (int)i,
                   file, strerror(e));
      lua_pushstring(L, file);
      lua_setfield(L, -2, "path");
      lua_error(L);
    }
    lua_pop(L, 1);
  }
}

/* Replaces the table in the body slot by its JSON text (kb.json.encode). */
static void encode_json_body(lua_State *L, kb_lhttp_spec *s) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "kb.json");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "encode");
  lua_pushvalue(L, slot(s, SLOT_BODY));
  lua_call(L, 1, 1);
  lua_replace(L, slot(s, SLOT_BODY));
  lua_pop(L, 1);
  s->json_body = 1;
}

static double check_seconds(lua_State *L, const char *key) {
  if (!lua_isnumber(L, -1)) luaL_error(L, "kb.http: option '%s' must be a number", key);
  double v = lua_tonumber(L, -1);
  if (!(v >= 0)) luaL_error(L, "kb.http: option '%s' must be >= 0 seconds", key);
  return v;
}

static const char *check_string(lua_State *L, const char *key, size_t *len) {
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "kb.http: option '%s' must be a string, got %s", key, luaL_typename(L, -1));
  return lua_tolstring(L, -1, len);
}

static int check_bool(lua_State *L, const char *key) {
  if (!lua_isboolean(L, -1))
    luaL_error(L, "kb.http: option '%s' must be a boolean, got %s", key, luaL_typename(L, -1));
  return lua_toboolean(L, -1);
}

/* One option (its value on top of the stack). Strings stay anchored by the
 * options table, which outlives the building of the request. */
static void set_option(lua_State *L, kb_lhttp_spec *s, const char *k) {
  kb_http_options *o = &s->o;
  size_t n;
  if (!strcmp(k, "method")) s->method = check_string(L, k, NULL);
  else if (!strcmp(k, "url")) s->url = check_string(L, k, NULL);
  else if (!strcmp(k, "headers")) {
    luaL_checktype(L, -1, LUA_TTABLE);
    lua_copy(L, -1, slot(s, SLOT_HEADERS));
  } else if (!strcmp(k, "query")) {
    if (!lua_istable(L, -1)) luaL_error(L, "kb.http: option 'query' must be a table");
    lua_copy(L, -1, slot(s, SLOT_QUERY));
  } else if (!strcmp(k, "multipart")) {
    if (!lua_istable(L, -1)) luaL_error(L, "kb.http: option 'multipart' must be a list of parts");
    lua_copy(L, -1, slot(s, SLOT_MULTIPART));
  } else if (!strcmp(k, "body")) {
    lua_copy(L, -1, slot(s, SLOT_BODY));
  } else {
    s->has_options = 1;
    if (!strcmp(k, "timeout")) s->timeout = check_seconds(L, k);
    else if (!strcmp(k, "connect_timeout")) s->connect_timeout = check_seconds(L, k);
    else if (!strcmp(k, "follow_redirects")) o->follow_redirects = check_bool(L, k);
    else if (!strcmp(k, "max_redirects")) {
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
        luaL_error(L, "kb.http: option 'max_redirects' must be an integer >= 0");
      o->max_redirects = (long)lua_tointeger(L, -1);
    } else if (!strcmp(k, "http2")) {
      if (lua_isboolean(L, -1)) o->version = lua_toboolean(L, -1) ? KB_HTTP_V2_TLS : KB_HTTP_V1;
      else if (lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "prior-knowledge"))
        o->version = KB_HTTP_V2_PRIOR_KNOWLEDGE;
      else luaL_error(L, "kb.http: option 'http2' must be true, false or \"prior-knowledge\"");
    } else if (!strcmp(k, "compressed")) o->compressed = check_bool(L, k);
    else if (!strcmp(k, "insecure")) o->insecure = check_bool(L, k);
    else if (!strcmp(k, "ca_file")) o->ca_file = check_string(L, k, NULL);
    else if (!strcmp(k, "cert_file")) o->cert_file = check_string(L, k, NULL);
    else if (!strcmp(k, "key_file")) o->key_file = check_string(L, k, NULL);
    else if (!strcmp(k, "ca_pem")) o->ca_pem = check_string(L, k, &n), o->ca_pem_len = n;
    else if (!strcmp(k, "cert_pem")) o->cert_pem = check_string(L, k, &n), o->cert_pem_len = n;
    else if (!strcmp(k, "key_pem")) o->key_pem = check_string(L, k, &n), o->key_pem_len = n;
    else if (!strcmp(k, "tls_server_name")) o->tls_server_name = check_string(L, k, NULL);
    else if (!strcmp(k, "proxy")) o->proxy = check_string(L, k, NULL);
    else if (!strcmp(k, "max_body")) {
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
        luaL_error(L, "kb.http: option 'max_body' must be a positive integer (bytes)");
      s->max_body = lua_tointeger(L, -1);
      s->max_body_given = 1;
    } else
      luaL_error(L, "kb.http: unknown option '%s' (expected headers, query, body, multipart, "
                 "timeout, connect_timeout, follow_redirects, max_redirects, http2, compressed, "
                 "ca_file, ca_pem, cert_file, cert_pem, key_file, key_pem, insecure, "
                 "tls_server_name, proxy, max_body)", k);
  }
}

/* Reads and checks everything the request needs; raises on a bad argument.
 * Leaves NSLOTS values on the stack from s->slot. */
/* A timeout in scenario seconds as real milliseconds. On a sped-up clock
 * the real time shrinks by the speed; a floor of 250 ms real (or the whole
 * timeout, if shorter) keeps a busy loop's hiccups from timing requests
 * out, which at x600 would otherwise be a mere 1/600 of the real stall. */
static uint64_t timeout_ms(kb_rt *rt, double seconds) {
  uint64_t ms = kb_rt_real_ms(rt, seconds);
  if (ms == 0 || kb_vclock_speed(kb_rt_clock(rt)) <= 1.0) return ms;
  double floor_ms = seconds * 1000.0 < 250.0 ? seconds * 1000.0 : 250.0;
  return ms < (uint64_t)floor_ms ? (uint64_t)floor_ms : ms;
}

static void build_spec(lua_State *L, kb_lhttp_spec *s, int opts, int body) {
  lua_settop(L, lua_gettop(L) + NSLOTS);
  s->slot = lua_gettop(L) - NSLOTS + 1;
  if (body) lua_copy(L, body, slot(s, SLOT_BODY));
  if (opts) {
    lua_pushnil(L);
    while (lua_next(L, opts)) {
      if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "kb.http: option names must be strings");
      set_option(L, s, lua_tostring(L, -2));
      lua_pop(L, 1);
    }
  }
  if (!s->url) luaL_error(L, "kb.http: a url is needed");
  if (!kb_http_token_valid(s->method, strlen(s->method)) || strlen(s->method) > 31)
    luaL_error(L, "kb.http: invalid method '%s'", s->method);
  if (!lua_isnil(L, slot(s, SLOT_HEADERS))) check_headers(L, slot(s, SLOT_HEADERS));
  if (!lua_isnil(L, slot(s, SLOT_QUERY))) check_query(L, slot(s, SLOT_QUERY));
  int bt = lua_type(L, slot(s, SLOT_BODY));
  if (bt == LUA_TTABLE) encode_json_body(L, s);
  else if (bt != LUA_TNIL && bt != LUA_TSTRING)
    luaL_error(L, "kb.http: body must be a string or a table (sent as JSON), got %s",
               lua_typename(L, bt));
  if (!lua_isnil(L, slot(s, SLOT_MULTIPART))) {
    if (bt != LUA_TNIL) luaL_error(L, "kb.http: body and multipart cannot be used together");
    check_multipart(L, slot(s, SLOT_MULTIPART));
  }
  if (s->has_options) {
    kb_rt *rt = kb_rt_from_lua(L);
    s->o.timeout_ms = timeout_ms(rt, s->timeout);
    s->o.connect_timeout_ms = timeout_ms(rt, s->connect_timeout);
  }
}

/* ---- building (checked already: fails only when out of memory) --------------------- */

static const char *value_text(lua_State *L, int idx, size_t *n) {
  if (lua_isboolean(L, idx)) {
    *n = lua_toboolean(L, idx) ? 4 : 5;
    return lua_toboolean(L, idx) ? "true" : "false";
  }
  return lua_tolstring(L, idx, n); /* idx is a copy: converting it is harmless */
}

static int add_query_values(lua_State *L, kb_http_request *r, const char *k, size_t kn) {
  int err = 0;
  if (lua_istable(L, -1)) {
    lua_Integer len = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= len && !err; i++) {
      size_t vn;
      lua_geti(L, -1, i);
      const char *v = value_text(L, -1, &vn);
      err = kb_http_request_add_query(r, k, kn, v, vn);
      lua_pop(L, 1);
    }
  } else {
    size_t vn;
    lua_pushvalue(L, -1);
    const char *v = value_text(L, -1, &vn);
    err = kb_http_request_add_query(r, k, kn, v, vn);
    lua_pop(L, 1);
  }
  return err;
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names sorted, so the same table always gives the same URL. */
static int add_query(lua_State *L, kb_http_request *r, int tbl) {
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, tbl)) {
    n++;
    lua_pop(L, 1);
  }
  const char **keys = lua_newuserdatauv(L, (n ? n : 1) * sizeof *keys, 0);
  size_t i = 0;
  lua_pushnil(L);
  while (lua_next(L, tbl)) {
    keys[i++] = lua_tostring(L, -2); /* anchored by the table */
    lua_pop(L, 1);
  }
  qsort(keys, n, sizeof *keys, cmp_keys);
  int err = 0;
  for (i = 0; i < n && !err; i++) {
    lua_getfield(L, tbl, keys[i]);
    err = add_query_values(L, r, keys[i], strlen(keys[i]));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return err;
}

static int add_headers(lua_State *L, kb_http_request *r, int tbl) {
  int err = 0;
  lua_pushnil(L);
  while (!err && lua_next(L, tbl)) {
    const char *name = lua_tostring(L, -2);
    if (lua_istable(L, -1)) {
      lua_Integer len = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= len && !err; i++) {
        lua_geti(L, -1, i);
        err = kb_http_request_add_header(r, name, lua_tostring(L, -1));
        lua_pop(L, 1);
      }
    } else {
      err = kb_http_request_add_header(r, name, lua_tostring(L, -1));
    }
    lua_pop(L, 1);
  }
  if (err) lua_pop(L, 1); /* the key left by the interrupted traversal */
  return err;
}

static int add_parts(lua_State *L, kb_http_request *r, int tbl) {
  lua_Integer n = luaL_len(L, tbl);
  int err = 0;
  for (lua_Integer i = 1; i <= n && !err; i++) {
    lua_geti(L, tbl, i);
    int part = lua_gettop(L);
    kb_http_part p = {0};
    p.name = part_field(L, part, (int)i, "name");
    p.file = part_field(L, part, (int)i, "file");
    p.filename = part_field(L, part, (int)i, "filename");
    p.content_type = part_field(L, part, (int)i, "content_type");
    lua_getfield(L, part, "data");
    if (lua_isstring(L, -1)) p.data = lua_tolstring(L, -1, &p.data_len);
    err = kb_http_request_add_part(r, &p); /* copies data */
    lua_pop(L, 2);
  }
  return err;
}

static int build_request(lua_State *L, kb_http_request *r, const kb_lhttp_spec *s) {
  int err = 0;
  if (!lua_isnil(L, slot(s, SLOT_QUERY))) err = add_query(L, r, slot(s, SLOT_QUERY));
  if (!err && !lua_isnil(L, slot(s, SLOT_HEADERS))) err = add_headers(L, r, slot(s, SLOT_HEADERS));
  if (!err && s->json_body && !kb_http_request_has_header(r, "Content-Type"))
    err = kb_http_request_add_header(r, "Content-Type", "application/json");
  if (!err && lua_isstring(L, slot(s, SLOT_BODY))) {
    size_t n;
    const char *b = lua_tolstring(L, slot(s, SLOT_BODY), &n);
    err = kb_http_request_set_body(r, b, n);
  }
  if (!err && !lua_isnil(L, slot(s, SLOT_MULTIPART)))
    err = add_parts(L, r, slot(s, SLOT_MULTIPART));
  if (!err && s->has_options) err = kb_http_request_set_options(r, &s->o);
  return err;
}

/* Reads the arguments of a call into s (raises on a bad one). The
 * options come last; their slots go above them. */
void kb__lhttp_read_call(lua_State *L, kb_lhttp_spec *s, int url, int body, int opts) {
  lua_settop(L, opts);
  if (url) s->url = luaL_checkstring(L, url);
  if (lua_isnil(L, opts)) opts = 0;
  if (opts) luaL_checktype(L, opts, LUA_TTABLE);
  build_spec(L, s, opts, body);
}

/* ---- Unix-socket routes ----------------------------------------------------------------
 * The embedded simulator of a fast-forwarding clock is reached over a Unix
 * socket (kb/vclock.h says why): requests whose URL starts with its origin
 * ("http://127.0.0.1:PORT") go there. Kept in the registry, origin -> path. */

static const char ROUTES_KEY = 'u';

void kb__lhttp_route(lua_State *L, const char *origin, const char *path) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &ROUTES_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &ROUTES_KEY);
  }
  if (path) lua_pushstring(L, path);
  else lua_pushnil(L);
  lua_setfield(L, -2, origin);
  lua_pop(L, 1);
}

/* The socket for url, or NULL. The result lives in the registry as long
 * as the route. */
static const char *route_of(lua_State *L, const char *url) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &ROUTES_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    return NULL;
  }
  const char *scheme_end = strstr(url, "://");
  const char *path = NULL;
  if (scheme_end) {
    size_t n = strcspn(scheme_end + 3, "/?#") + (size_t)(scheme_end + 3 - url);
    lua_pushlstring(L, url, n);
    if (lua_rawget(L, -2) == LUA_TSTRING) path = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return path;
}

/* build_protected(args, slots...): build_request under lua_pcall, with
 * copies of the spec's slots as its arguments from index 2. */
typedef struct {
  kb_http_request *r;
  const kb_lhttp_spec *s;
  int err;
} build_args;

static int build_protected(lua_State *L) {
  build_args *a = lua_touserdata(L, 1);
  kb_lhttp_spec s = *a->s;
  s.slot = 2;
  a->err = build_request(L, a->r, &s);
  return 0;
}

/* The request s describes, not started; raises when it cannot be built.
 * The building runs protected, so a raise in the middle (a metamethod of
 * an option table, out of memory) frees the request instead of leaking
 * it. (Not a to-be-closed guard: the calling C function yields later,
 * which a function with to-be-closed slots must not.) */
kb_http_request *kb__lhttp_new_request(lua_State *L, kb_http_client *c, const kb_lhttp_spec *s) {
  luaL_checkstack(L, NSLOTS + 4, "kb.http: building a request");
  char sock[256] = ""; /* looked up first: nothing here may raise later */
  const char *route = route_of(L, s->url);
  if (route) snprintf(sock, sizeof sock, "%s", route);
  build_args a = {kb_http_request_new(c, s->method, s->url), s, 0};
  if (!a.r) kb_error_raise(L, "resource", "kb.http: out of memory building a request");
  lua_pushcfunction(L, build_protected);
  lua_pushlightuserdata(L, &a);
  for (int i = 0; i < NSLOTS; i++) lua_pushvalue(L, slot(s, i));
  if (lua_pcall(L, 1 + NSLOTS, 0, 0) != LUA_OK) {
    kb_http_request_free(a.r);
    lua_error(L);
  }
  if (a.err == 0 && sock[0]) a.err = kb_http_request_set_unix_socket(a.r, sock);
  if (a.err != 0) {
    kb_http_request_free(a.r);
    kb__lhttp_raise_start_error(L, a.err, s->method);
  }
  return a.r;
}
