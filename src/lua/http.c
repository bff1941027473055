/* kb.http: the HTTP client for scenarios, a thin layer over the C client of
 * include/kb/http_client.h. Every call suspends the calling task until the
 * response arrives; other tasks run meanwhile.
 *
 *   local http = require "kb.http"
 *   local r = http.get("http://127.0.0.1:8080/x", { query = { page = 2 } })
 *   print(r.status, r.headers["content-type"], #r.body, r.time.total)
 *
 * kb.http.request{method=, url=, headers=, query=, body=, multipart=, ...}
 * kb.http.get(url [, opts])          kb.http.post(url, body [, opts])
 * kb.http.head(url [, opts])         kb.http.put(url, body [, opts])
 * kb.http.delete(url [, opts])       kb.http.patch(url, body [, opts])
 * kb.http.client{max_connections=, max_host_connections=} -> client with
 *   the same methods (client:get(url) ...), client:active() (requests in
 *   flight), client:close() (refused while requests are in flight; also a
 *   to-be-closed variable: local c <close> = kb.http.client())
 * kb.http.active() -> requests in flight on the shared client
 * kb.http.stream(opts) / client:stream(opts) -> stream (below)
 *
 * The module functions share one client (one connection pool) per runtime,
 * created on first use with at most 1024 connections.
 *
 * Options (all optional):
 *   headers    {name = value | {value, value, ...}}; numbers are sent as
 *              text; a list sends the header once per value
 *   query      {name = value | {value, ...}} appended to the URL, names
 *              sorted, percent-encoded (RFC 3986; space is %20)
 *   body       string, sent as is (no Content-Type unless given), or a
 *              table, encoded with kb.json and sent as application/json
 *   multipart  { {name=, data= | file=, filename=, content_type=}, ... }
 *              multipart/form-data; file= is read from disk while sending
 *   timeout, connect_timeout   scenario seconds (default: none / 300 s)
 *   follow_redirects (false), max_redirects (10)
 *   http2      true: HTTP/2 over TLS when the server offers it;
 *              "prior-knowledge": HTTP/2 from the first byte (also h2c)
 *   compressed true: ask for gzip/br/zstd and decode the body
 *   ca_file, ca_pem, cert_file, cert_pem, key_file, key_pem   TLS material
 *              (files, or PEM text in memory)
 *   insecure   true: no certificate verification (warned once on stderr)
 *   tls_server_name   the TLS name (SNI, certificate check) when it is not
 *              the URL's host; the connection and Host: stay the URL's
 *   proxy      a proxy URL ("" ignores the *_proxy environment variables)
 *   max_body   most response body bytes (default KB_LHTTP_MAX_BODY, 64 MiB):
 *              a longer body stops the transfer at the limit and raises
 *              class "body_too_large"; not for streams, which hold no body
 *
 * The response: { status = 200, headers = {...}, body = "...",
 *   version = "1.1" | "2", time = { dns, connect, tls, ttfb, total } }
 * (plus redirects and url when redirects were followed; headers and time
 * are built when first read: src/lua/http_response.c). Header names are
 * lower-case; a repeated header's values are joined with ", ", except
 * set-cookie, which is always a list of strings. Times are scenario seconds:
 * dns/connect/tls are the durations of those phases (0 on a reused
 * connection), ttfb and total are counted from the call.
 *
 * HTTP error statuses (404, 500, ...) are responses, not errors. Transport
 * failures raise an error object (kb_error_new) with fields class,
 * message, url (credentials redacted), curl_code, detail (curl's text),
 * hint and method; class is one of connect, timeout, tls, dns, reset,
 * protocol, too_many_redirects, resource (out of file descriptors),
 * body_too_large, other.
 *
 * Memory: curl collects the body in the request's buffer (never past
 * max_body); the task's continuation copies it into the response's Lua
 * string and frees the request at once, before the task goes on, so a body
 * is held twice only during that copy (Lua 5.4 cannot adopt a C buffer as a
 * string). Buffers above 64 KiB are not kept for reuse.
 * A cancelled task's request is aborted and raises kb.cancelled.
 *
 * Streams (kb.http.stream): src/lua/http_stream.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "kb/http_client.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "lhttp_internal.h"

#define CLIENT_META "kb.http.client"

static const char DEFAULT_KEY = 'h'; /* registry key: the shared client */

typedef struct {
  kb_http_client *c;
} lclient;

/* ---- clients ------------------------------------------------------------------ */

static lclient *push_client(lua_State *L, const kb_http_client_opts *opts) {
  kb_rt *rt = kb_rt_from_lua(L);
  if (!rt) luaL_error(L, "kb.http: no kbrun runtime in this Lua state");
  lclient *lc = lua_newuserdatauv(L, sizeof *lc, 0);
  lc->c = NULL;
  luaL_setmetatable(L, CLIENT_META);
  if (!(lc->c = kb_http_client_new(kb_rt_loop(rt), opts)))
    kb_error_raise(L, "resource", "kb.http: cannot create an HTTP client (libcurl failed "
                   "to initialise)");
  kb_http_client_set_clock(lc->c, kb_rt_clock(rt));
  return lc;
}

static kb_http_client *default_client(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &DEFAULT_KEY);
  lclient *lc = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (lc) return lc->c;
  lc = push_client(L, NULL);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &DEFAULT_KEY);
  return lc->c;
}

static kb_http_client *check_client(lua_State *L, int idx) {
  lclient *lc = luaL_checkudata(L, idx, CLIENT_META);
  if (!lc->c) luaL_error(L, "kb.http: the client is closed");
  return lc->c;
}

static int client_close(lua_State *L) {
  lclient *lc = luaL_checkudata(L, 1, CLIENT_META);
  if (lc->c) {
    if (kb_http_client_active(lc->c))
      return luaL_error(L, "kb.http: cannot close a client with requests in flight");
    kb_http_client_free(lc->c);
    lc->c = NULL;
  }
  return 0;
}

static int client_gc(lua_State *L) {
  lclient *lc = luaL_checkudata(L, 1, CLIENT_META);
  kb_http_client_free(lc->c); /* tasks' requests were cancelled before */
  lc->c = NULL;
  return 0;
}

/* A to-be-closed client: freed at once unless other tasks still use it
 * (they would never be woken); the collector frees it then. */
static int client_tbc(lua_State *L) {
  lclient *lc = luaL_checkudata(L, 1, CLIENT_META);
  if (lc->c && kb_http_client_active(lc->c) == 0) {
    kb_http_client_free(lc->c);
    lc->c = NULL;
  }
  return 0;
}

static int client_active(lua_State *L) {
  lclient *lc = luaL_checkudata(L, 1, CLIENT_META);
  lua_pushinteger(L, lc->c ? (lua_Integer)kb_http_client_active(lc->c) : 0);
  return 1;
}

static int client_tostring(lua_State *L) {
  lclient *lc = luaL_checkudata(L, 1, CLIENT_META);
  if (lc->c) lua_pushfstring(L, "kb.http.client (%d in flight)", (int)kb_http_client_active(lc->c));
  else lua_pushliteral(L, "kb.http.client (closed)");
  return 1;
}

/* kb.http.client{max_connections=, max_host_connections=} -> client */
static int l_client(lua_State *L) {
  kb_http_client_opts o = {0, 0};
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
      const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
      if (strcmp(k, "max_connections") != 0 && strcmp(k, "max_host_connections") != 0)
        luaL_error(L, "kb.http.client: unknown option '%s' (expected max_connections, "
                   "max_host_connections)", k);
      lua_pop(L, 1);
    }
    o.max_connections = (long)kb_opt_integer(L, 1, "max_connections", 0);
    o.max_host_connections = (long)kb_opt_integer(L, 1, "max_host_connections", 0);
    if (o.max_connections < 0 || o.max_host_connections < 0)
      luaL_error(L, "kb.http.client: connection limits must be positive");
  }
  push_client(L, &o);
  return 1;
}

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

/* ---- completion ----------------------------------------------------------------------- */


/* push_result(r): the response table, or the error object. Protected. */
static int push_result(lua_State *L) {
  kb_http_request *r = lua_touserdata(L, 1);
  const kb_http_response *resp = kb_http_request_response(r);
  if (resp->error) kb__lhttp_push_error(L, resp);
  else kb__lhttp_push_response(L, kb_rt_from_lua(L), resp);
  return 1;
}

/* In the task, once it resumes: the request's outcome, built under a
 * protected call so the request is freed whatever happens, and freed
 * before the task goes on (it may reuse the handle). */
static int deliver_response(lua_State *L, void *op) {
  kb_http_request *r = op;
  int failed = kb_http_request_response(r)->error != KB_HTTP_OK;
  if (!lua_checkstack(L, 4)) {
    kb_http_request_free(r);
    return luaL_error(L, "kb.http: out of memory delivering a response");
  }
  lua_pushcfunction(L, push_result);
  lua_pushlightuserdata(L, r);
  int status = lua_pcall(L, 1, 1, 0);
  kb_http_request_free(r);
  if (status != LUA_OK || failed) return lua_error(L);
  return 1;
}

/* From the client's loop callback: nothing is pushed here (a suspended
 * coroutine has no error handler); the task builds the response itself.
 * Until then the finished request belongs to the task: delivered, or freed
 * by on_cancel if the task is cancelled first. */
static void on_done(kb_http_request *r, const kb_http_response *resp, void *ud) {
  (void)r;
  (void)resp;
  kb_task_deliver(ud, deliver_response);
}

/* Aborts a running request, or frees a finished one not delivered. */
static void on_cancel(void *op) { kb_http_request_cancel(op); }

/* ---- the calls ------------------------------------------------------------------------- */

/* Reads the arguments of a call into s (raises on a bad one). The
 * options come last; their slots go above them. */
void kb__lhttp_read_call(lua_State *L, kb_lhttp_spec *s, int url, int body, int opts) {
  lua_settop(L, opts);
  if (url) s->url = luaL_checkstring(L, url);
  if (lua_isnil(L, opts)) opts = 0;
  if (opts) luaL_checktype(L, opts, LUA_TTABLE);
  build_spec(L, s, opts, body);
}

int kb__lhttp_raise_start_error(lua_State *L, int err, const char *method) {
  if (err == -ENOTSUP)
    return kb_error_raise(L, "other", "kb.http: an option of this %s request is not "
                          "supported by the libcurl kbrun runs with", method);
  return kb_error_raise(L, "resource", "kb.http: cannot start %s request: %s", method,
                        strerror(-err));
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

static int do_request(lua_State *L, kb_http_client *c, const char *method, int url, int body,
                      int opts) {
  kb_task *t = kb_task_running(L);
  kb_lhttp_spec s = {.method = method, .o = KB_HTTP_OPTIONS_INIT, .max_body = KB_LHTTP_MAX_BODY};
  kb__lhttp_read_call(L, &s, url, body, opts);
  kb_http_request *r = kb__lhttp_new_request(L, c, &s);
  int err = kb_http_request_set_max_body(r, (size_t)s.max_body);
  if (err == 0) err = kb_http_request_start(r, on_done, t);
  if (err != 0) {
    kb_http_request_free(r);
    return kb__lhttp_raise_start_error(L, err, s.method);
  }
  return kb_task_await(L, t, on_cancel, r);
}

/* kb.http.stream(opts) -> stream, once the response head has arrived */
static int l_stream(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  kb_http_client *c = default_client(L);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &DEFAULT_KEY);
  lua_insert(L, 1); /* the client, then the options */
  return kb__lhttp_stream_open(L, c, 1, 2);
}

static int c_stream(lua_State *L) {
  return kb__lhttp_stream_open(L, check_client(L, 1), 1, 2);
}

/* Module functions use the shared client; client methods their own. The
 * argument layout is the same after the client. */
#define VERBS(X)                                                              \
  X(get, "GET", 0) X(head, "HEAD", 0) X(delete, "DELETE", 0)                  \
  X(post, "POST", 1) X(put, "PUT", 1) X(patch, "PATCH", 1)

#define DEFINE_VERB(name, verb, has_body)                                     \
  static int l_##name(lua_State *L) {                                        \
    return do_request(L, default_client(L), verb, 1, has_body ? 2 : 0,        \
                      has_body ? 3 : 2);                                      \
  }                                                                           \
  static int c_##name(lua_State *L) {                                        \
    return do_request(L, check_client(L, 1), verb, 2, has_body ? 3 : 0,       \
                      has_body ? 4 : 3);                                      \
  }
VERBS(DEFINE_VERB)

static int l_request(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return do_request(L, default_client(L), "GET", 0, 0, 1);
}

static int c_request(lua_State *L) {
  kb_http_client *c = check_client(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  return do_request(L, c, "GET", 0, 0, 2);
}

#define REG_L(name, verb, has_body) {#name, l_##name},
#define REG_C(name, verb, has_body) {#name, c_##name},

static const luaL_Reg client_methods[] = {
  {"request", c_request},
  {"stream", c_stream},
  VERBS(REG_C)
  {"active", client_active},
  {"close", client_close},
  {NULL, NULL}
};

static const luaL_Reg client_meta[] = {
  {"__gc", client_gc},
  {"__close", client_tbc},
  {"__tostring", client_tostring},
  {NULL, NULL}
};

/* kb.http.active() -> requests in flight on the shared client */
static int l_active(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &DEFAULT_KEY);
  lclient *lc = lua_touserdata(L, -1);
  lua_pushinteger(L, lc && lc->c ? (lua_Integer)kb_http_client_active(lc->c) : 0);
  return 1;
}

static const luaL_Reg http_functions[] = {
  {"request", l_request},
  {"stream", l_stream},
  VERBS(REG_L)
  {"client", l_client},
  {"active", l_active},
  {NULL, NULL}
};

int luaopen_kb_http(lua_State *L) {
  kb_new_class(L, CLIENT_META, client_methods, client_meta);
  kb__lhttp_stream_register(L);
  kb__lhttp_response_register(L);
  luaL_newlib(L, http_functions);
  return 1;
}
