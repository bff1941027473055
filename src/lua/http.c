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
 * Streams (kb.http.stream): src/lua/http_stream.c. Turning a call's
 * arguments into a request (options checked, then built): http_build.c. */
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

int kb__lhttp_raise_start_error(lua_State *L, int err, const char *method) {
  if (err == -ENOTSUP)
    return kb_error_raise(L, "other", "kb.http: an option of this %s request is not "
                          "supported by the libcurl kbrun runs with", method);
  return kb_error_raise(L, "resource", "kb.http: cannot start %s request: %s", method,
                        strerror(-err));
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
