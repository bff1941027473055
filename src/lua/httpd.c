/* kb.httpd: HTTP servers on the scenario's loop, for tests and mock
 * services, over the C server of include/kb/http_server.h.
 *
 *   local httpd = require "kb.httpd"
 *   local srv = httpd.listen{port = 0, handler = function(req)
 *     if req.path == "/slow" then kb.sleep(0.5) end
 *     return 200, "hello " .. req.method, {["Content-Type"] = "text/plain"}
 *   end}
 *   local r = kb.http.get(srv.url .. "/slow")
 *   srv:close()
 *
 * kb.httpd.listen{host=, port=, handler=, max_body=, max_header=,
 *   idle_timeout=} -> server. host defaults to 127.0.0.1, port to 0 (any
 * free port); max_body and max_header are bytes (defaults 64 MiB, 64 KiB),
 * idle_timeout real seconds (default 60). A bind failure raises an error of
 * class "listen".
 *
 * The server: srv.port, srv.host, srv.url ("http://127.0.0.1:PORT"),
 * srv.requests (requests handed to the handler so far), srv:close()
 * (suspends the calling task until every connection is closed; also works
 * as a to-be-closed variable, then without waiting).
 *
 * Each request runs handler(req) as a new task, so the handler may sleep or
 * make its own requests. req = {method, path, query ("" if none), target,
 * headers (lower-case names; repeated headers joined with ", "), body,
 * remote ("127.0.0.1:PORT")}. The handler returns one of
 *   status, body, headers                  body a string, headers {name =
 *                                          value | {value, ...}}
 *   {status =, headers =, body =}          status defaults to 200
 *   {chunks = {...}, chunk_delay = s, status =, headers =}
 *                                          a chunked response, chunk_delay
 *                                          scenario seconds between chunks;
 *                                          a function in chunks is called
 *                                          (in the handler's task, so it may
 *                                          wait) when its turn comes and
 *                                          returns the chunk's text
 *   {reset = true, partial = "raw bytes"}  writes partial, then resets the
 *                                          connection (fault injection)
 * A handler that raises (or returns something else) yields a 500 whose
 * body is the error message; the error and its traceback are logged and
 * the scenario goes on. If the client disconnects first, the handler's task
 * is cancelled.
 *
 * kb.httpd.parse_multipart(content_type, body [, max_parts]) -> list of
 *   {name, filename, content_type, headers, data}; raises class "multipart".
 * kb.httpd.build_multipart{ {name=, data=, filename=, content_type=}, ...}
 *   -> body, content_type */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/http_server.h"
#include "kb/log.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/multipart.h"
#include "kb/rt.h"

#define SERVER_META "kb.httpd.server"
#define MULTIPART_META "kb.httpd.multipart"

#define CANCELLED_BODY "kb.httpd: the handler was cancelled\n"
#define NOSTART_BODY "kb.httpd: cannot start the handler\n"

typedef struct lreq lreq;

/* The server userdata. While the server is open the registry holds it, so
 * C callbacks can always reach it; its user value 1 is the handler. */
typedef struct lsrv {
  kb_httpd *srv;      /* NULL once closed */
  lua_State *L;       /* the runtime's main state */
  int ref;            /* registry reference while open */
  int closing;
  kb_task *closer;    /* the task waiting in srv:close() */
  lreq *live;         /* requests not finished yet */
  lua_Integer requests;
  int port;
  char host[64];
  char url[96];
} lsrv;

/* One request being handled: a userdata passed to the handler's task and
 * anchored in the registry until the C request is finished. Its user value
 * 1 is the task. */
struct lreq {
  kb_httpd_req *req;  /* NULL once finished (answered, or the client left) */
  kb_task *task;
  lsrv *srv;
  lreq *prev, *next;  /* srv->live */
  int ref;
  int streaming;      /* a chunked response was begun */
  int done;           /* the task finished */
  char what[96];      /* "GET /path", for log lines */
};

/* ---- request bookkeeping ------------------------------------------------------ */

static void lreq_unlink(lreq *q) {
  if (q->prev) q->prev->next = q->next;
  else q->srv->live = q->next;
  if (q->next) q->next->prev = q->prev;
  q->prev = q->next = NULL;
}

/* The C request was finished: forget it and drop the anchor. */
static void lreq_release(lua_State *L, lreq *q) {
  q->req = NULL;
  lreq_unlink(q);
  luaL_unref(L, LUA_REGISTRYINDEX, q->ref);
  q->ref = LUA_NOREF;
}

static void on_abort(kb_httpd_req *req, void *ud) {
  lreq *q = ud;
  lua_State *L = q->srv->L;
  kb_httpd_reset(req, NULL, 0); /* only releases it: the client is gone */
  q->req = NULL;
  if (!q->done) kb_task_cancel(q->task);
  lreq_release(L, q);
}

/* ---- the request table ---------------------------------------------------------- */

static void push_lower(lua_State *L, const char *s) {
  luaL_Buffer b;
  size_t n = strlen(s);
  char *p = luaL_buffinitsize(L, &b, n);
  for (size_t i = 0; i < n; i++) p[i] = (char)tolower((unsigned char)s[i]);
  luaL_pushresultsize(&b, n);
}

static void push_request(lua_State *L, kb_httpd_req *req) {
  lua_createtable(L, 0, 7);
  lua_pushstring(L, kb_httpd_req_method(req));
  lua_setfield(L, -2, "method");
  lua_pushstring(L, kb_httpd_req_path(req));
  lua_setfield(L, -2, "path");
  lua_pushstring(L, kb_httpd_req_query(req));
  lua_setfield(L, -2, "query");
  lua_pushstring(L, kb_httpd_req_target(req));
  lua_setfield(L, -2, "target");
  lua_pushstring(L, kb_httpd_req_remote(req));
  lua_setfield(L, -2, "remote");
  size_t len;
  const char *body = kb_httpd_req_body(req, &len);
  lua_pushlstring(L, body, len);
  lua_setfield(L, -2, "body");

  size_t n = kb_httpd_req_header_count(req);
  lua_createtable(L, 0, (int)n);
  for (size_t i = 0; i < n; i++) {
    const kb_httpd_header *h = kb_httpd_req_header_at(req, i);
    push_lower(L, h->name);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, -3) == LUA_TSTRING) { /* repeated: join as one value */
      lua_pushliteral(L, ", ");
      lua_pushstring(L, h->value);
      lua_concat(L, 3);
    } else {
      lua_pop(L, 1);
      lua_pushstring(L, h->value);
    }
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "headers");
}

/* ---- the handler's task ------------------------------------------------------------ */

/* Message handler: the error with a traceback, except cancellation, which
 * must stay recognisable. */
static int msgh(lua_State *L) {
  if (kb_task_is_cancelled_error(L, 1)) return 1;
  const char *msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  kb_chunkid_expand(L, L, lua_tostring(L, -1));
  return 1;
}

/* Answers 500 with the error on top of the stack (a message from msgh) and
 * logs it with its traceback. */
static void handler_failed(lua_State *L, lreq *q) {
  size_t len;
  const char *full = lua_tolstring(L, -1, &len);
  if (!full) full = "(error object is not a string)";
  kb_log(KB_LOG_ERROR, "kb.httpd: handler for %s failed: %s", q->what, full);
  if (!q->req) return;
  const char *tb = strstr(full, "\nstack traceback:");
  size_t mlen = tb ? (size_t)(tb - full) : strlen(full);
  if (q->streaming) kb_httpd_stream_end(q->req); /* too late for a status */
  else kb_httpd_respond(q->req, 500, NULL, 0, full, mlen);
  lreq_release(L, q);
}

/* Collects a headers table into a scratch array anchored on the stack.
 * Raises on values that are neither strings, numbers nor lists of them. */
static kb_httpd_header *collect_headers(lua_State *L, int idx, size_t *n) {
  *n = 0;
  if (lua_isnoneornil(L, idx)) return NULL;
  if (!lua_istable(L, idx))
    luaL_error(L, "response headers must be a table, got %s", luaL_typename(L, idx));
  idx = lua_absindex(L, idx);
  size_t count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    count += lua_istable(L, -1) ? lua_rawlen(L, -1) : 1;
    lua_pop(L, 1);
  }
  kb_httpd_header *h = lua_newuserdatauv(L, (count ? count : 1) * sizeof *h, 1);
  lua_newtable(L); /* keeps strings converted from numbers alive */
  lua_setiuservalue(L, -2, 1);
  lua_getiuservalue(L, -1, 1);
  int keep = lua_gettop(L), kept = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "response header names must be strings, got %s", luaL_typename(L, -2));
    const char *name = lua_tostring(L, -2);
    int list = lua_istable(L, -1);
    size_t nv = list ? lua_rawlen(L, -1) : 1;
    for (size_t i = 1; i <= nv && *n < count; i++) {
      if (list) lua_rawgeti(L, -1, (lua_Integer)i);
      else lua_pushvalue(L, -1);
      int t = lua_type(L, -1);
      if (t != LUA_TSTRING && t != LUA_TNUMBER)
        luaL_error(L, "response header '%s' must be a string or a number, got %s", name,
                   luaL_typename(L, -1));
      h[*n].name = name;
      h[*n].value = lua_tostring(L, -1); /* converts numbers in place */
      lua_rawseti(L, keep, ++kept);
      (*n)++;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1); /* the keep table: still held by the userdata's user value */
  return h;
}

static int check_status(lua_State *L, int idx) {
  if (lua_isnil(L, idx)) return 200;
  int isint = 0;
  lua_Integer s = lua_tointegerx(L, idx, &isint);
  if (!isint || s < 100 || s > 999)
    luaL_error(L, "the handler returned an invalid status %s (expected an integer 100..999)",
               luaL_tolstring(L, idx, NULL));
  return (int)s;
}

static int respond_plain(lua_State *L, lreq *q, int si, int bi, int hi) {
  int status = check_status(L, si);
  size_t len = 0;
  const char *body = "";
  if (!lua_isnil(L, bi)) {
    if (lua_type(L, bi) != LUA_TSTRING)
      luaL_error(L, "the response body must be a string, got %s", luaL_typename(L, bi));
    body = lua_tolstring(L, bi, &len);
  }
  size_t n;
  kb_httpd_header *h = collect_headers(L, hi, &n);
  if (kb_httpd_respond(q->req, status, h, n, body, len) == KB_HTTPD_EINVAL)
    luaL_error(L, "invalid response header (a name with ':' or blanks, or CR/LF in a value)");
  lreq_release(L, q);
  return 0;
}

/* Writes chunks[i..] with the delay between them. ctx = 4 * i + phase:
 * 0 chunk i not begun, 1 the delay before it slept, 2 its function
 * returned (the text is on top). */
static int chunks_k(lua_State *L, int status, lua_KContext ctx) {
  lreq *q = lua_touserdata(L, 1);
  lua_Integer i = (lua_Integer)(ctx >> 2);
  int phase = (int)(ctx & 3);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  lua_Number delay = lua_tonumber(L, 3);
  for (; i <= n; i++, phase = 0) {
    if (!q->req) return 0; /* the client left */
    if (phase == 0 && i > 1 && delay > 0) {
      luaL_requiref(L, "kb.core", luaopen_kb_core, 0);
      lua_getfield(L, -1, "sleep");
      lua_remove(L, -2);
      lua_pushnumber(L, delay);
      lua_callk(L, 1, 0, (lua_KContext)(4 * i + 1), chunks_k);
    }
    if (phase < 2 && lua_rawgeti(L, 2, i) == LUA_TFUNCTION)
      lua_callk(L, 0, 1, (lua_KContext)(4 * i + 2), chunks_k);
    if (!q->req) return 0; /* left while the function waited */
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "chunks[%d]: the function returned %s; expected a string", (int)i,
                 luaL_typename(L, -1));
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    kb_httpd_stream_write(q->req, s, len);
    lua_pop(L, 1);
  }
  if (q->req) {
    kb_httpd_stream_end(q->req);
    lreq_release(L, q);
  }
  return 0;
}

static int respond_chunks(lua_State *L, lreq *q, int t, int ci) {
  lua_Integer n = (lua_Integer)lua_rawlen(L, ci);
  for (lua_Integer i = 1; i <= n; i++) {
    int vt = lua_rawgeti(L, ci, i);
    if (vt != LUA_TSTRING && vt != LUA_TFUNCTION)
      luaL_error(L, "chunks[%d] must be a string or a function, got %s", (int)i,
                 luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  lua_getfield(L, t, "chunk_delay");
  lua_Number delay = 0;
  if (!lua_isnil(L, -1)) {
    int isnum = 0;
    delay = lua_tonumberx(L, -1, &isnum);
    if (!isnum || !(delay >= 0))
      luaL_error(L, "chunk_delay must be a non-negative number of seconds");
  }
  lua_getfield(L, t, "status");
  int status = check_status(L, -1);
  lua_getfield(L, t, "headers");
  size_t nh;
  kb_httpd_header *h = collect_headers(L, -1, &nh);
  if (kb_httpd_stream_begin(q->req, status, h, nh) == KB_HTTPD_EINVAL)
    luaL_error(L, "invalid response header (a name with ':' or blanks, or CR/LF in a value)");
  q->streaming = 1;
  lua_pushvalue(L, ci);
  lua_replace(L, 2);
  lua_pushnumber(L, delay);
  lua_replace(L, 3);
  lua_settop(L, 3); /* lreq, chunks, delay */
  return chunks_k(L, LUA_OK, 4 * 1);
}

/* deliver(lreq, results...): turns what the handler returned into the
 * response. Runs protected; raises on malformed results. */
static int deliver(lua_State *L) {
  lreq *q = lua_touserdata(L, 1);
  int n = lua_gettop(L) - 1;
  if (!q->req) return 0;
  lua_settop(L, n < 4 ? 4 : n + 1);
  if (lua_type(L, 2) == LUA_TNUMBER) return respond_plain(L, q, 2, 3, 4);
  if (n >= 1 && lua_type(L, 2) == LUA_TTABLE) {
    lua_getfield(L, 2, "reset");
    if (lua_toboolean(L, -1)) {
      lua_getfield(L, 2, "partial");
      size_t len = 0;
      const char *partial = NULL;
      if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING)
          luaL_error(L, "partial must be a string, got %s", luaL_typename(L, -1));
        partial = lua_tolstring(L, -1, &len);
      }
      kb_httpd_reset(q->req, partial, len);
      lreq_release(L, q);
      return 0;
    }
    if (lua_getfield(L, 2, "chunks") == LUA_TTABLE) return respond_chunks(L, q, 2, lua_gettop(L));
    int base = lua_gettop(L);
    lua_getfield(L, 2, "status");
    lua_getfield(L, 2, "body");
    lua_getfield(L, 2, "headers");
    return respond_plain(L, q, base + 1, base + 2, base + 3);
  }
  return luaL_error(L, "the handler returned %s; expected status, body, headers or a "
                       "response table",
                    n == 0 ? "nothing" : luaL_typename(L, 2));
}

static int serve_finish(lua_State *L, int status, lua_KContext ctx) {
  lreq *q = lua_touserdata(L, 1);
  if (status != LUA_OK && status != LUA_YIELD) {
    if (!kb_task_is_cancelled_error(L, -1)) {
      handler_failed(L, q);
    } else if (q->req) { /* cancelled for another reason than the client leaving */
      if (q->streaming) kb_httpd_stream_end(q->req);
      else kb_httpd_respond(q->req, 503, NULL, 0, CANCELLED_BODY, sizeof CANCELLED_BODY - 1);
      lreq_release(L, q);
    }
  }
  q->done = 1;
  return 0;
}

/* After the handler: deliver its results, protected as well. */
static int serve_k(lua_State *L, int status, lua_KContext ctx) {
  if (status != LUA_OK && status != LUA_YIELD) return serve_finish(L, status, 0);
  lua_pushcfunction(L, deliver);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 2); /* lreq, msgh, deliver, lreq, results... */
  int nargs = lua_gettop(L) - 3;
  return serve_finish(L, lua_pcallk(L, nargs, 0, 2, 0, serve_finish), 0);
}

/* The task body: serve(lreq, handler, req). */
static int serve(lua_State *L) {
  lua_pushcfunction(L, msgh);
  lua_insert(L, 2); /* lreq, msgh, handler, req */
  return serve_k(L, lua_pcallk(L, 1, LUA_MULTRET, 2, 0, serve_k), 0);
}

/* Protected part of on_request: spawn(serve, lreq, handler, req). */
static int start_request(lua_State *L) {
  lsrv *s = lua_touserdata(L, 1);
  kb_httpd_req *req = lua_touserdata(L, 2);
  lua_settop(L, 0);
  lua_pushcfunction(L, serve);
  lreq *q = lua_newuserdatauv(L, sizeof *q, 1);
  memset(q, 0, sizeof *q);
  q->srv = s;
  q->ref = LUA_NOREF;
  snprintf(q->what, sizeof q->what, "%s %s", kb_httpd_req_method(req), kb_httpd_req_path(req));
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref);
  lua_getiuservalue(L, -1, 1);
  lua_remove(L, -2);
  push_request(L, req);
  lua_pushvalue(L, 2);
  int qref = luaL_ref(L, LUA_REGISTRYINDEX);
  q->task = kb_task_spawn(L, 3);
  lua_rawgeti(L, LUA_REGISTRYINDEX, qref); /* the lreq keeps its task */
  lua_insert(L, -2);
  lua_setiuservalue(L, -2, 1);
  /* Nothing raises from here on. */
  q->req = req;
  q->ref = qref;
  q->next = s->live;
  if (s->live) s->live->prev = q;
  s->live = q;
  kb_httpd_req_on_abort(req, on_abort, q);
  return 0;
}

static void on_request(kb_httpd_req *req, void *ud) {
  lsrv *s = ud;
  lua_State *L = s->L;
  int top = lua_gettop(L);
  s->requests++;
  lua_pushcfunction(L, start_request);
  lua_pushlightuserdata(L, s);
  lua_pushlightuserdata(L, req);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    kb_log(KB_LOG_ERROR, "kb.httpd: cannot start a handler task: %s", msg ? msg : "?");
    kb_httpd_respond(req, 503, NULL, 0, NOSTART_BODY, sizeof NOSTART_BODY - 1);
  }
  lua_settop(L, top);
}

/* ---- the server object ------------------------------------------------------------ */

static lsrv *check_server(lua_State *L, int idx) { return luaL_checkudata(L, idx, SERVER_META); }

static void on_closed(kb_httpd *srv, void *ud) {
  lsrv *s = ud;
  kb_task *t = s->closer;
  int ref = s->ref;
  s->srv = NULL;
  s->closer = NULL;
  s->ref = LUA_NOREF;
  if (t) kb_task_wake(t);
  luaL_unref(s->L, LUA_REGISTRYINDEX, ref);
}

static void cancel_close_wait(void *op) {
  lsrv *s = op;
  s->closer = NULL;
}

/* Starts closing; returns 1 if there is something to wait for. */
static int server_close(lsrv *s) {
  if (!s->srv || s->closing) return 0;
  s->closing = 1;
  kb_httpd_close(s->srv, on_closed, s);
  return 1;
}

static int srv_close(lua_State *L) {
  lsrv *s = check_server(L, 1);
  kb_task *t = kb_task_of(L);
  if (!server_close(s) || !t || kb_task_thread(t) != L || s->closer) return 0;
  s->closer = t;
  return kb_task_await(L, t, cancel_close_wait, s);
}

static int srv_close_nowait(lua_State *L) {
  server_close(check_server(L, 1));
  return 0;
}

/* At lua_close: nothing may call back into Lua any more. */
static int srv_gc(lua_State *L) {
  lsrv *s = check_server(L, 1);
  if (!s->srv) return 0;
  while (s->live) {
    lreq *q = s->live;
    kb_httpd_req *req = q->req;
    lreq_unlink(q);
    q->req = NULL;
    kb_httpd_reset(req, NULL, 0);
  }
  kb_httpd_close(s->srv, NULL, NULL); /* replaces on_closed if already closing */
  s->srv = NULL;
  return 0;
}

static const luaL_Reg server_methods[] = {
  {"close", srv_close},
  {NULL, NULL}
};

static int srv_index(lua_State *L) {
  lsrv *s = check_server(L, 1);
  const char *k = luaL_checkstring(L, 2);
  for (const luaL_Reg *m = server_methods; m->name; m++) {
    if (strcmp(k, m->name) == 0) {
      lua_pushcfunction(L, m->func);
      return 1;
    }
  }
  if (strcmp(k, "port") == 0) lua_pushinteger(L, s->port);
  else if (strcmp(k, "host") == 0) lua_pushstring(L, s->host);
  else if (strcmp(k, "url") == 0) lua_pushstring(L, s->url);
  else if (strcmp(k, "requests") == 0) lua_pushinteger(L, s->requests);
  else lua_pushnil(L);
  return 1;
}

static int srv_tostring(lua_State *L) {
  lsrv *s = check_server(L, 1);
  lua_pushfstring(L, "kb.httpd.server %s (%s)", s->url,
                  s->srv ? (s->closing ? "closing" : "open") : "closed");
  return 1;
}

static const luaL_Reg server_meta[] = {
  {"__index", srv_index},
  {"__gc", srv_gc},
  {"__close", srv_close_nowait},
  {"__tostring", srv_tostring},
  {NULL, NULL}
};

/* kb.httpd.listen{host=, port=, handler=, max_body=, max_header=, idle_timeout=} */
static int l_listen(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  kb_rt *rt = kb_rt_from_lua(L);
  if (!rt) return luaL_error(L, "kb.httpd.listen: no kbrun runtime in this Lua state");
  const char *host = kb_opt_string(L, 1, "host", "127.0.0.1");
  lua_Integer port = kb_opt_integer(L, 1, "port", 0);
  if (port < 0 || port > 65535)
    return luaL_error(L, "kb.httpd.listen: port %d out of range", (int)port);
  if (strlen(host) >= sizeof ((lsrv *)0)->host)
    return luaL_error(L, "kb.httpd.listen: host '%s' is too long", host);
  if (lua_getfield(L, 1, "handler") != LUA_TFUNCTION)
    return luaL_error(L, "kb.httpd.listen: option 'handler' must be a function, got %s",
                      luaL_typename(L, -1));
  kb_httpd_config cfg = {0};
  lua_Integer max_body = kb_opt_integer(L, 1, "max_body", 0);
  lua_Integer max_header = kb_opt_integer(L, 1, "max_header", 0);
  lua_Number idle = kb_opt_number(L, 1, "idle_timeout", 0);
  if (max_body < 0 || max_header < 0 || idle < 0)
    return luaL_error(L, "kb.httpd.listen: max_body, max_header and idle_timeout must be >= 0");
  cfg.max_body_size = (size_t)max_body;
  cfg.max_header_size = (size_t)max_header;
  cfg.idle_timeout_ms = (uint64_t)(idle * 1000.0);

  lsrv *s = lua_newuserdatauv(L, sizeof *s, 1);
  memset(s, 0, sizeof *s);
  s->ref = LUA_NOREF;
  s->L = kb_rt_lua(rt);
  snprintf(s->host, sizeof s->host, "%s", host);
  luaL_setmetatable(L, SERVER_META);
  lua_pushvalue(L, -2);
  lua_setiuservalue(L, -2, 1);
  s->srv = kb_httpd_new(kb_rt_loop(rt), &cfg, on_request, s);
  if (!s->srv) return kb_error_raise(L, "resource", "kb.httpd.listen: out of memory");
  int rc = kb_httpd_listen(s->srv, host, (int)port);
  if (rc != 0) {
    kb_httpd_close(s->srv, NULL, NULL);
    s->srv = NULL;
    int e = kb_error_new(L, "listen", "kb.httpd.listen: cannot listen on %s port %d: %s", host,
                         (int)port, kb_httpd_strerror(rc));
    lua_pushstring(L, host);
    lua_setfield(L, e, "host");
    lua_pushinteger(L, port);
    lua_setfield(L, e, "port");
    return lua_error(L);
  }
  s->port = kb_httpd_port(s->srv);
  int v6 = strchr(host, ':') && host[0] != '[';
  snprintf(s->url, sizeof s->url, "http://%s%s%s:%d", v6 ? "[" : "",
           strcmp(host, "localhost") == 0 ? "127.0.0.1" : host, v6 ? "]" : "", s->port);
  lua_pushvalue(L, -1);
  s->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

/* ---- multipart ------------------------------------------------------------------------ */

static int multipart_gc(lua_State *L) {
  kb_multipart_free(luaL_checkudata(L, 1, MULTIPART_META));
  return 0;
}

static void set_opt_string(lua_State *L, const char *key, const char *value) {
  if (!value) return;
  lua_pushstring(L, value);
  lua_setfield(L, -2, key);
}

/* kb.httpd.parse_multipart(content_type, body [, max_parts]) -> parts */
static int l_parse_multipart(lua_State *L) {
  const char *ct = luaL_checkstring(L, 1);
  size_t len;
  const char *body = luaL_checklstring(L, 2, &len);
  lua_Integer max_parts = luaL_optinteger(L, 3, 0);
  luaL_argcheck(L, max_parts >= 0, 3, "must be >= 0");
  kb_multipart *mp = lua_newuserdatauv(L, sizeof *mp, 0);
  memset(mp, 0, sizeof *mp);
  luaL_setmetatable(L, MULTIPART_META); /* frees the parts even if we raise */
  char err[KB_MULTIPART_ERRLEN];
  if (kb_multipart_parse(mp, ct, body, len, (size_t)max_parts, err, sizeof err) != 0) {
    const char *msg = strncmp(err, "multipart: ", 11) == 0 ? err + 11 : err;
    return kb_error_raise(L, "multipart", "%s", msg);
  }
  lua_createtable(L, (int)mp->nparts, 0);
  for (size_t i = 0; i < mp->nparts; i++) {
    const kb_multipart_part *p = &mp->parts[i];
    lua_createtable(L, 0, 5);
    set_opt_string(L, "name", p->name);
    set_opt_string(L, "filename", p->filename);
    set_opt_string(L, "content_type", p->content_type);
    lua_pushlstring(L, p->data, p->len);
    lua_setfield(L, -2, "data");
    lua_createtable(L, 0, (int)p->nheaders);
    for (size_t k = 0; k < p->nheaders; k++) {
      push_lower(L, p->headers[k].name);
      lua_pushstring(L, p->headers[k].value);
      lua_rawset(L, -3);
    }
    lua_setfield(L, -2, "headers");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  kb_multipart_free(mp);
  return 1;
}

static const char *field_string(lua_State *L, int t, const char *key, size_t *len, int i) {
  int type = lua_getfield(L, t, key);
  if (type == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  if (type != LUA_TSTRING)
    luaL_error(L, "kb.httpd.build_multipart: part %d: '%s' must be a string, got %s", i, key,
               luaL_typename(L, -1));
  const char *s = lua_tolstring(L, -1, len);
  lua_pop(L, 1); /* the part table still holds it */
  return s;
}

/* kb.httpd.build_multipart{ {name=, data=, filename=, content_type=}, ...} -> body, ct */
static int l_build_multipart(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  size_t n = lua_rawlen(L, 1);
  kb_multipart_field *f = lua_newuserdatauv(L, (n ? n : 1) * sizeof *f, 0);
  for (size_t i = 0; i < n; i++) {
    if (lua_rawgeti(L, 1, (lua_Integer)i + 1) != LUA_TTABLE)
      return luaL_error(L, "kb.httpd.build_multipart: part %d must be a table", (int)i + 1);
    int t = lua_gettop(L);
    memset(&f[i], 0, sizeof f[i]);
    f[i].name = field_string(L, t, "name", NULL, (int)i + 1);
    if (!f[i].name)
      return luaL_error(L, "kb.httpd.build_multipart: part %d has no name", (int)i + 1);
    f[i].data = field_string(L, t, "data", &f[i].len, (int)i + 1);
    f[i].filename = field_string(L, t, "filename", NULL, (int)i + 1);
    f[i].content_type = field_string(L, t, "content_type", NULL, (int)i + 1);
    lua_pop(L, 1);
  }
  kb_multipart_body out;
  char err[KB_MULTIPART_ERRLEN];
  if (kb_multipart_build(f, n, &out, err, sizeof err) != 0)
    return kb_error_raise(L, "multipart", "%s", strncmp(err, "multipart: ", 11) ? err : err + 11);
  lua_pushlstring(L, out.data, out.len);
  kb_multipart_body_free(&out);
  lua_pushstring(L, out.content_type);
  return 2;
}

static const luaL_Reg httpd_functions[] = {
  {"listen", l_listen},
  {"parse_multipart", l_parse_multipart},
  {"build_multipart", l_build_multipart},
  {NULL, NULL}
};

int luaopen_kb_httpd(lua_State *L) {
  kb_new_class(L, SERVER_META, NULL, server_meta);
  static const luaL_Reg mp_meta[] = {{"__gc", multipart_gc}, {NULL, NULL}};
  kb_new_class(L, MULTIPART_META, NULL, mp_meta);
  luaL_newlib(L, httpd_functions);
  return 1;
}
